"""Two revisions measured alternately in one sitting, and the summary of their figures.

Round r runs each figure four times: OLD NEW NEW OLD on odd rounds, NEW OLD OLD NEW on even
ones, so that a drift of the machine over the sitting weighs on both sides alike. A run
gives a tuple of numbers; a side's value in a round is the mean of its two runs and the
round's ratio is NEW/OLD of those means; the summary is the median ratio with [min, max].
"""
import statistics

SIDES = ("OLD", "NEW")
# What each number of a figure's run is. Counts (errors, acked, connections) are summed
# over the sitting instead of compared.
NAMES = {
    "closed1k": ["acked/s", "p50 µs", "p99 µs", "errors"],
    "closed36k": ["acked/s", "p50 µs", "p99 µs", "errors"],
    "one_repl": ["p50 µs", "acked/s", "errors"],
    "one_solo": ["p50 µs", "acked/s", "errors"],
    "mem36k": ["bytes/connection", "connections", "errors"],
    "open2k": ["server CPU µs/append", "acked", "errors"],
    "idle": ["server CPU %"],
}
COUNTS = ("errors", "acked", "connections")


def order(round_no):
    """The sides of round `round_no` (1-based), in the order they run."""
    assert round_no >= 1
    return ("OLD", "NEW", "NEW", "OLD") if round_no % 2 else ("NEW", "OLD", "OLD", "NEW")


class Sitting:
    """The runs of one sitting: runs[(figure, side, round)] = [tuple, tuple]."""

    def __init__(self, rounds):
        assert rounds >= 1
        self.rounds = rounds
        self.runs = {}

    def add(self, fig, side, round_no, values):
        assert side in SIDES and 1 <= round_no <= self.rounds
        assert len(values) == len(NAMES[fig]), f"{fig}: {values}"
        self.runs.setdefault((fig, side, round_no), []).append([float(v) for v in values])

    def _side(self, fig, side, k):
        """Per round, the mean of the side's runs for number k."""
        return [statistics.mean(r[k] for r in self.runs[(fig, side, n)]) for n in range(1, self.rounds + 1)]

    def lines(self, fig, floors=None):
        """The summary lines of one figure; `floors` may hold the extra denominators:
        disk (µs), disk_cpu0 (µs), pair_cpu (µs/append), pair_p50 (µs)."""
        floors = floors or {}
        out = []
        for k, name in enumerate(NAMES[fig]):
            if name in COUNTS:
                tot = {s: sum(r[k] for n in range(1, self.rounds + 1) for r in self.runs[(fig, s, n)]) for s in SIDES}
                out.append(f"{fig:9s} {name:22s} OLD total {tot['OLD']:.0f}  NEW total {tot['NEW']:.0f}")
                continue
            olds, news = self._side(fig, "OLD", k), self._side(fig, "NEW", k)
            ratios = [n / o if o else float("nan") for o, n in zip(olds, news)]
            mo, mn = statistics.median(olds), statistics.median(news)
            out.append(f"{fig:9s} {name:22s} NEW/OLD {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
                       f"   OLD median {mo:.1f}  NEW median {mn:.1f}")
            out += self._extra(fig, name, mo, mn, floors)
        return out

    def _extra(self, fig, name, mo, mn, floors):
        def over(label, floor, why):
            return f"{fig:9s} {label:22s} OLD {mo / floor:.2f}  NEW {mn / floor:.2f}   ({why})"

        out = []
        if fig.startswith("closed") and name == "p99 µs":
            p50 = {s: statistics.median(self._side(fig, s, 1)) for s in SIDES}
            out.append(f"{fig:9s} {'p99 / p50':22s} OLD {mo / p50['OLD']:.2f}  NEW {mn / p50['NEW']:.2f}"
                       + ("   (36k: the highest p50 and p99 of the 4 load generators)" if fig == "closed36k" else ""))
        if fig == "open2k" and name == "server CPU µs/append" and floors.get("pair_cpu"):
            f = floors["pair_cpu"]
            out.append(over("CPU / bare pair floor", f, f"floor {f:.1f} µs: benches/pair_floor.sh, the same work without corelog"))
        if fig == "one_repl" and name == "p50 µs" and floors.get("pair_p50"):
            f = floors["pair_p50"]
            out.append(over("p50 / bare pair p50", f,
                            f"bare pair {f:.0f} µs: benches/pair_floor.sh, one connection on CPU 0 without corelog"))
        if fig.startswith("one_") and name == "p50 µs" and floors.get("disk"):
            f = floors["disk"]
            out.append(over("p50 / disk floor", f, f"floor {f:.0f} µs: fio overwrite, write + fdatasync p50"))
            if floors.get("disk_cpu0"):
                f0 = floors["disk_cpu0"]
                out.append(over("p50 / CPU 0 floor", f0,
                                f"floor {f0:.0f} µs: the same fio pinned to CPU 0, where NEW serves the connection"))
        return out
