// Command porcupine checks a corelog workload history (written by
// corelog-history (`corelog workload --history FILE`) for
// linearizability against an append-only log per shard, with Porcupine.
//
//	go run . [-timeout 120s] [-html out.html] HISTORY
//
// Exit status: 0 linearizable, 1 not linearizable (a short description is
// printed), 2 input error, 3 inconclusive (the timeout passed).
//
// The model: the state of a shard is its log length. An append acknowledged at
// offset o is linearized when the length is o and makes it o+1. Failed appends
// (refused, nothing written) are dropped. An append whose outcome is unknown has
// an infinite return time; if the read-back found it (`found` line) it must take
// its offset, if the read-back was done and did not find it, it took no effect
// (linearizing it after everything else is the same as dropping it, so it is
// dropped); without a read-back it matches any output, in every shard. Records
// of other writers at or after the run's first record (`foreign`) are appends
// with an unbounded interval at their offset. Offsets are taken relative to the
// run's first record in each shard (`shard S start B`), or to the smallest
// acknowledged offset when there was no read-back.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type kind int

const (
	kindOk kind = iota
	kindFailed
	kindUnknown
)

type op struct {
	conn, seq    int64
	invoke, done int64
	payload      string
	kind         kind
	shard        int
	offset       int64 // ok: acknowledged offset; unknown: read-back offset if found
	found        bool  // unknown: read back at (shard, offset)
	resolved     bool  // unknown: a read-back was done
	reason       string
}

type history struct {
	tag      string
	ops      []*op
	start    map[int]int64 // shard -> offset of the run's first record (read-back)
	readBack bool
	foreign  []foreignRec
}

type foreignRec struct {
	shard  int
	offset int64
}

