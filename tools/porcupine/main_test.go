package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func run(t *testing.T, text string) verdict {
	t.Helper()
	h, err := parseHistory(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return check(h, 10*time.Second, "")
}

// Concurrent appends in any order, a failed one (dropped), an unknown one read back
// (takes its offset), an unknown one not read back (no effect), a foreign record.
const linearizable = `# corelog workload history v1
tag t
op 0 0 0 100 t-0-0- ok 0 10
op 1 0 5 50 t-1-0- ok 0 11
op 2 0 6 40 t-2-0- unknown connection closed before the answer
op 0 1 101 130 t-0-1- failed server error 5 NotLeader
op 0 2 131 200 t-0-2- ok 0 14
op 1 1 51 60 t-1-1- unknown no answer within 1s
op 3 0 70 90 t-3-0- ok 1 0
shard 0 start 10 len 15
shard 1 start 0 len 1
found 2 0 0 12
foreign 0 13
`

func TestLinearizable(t *testing.T) {
	v := run(t, linearizable)
	if v.result != porcupine.Ok {
		t.Fatalf("expected linearizable, got %s: %s", v.result, v.desc)
	}
}

func TestRealTimeInversionIsNotLinearizable(t *testing.T) {
	// conn 0's append completed (offset 11) before conn 1's was invoked, which then
	// got the lower offset 10: no order of appends to a log explains that.
	v := run(t, `op 0 0 0 10 a ok 0 11
op 1 0 20 30 b ok 0 10
shard 0 start 10 len 12
`)
	if v.result != porcupine.Illegal || !strings.Contains(v.desc, "before append conn 1 seq 0") {
		t.Fatalf("expected a real-time violation, got %s: %s", v.result, v.desc)
	}
}

func TestTwoAcksAtOneOffsetAreNotLinearizable(t *testing.T) {
	v := run(t, "op 0 0 0 10 a ok 0 0\nop 1 0 0 10 b ok 0 0\n")
	if v.result != porcupine.Illegal || !strings.Contains(v.desc, "both took") {
		t.Fatalf("expected a duplicate offset, got %s: %s", v.result, v.desc)
	}
}

func TestAGapOnlyAnUnreadUnknownCanFill(t *testing.T) {
	// Without a read-back the unknown append matches any output: it fills offset 1.
	gap := "op 0 0 0 10 a ok 0 0\nop 0 2 30 40 c ok 0 2\n"
	if v := run(t, gap+"op 1 0 0 25 b unknown closed\n"); v.result != porcupine.Ok {
		t.Fatalf("expected linearizable, got %s: %s", v.result, v.desc)
	}
	if v := run(t, gap); v.result != porcupine.Illegal {
		t.Fatalf("expected a gap at offset 1, got %s: %s", v.result, v.desc)
	}
	// Read back and not found: it cannot fill the gap.
	if v := run(t, gap+"op 1 0 0 25 b unknown closed\nshard 0 start 0 len 3\n"); v.result != porcupine.Illegal {
		t.Fatalf("expected a gap at offset 1, got %s: %s", v.result, v.desc)
	}
}

func TestBadInput(t *testing.T) {
	for _, bad := range []string{
		"op 0 0 10 5 a ok 0 0\n",                     // done before invoke
		"op 0 0 0 5 a maybe\n",                       // outcome
		"op 0 0 0 5 a ok 0\n",                        // missing offset
		"op 0 0 0 5 a ok 0 0\nop 0 0 6 7 b ok 0 1\n", // conn/seq twice
		"found 9 9 0 0\n",                            // names no unknown op
		"hello\n",
	} {
		if _, err := parseHistory(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// big is a sequential history of n appends on shard 0 (conn i%7 appends offset i
// during [10i, 10i+5]), with f applied to each (offset, invoke, done).
func big(n int, f func(i int, off, inv, done *int)) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		off, inv, done := i, 10*i, 10*i+5
		f(i, &off, &inv, &done)
		b.WriteString("op " + itoa(i%7) + " " + itoa(i) + " " + itoa(inv) + " " + itoa(done) + " p ok 0 " + itoa(off) + "\n")
	}
	return b.String() + "shard 0 start 0 len " + itoa(n) + "\n"
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestLongHistoriesAreCheckedInChunksWithTheCutsChecked(t *testing.T) {
	n := 3*chunkOps + 123
	if v := run(t, big(n, func(int, *int, *int, *int) {})); v.result != porcupine.Ok {
		t.Fatalf("expected linearizable, got %s: %s", v.result, v.desc)
	}
	// Offsets 5 and far (2.5 chunks later) swapped: op 5, now at offset far,
	// completed long before op far, now at offset 5, was invoked.
	far := 5 + 5*chunkOps/2
	swap := func(i int, off, _, _ *int) {
		switch i {
		case 5:
			*off = far
		case far:
			*off = 5
		}
	}
	if v := run(t, big(n, swap)); v.result != porcupine.Illegal || !strings.Contains(v.desc, "before append") {
		t.Fatalf("expected a violation across chunks, got %s: %s", v.result, v.desc)
	}
	// Inside the third chunk: two neighbours swapped.
	near := func(i int, off, _, _ *int) {
		switch i {
		case 2*chunkOps + 50:
			*off = 2*chunkOps + 51
		case 2*chunkOps + 51:
			*off = 2*chunkOps + 50
		}
	}
	if v := run(t, big(n, near)); v.result != porcupine.Illegal {
		t.Fatalf("expected a violation inside a chunk, got %s: %s", v.result, v.desc)
	}
	// The same swap between concurrent operations is fine.
	overlap := func(i int, off, inv, done *int) {
		near(i, off, inv, done)
		if i == 2*chunkOps+50 {
			*done += 20
		}
	}
	if v := run(t, big(n, overlap)); v.result != porcupine.Ok {
		t.Fatalf("expected linearizable, got %s: %s", v.result, v.desc)
	}
	// A hole in the middle chunk.
	hole := func(i int, off, _, _ *int) {
		if i == chunkOps+7 {
			*off = n + 1
		}
	}
	if v := run(t, big(n, hole)); v.result != porcupine.Illegal {
		t.Fatalf("expected a hole, got %s: %s", v.result, v.desc)
	}
}
