"""Unit tests of the pure parts of corelog's benchmark orchestration (python3 -m unittest)."""
import unittest

from corebench import abba, floor


class Schedule(unittest.TestCase):
    def test_rounds_alternate_and_balance(self):
        seen = [s for r in (1, 2) for s in abba.order(r)]
        self.assertEqual(seen[:4], ["OLD", "NEW", "NEW", "OLD"])
        self.assertEqual(seen[4:], ["NEW", "OLD", "OLD", "NEW"])
        # Every position of a round is held by each side equally often over two rounds.
        for i in range(4):
            self.assertNotEqual(abba.order(1)[i], abba.order(2)[i])


class Summary(unittest.TestCase):
    def sitting(self):
        s = abba.Sitting(2)
        for r, (old, new) in enumerate([((100, 10, 30, 0), (110, 10, 27, 0)), ((100, 12, 30, 1), (90, 12, 33, 0))], 1):
            for side, v in (("OLD", old), ("NEW", new)):
                s.add("closed1k", side, r, v)
                s.add("closed1k", side, r, v)
        return s

    def test_ratio_median_and_spread(self):
        lines = self.sitting().lines("closed1k")
        acked = next(l for l in lines if "acked/s" in l)
        # Round ratios 1.1 and 0.9: median 1.0, spread [0.9, 1.1].
        self.assertIn("NEW/OLD 1.000 [0.900, 1.100]", acked)
        errors = next(l for l in lines if "errors" in l)
        self.assertIn("OLD total 2  NEW total 0", errors)
        self.assertTrue(any("p99 / p50" in l for l in lines))

    def test_wrong_arity_is_refused(self):
        with self.assertRaises(AssertionError):
            abba.Sitting(1).add("idle", "OLD", 1, (1, 2))

    def test_floors_add_lines(self):
        s = abba.Sitting(1)
        for side in abba.SIDES:
            s.add("one_solo", side, 1, (200, 5000, 0))
        lines = s.lines("one_solo", {"disk": 100.0, "disk_cpu0": 50.0})
        self.assertTrue(any("p50 / disk floor" in l and "OLD 2.00  NEW 2.00" in l for l in lines))
        self.assertTrue(any("p50 / CPU 0 floor" in l and "OLD 4.00" in l for l in lines))


class Fio(unittest.TestCase):
    def test_parse_prefers_percentiles(self):
        rep = {"jobs": [{"write": {"clat_ns": {"mean": 9000, "percentile": {"50.000000": 8000}}, "iops": 1234.5},
                         "sync": {"lat_ns": {"mean": 150000}}}]}
        self.assertEqual(floor.parse(rep), (8.0, 150.0, 1234.5))


if __name__ == "__main__":
    unittest.main()