func parseHistory(r io.Reader) (*history, error) {
	h := &history{start: map[int]int64{}}
	byID := map[[2]int64]*op{}
	var found [][5]int64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Fields(t)
		bad := func(why string) error { return fmt.Errorf("line %d: %s: %q", line, why, t) }
		nums := func(fields []string) ([]int64, error) {
			out := make([]int64, len(fields))
			for i, s := range fields {
				v, err := strconv.ParseInt(s, 10, 64)
				if err != nil || v < 0 {
					return nil, bad("expected a non-negative number, got " + s)
				}
				out[i] = v
			}
			return out, nil
		}
		// args checks the line against usage, word for word: lower-case words stand as
		// they are, upper-case ones are numbers, returned in order.
		args := func(usage string) ([]int64, error) {
			want := strings.Fields(usage)
			if len(f) != len(want) {
				return nil, bad("expected: " + usage)
			}
			var vals []string
			for i, w := range want {
				if strings.ToUpper(w) == w {
					vals = append(vals, f[i])
				} else if f[i] != w {
					return nil, bad("expected: " + usage)
				}
			}
			return nums(vals)
		}
		switch f[0] {
		case "tag":
			if len(f) != 2 {
				return nil, bad("tag takes one word")
			}
			h.tag = f[1]
		case "op":
			// op CONN SEQ INVOKE_US DONE_US PAYLOAD ok SHARD OFFSET | failed REASON | unknown REASON
			if len(f) < 7 {
				return nil, bad("op needs at least 7 fields")
			}
			n, err := nums(f[1:5])
			if err != nil {
				return nil, err
			}
			o := &op{conn: n[0], seq: n[1], invoke: n[2], done: n[3], payload: f[5]}
			if o.done < o.invoke {
				return nil, bad("completed before it was invoked")
			}
			switch f[6] {
			case "ok":
				if len(f) != 9 {
					return nil, bad("ok takes SHARD OFFSET")
				}
				p, err := nums(f[7:9])
				if err != nil {
					return nil, err
				}
				o.kind, o.shard, o.offset = kindOk, int(p[0]), p[1]
			case "failed":
				o.kind, o.reason = kindFailed, strings.Join(f[7:], " ")
			case "unknown":
				o.kind, o.reason = kindUnknown, strings.Join(f[7:], " ")
			default:
				return nil, bad("outcome must be ok, failed or unknown")
			}
			id := [2]int64{o.conn, o.seq}
			if byID[id] != nil {
				return nil, bad("conn/seq appears twice")
			}
			byID[id] = o
			h.ops = append(h.ops, o)
		case "shard":
			n, err := args("shard S start B len L")
			if err != nil {
				return nil, err
			}
			h.start[int(n[0])] = n[1]
			h.readBack = true
		case "found":
			n, err := args("found CONN SEQ SHARD OFFSET")
			if err != nil {
				return nil, err
			}
			found = append(found, [5]int64{n[0], n[1], n[2], n[3], int64(line)})
		case "foreign":
			n, err := args("foreign SHARD OFFSET")
			if err != nil {
				return nil, err
			}
			h.foreign = append(h.foreign, foreignRec{int(n[0]), n[1]})
		default:
			return nil, bad("unknown line kind")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, fd := range found {
		o := byID[[2]int64{fd[0], fd[1]}]
		if o == nil || o.kind != kindUnknown {
			return nil, fmt.Errorf("line %d: found names conn %d seq %d, which is not an unknown op", fd[4], fd[0], fd[1])
		}
		o.found, o.shard, o.offset = true, int(fd[2]), fd[3]
	}
	if h.readBack {
		for _, o := range h.ops {
			o.resolved = o.kind == kindUnknown
		}
	}
	return h, nil
}

// input and output of an append in the model.
type input struct {
	shard     int
	conn, seq int64 // conn -1: a foreign record
}

type output struct {
	known  bool  // false: matches any output (unresolved unknown)
	offset int64 // relative to the shard's start
}

func appendModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			for _, o := range h {
				s := o.Input.(input).shard
				by[s] = append(by[s], o)
			}
			shards := make([]int, 0, len(by))
			for s := range by {
				shards = append(shards, s)
			}
			sort.Ints(shards)
			out := make([][]porcupine.Operation, 0, len(shards))
			for _, s := range shards {
				out = append(out, by[s])
			}
			return out
		},
		Init: func() interface{} { return int64(0) },
		Step: func(state, in, out interface{}) (bool, interface{}) {
			n := state.(int64)
			o := out.(output)
			if !o.known || o.offset == n {
				return true, n + 1
			}
			return false, n
		},
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(input), out.(output)
			who := fmt.Sprintf("conn %d seq %d", i.conn, i.seq)
			if i.conn < 0 {
				who = "foreign"
			}
			if !o.known {
				return fmt.Sprintf("append(%s) -> ?", who)
			}
			return fmt.Sprintf("append(%s) -> +%d", who, o.offset)
		},
		DescribeState: func(state interface{}) string { return fmt.Sprintf("len +%d", state.(int64)) },
	}
}

// operations turns the history into Porcupine operations, per shard.
func operations(h *history) map[int][]porcupine.Operation {
	var last int64
	shards := map[int]bool{}
	start := map[int]int64{}
	for s, b := range h.start {
		shards[s], start[s] = true, b
	}
	lowest := map[int]int64{}
	for _, o := range h.ops {
		if o.done > last {
			last = o.done
		}
		if o.kind == kindOk {
			shards[o.shard] = true
			if l, ok := lowest[o.shard]; !ok || o.offset < l {
				lowest[o.shard] = o.offset
			}
		}
	}
	for s, l := range lowest {
		if _, ok := start[s]; !ok {
			start[s] = l // no read-back for this shard: from the lowest acknowledged offset
		}
	}
	inf := last + 1
	out := map[int][]porcupine.Operation{}
	add := func(s int, o porcupine.Operation) { out[s] = append(out[s], o) }
	for _, o := range h.ops {
		in := input{shard: o.shard, conn: o.conn, seq: o.seq}
		switch {
		case o.kind == kindFailed:
			// Nothing written: not part of the history.
		case o.kind == kindOk:
			add(o.shard, porcupine.Operation{ClientId: int(o.conn), Input: in, Call: o.invoke,
				Output: output{known: true, offset: o.offset - start[o.shard]}, Return: o.done})
		case o.found:
			add(o.shard, porcupine.Operation{ClientId: int(o.conn), Input: in, Call: o.invoke,
				Output: output{known: true, offset: o.offset - start[o.shard]}, Return: inf})
		case o.resolved:
			// Read back and not found: it took no effect (see the package doc).
		default:
			for s := range shards {
				in.shard = s
				add(s, porcupine.Operation{ClientId: int(o.conn), Input: in, Call: o.invoke,
					Output: output{known: false}, Return: inf})
			}
		}
	}
	for _, f := range h.foreign {
		add(f.shard, porcupine.Operation{ClientId: 0, Input: input{shard: f.shard, conn: -1},
			Call: 0, Output: output{known: true, offset: f.offset - start[f.shard]}, Return: inf})
	}
	return out
}

func name(o porcupine.Operation) string {
	i := o.Input.(input)
	if i.conn < 0 {
		return "a foreign record"
	}
	return fmt.Sprintf("append conn %d seq %d", i.conn, i.seq)
}

// explain finds a simple reason why a shard's history cannot be linearized:
// two operations at one offset, an offset nothing produced, or an append whose
// offset is below that of one that completed before it was invoked.
func explain(ops []porcupine.Operation) string {
	type at struct {
		off int64
		op  porcupine.Operation
	}
	var known []at
	for _, o := range ops {
		if out := o.Output.(output); out.known {
			known = append(known, at{out.offset, o})
		}
	}
	sort.Slice(known, func(i, j int) bool { return known[i].off < known[j].off })
	for i := 1; i < len(known); i++ {
		if known[i].off == known[i-1].off {
			return fmt.Sprintf("%s and %s both took relative offset %d", name(known[i-1].op), name(known[i].op), known[i].off)
		}
	}
	unresolved := len(known) < len(ops)
	if !unresolved {
		for i, k := range known {
			if k.off != int64(i) {
				return fmt.Sprintf("nothing took relative offset %d (next: %s at %d)", i, name(k.op), k.off)
			}
		}
	}
	// Real time: no append may complete before one with a lower offset is invoked.
	maxCall := -1
	for i, k := range known {
		if maxCall >= 0 && k.op.Return < known[maxCall].op.Call {
			a, b := known[maxCall], k
			return fmt.Sprintf("%s got relative offset %d and completed at %d µs, before %s (relative offset %d) was invoked at %d µs",
				name(b.op), b.off, b.op.Return, name(a.op), a.off, a.op.Call)
		}
		if maxCall < 0 || k.op.Call > known[maxCall].op.Call {
			maxCall = i
		}
	}
	return "no linearization found (run with -html FILE to see the partial ones)"
}

type verdict struct {
	result porcupine.CheckResult
	desc   string
	ops    int
}

// chunkOps is the most operations Porcupine checks at once. Its search keeps a
// bitset of the linearized operations per state it caches, so memory grows with
// the square of a partition's size; see chunks.
const chunkOps = 10000

// chunks splits one shard's operations when every one has a known offset. The
// order of a linearization is then forced (by offset), and the history is
// linearizable iff each run of consecutive offsets is, and no operation with a
// lower offset was invoked after one with a higher offset completed. The second
// condition across a cut between runs is exactly: the latest invocation below the
// cut is not after the earliest completion above it. So the shard is cut every
// chunkOps offsets, each run is checked by Porcupine (offsets relative to the
// run's first), and each cut is checked here; a failed cut is a violation.
// With an operation of unknown output (no read-back) the shard stays whole.
func chunks(ops []porcupine.Operation) ([][]porcupine.Operation, string) {
	for _, o := range ops {
		if !o.Output.(output).known {
			return [][]porcupine.Operation{ops}, ""
		}
	}
	if len(ops) <= chunkOps {
		return [][]porcupine.Operation{ops}, ""
	}
	sorted := append([]porcupine.Operation(nil), ops...)
	off := func(o porcupine.Operation) int64 { return o.Output.(output).offset }
	sort.SliceStable(sorted, func(i, j int) bool { return off(sorted[i]) < off(sorted[j]) })
	n := len(sorted)
	minReturn := make([]int, n) // index of the earliest completion at or after i
	minReturn[n-1] = n - 1
	for i := n - 2; i >= 0; i-- {
		minReturn[i] = minReturn[i+1]
		if sorted[i].Return < sorted[minReturn[i]].Return {
			minReturn[i] = i
		}
	}
	var out [][]porcupine.Operation
	maxCall, begin := 0, 0
	for i := 0; i < n; i++ {
		if i > 0 && floorDiv(off(sorted[i]), chunkOps) != floorDiv(off(sorted[i-1]), chunkOps) {
			a, b := sorted[maxCall], sorted[minReturn[i]]
			if b.Return < a.Call {
				return nil, fmt.Sprintf("%s got relative offset %d and completed at %d µs, before %s (relative offset %d) was invoked at %d µs",
					name(b), off(b), b.Return, name(a), off(a), a.Call)
			}
			out = append(out, rebase(sorted[begin:i]))
			begin = i
		}
		if sorted[i].Call > sorted[maxCall].Call {
			maxCall = i
		}
	}
	return append(out, rebase(sorted[begin:])), ""
}

func floorDiv(a, b int64) int64 {
	if a < 0 {
		return -((-a + b - 1) / b)
	}
	return a / b
}

// rebase makes a run's offsets relative to the start of its chunk.
func rebase(run []porcupine.Operation) []porcupine.Operation {
	base := floorDiv(run[0].Output.(output).offset, chunkOps) * chunkOps
	out := make([]porcupine.Operation, len(run))
	for i, o := range run {
		out[i] = o
		out[i].Output = output{known: true, offset: o.Output.(output).offset - base}
	}
	return out
}

func check(h *history, timeout time.Duration, html string) verdict {
	parts := operations(h)
	shards := make([]int, 0, len(parts))
	total := 0
	for s, ops := range parts {
		shards = append(shards, s)
		total += len(ops)
	}
	sort.Ints(shards)
	m := appendModel()
	deadline := time.Now().Add(timeout)
	for _, s := range shards {
		runs, cut := chunks(parts[s])
		if cut != "" {
			return verdict{porcupine.Illegal, fmt.Sprintf("shard %d (%d ops): %s", s, len(parts[s]), cut), total}
		}
		for _, run := range runs {
			left := time.Until(deadline)
			if left <= 0 {
				return verdict{porcupine.Unknown, fmt.Sprintf("shard %d: timed out after %v", s, timeout), total}
			}
			switch porcupine.CheckOperationsTimeout(m, run, left) {
			case porcupine.Illegal:
				desc := fmt.Sprintf("shard %d (%d ops): %s", s, len(parts[s]), explain(run))
				if html != "" {
					_, info := porcupine.CheckOperationsVerbose(m, run, timeout)
					if err := porcupine.VisualizePath(m, info, html); err != nil {
						desc += "; visualization failed: " + err.Error()
					} else {
						desc += "; visualization in " + html
					}
				}
				return verdict{porcupine.Illegal, desc, total}
			case porcupine.Unknown:
				return verdict{porcupine.Unknown, fmt.Sprintf("shard %d (%d ops): timed out after %v", s, len(parts[s]), timeout), total}
			}
		}
	}
	return verdict{porcupine.Ok, fmt.Sprintf("%d shard(s), %d ops", len(shards), total), total}
}

func main() {
	timeout := flag.Duration("timeout", 120*time.Second, "give up (exit 3) after this long")
	html := flag.String("html", "", "on a violation, write Porcupine's visualization of the failing shard here")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: porcupine [-timeout D] [-html FILE] HISTORY\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "porcupine:", err)
		os.Exit(2)
	}
	h, err := parseHistory(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "porcupine:", err)
		os.Exit(2)
	}
	t0 := time.Now()
	v := check(h, *timeout, *html)
	took := time.Since(t0).Round(time.Millisecond)
	switch v.result {
	case porcupine.Ok:
		fmt.Printf("porcupine: linearizable (%s, checked in %v)\n", v.desc, took)
	case porcupine.Illegal:
		fmt.Printf("porcupine: NOT linearizable: %s\n", v.desc)
		os.Exit(1)
	default:
		fmt.Printf("porcupine: inconclusive: %s\n", v.desc)
		os.Exit(3)
	}
}
