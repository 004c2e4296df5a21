#!/bin/sh
# Guest script for server/tests/stock_machine.rs (`readme_commands_in_a_stock_vm`), run by
# infra/vm/run-in-vm.sh under Debian's kernel with its default limits (open files: soft 1,024,
# hard 4,096). Runs `corelog quickstart`, then the README's "Using it" commands one by one as
# a new user would, checking each answer. Any mismatch: exit 1 with the nodes' logs.
# shellcheck disable=SC2086  # $TLS_L, $TLS_F are flag lists, split on purpose
set -u
W=/scratch
say() { echo "stock-vm: $*"; }
fail() {
  say "FAIL: $*"
  for f in "$W"/*.log; do [ -f "$f" ] && { echo "==== $f"; tail -n 60 "$f"; }; done
  exit 1
}

# shellcheck disable=SC3045  # the guest's /bin/sh (dash) has ulimit -n and -H
soft=$(ulimit -n)
# shellcheck disable=SC3045
hard=$(ulimit -H -n)
say "open-file limit: soft $soft, hard $hard"
[ "$soft" = 1024 ] || fail "expected the stock soft limit 1024, got $soft"

cd "$W" || fail "no scratch disk"

# 1. The main job.
corelog quickstart --dir "$W/qs" >"$W/quickstart.log" 2>&1 || fail "corelog quickstart exited $?"
grep -q "inspect --compare" "$W/quickstart.log" || fail "quickstart printed no cross-check"
grep -q "cross-check FAILED" "$W/quickstart.log" && fail "quickstart cross-check failed"
say "quickstart: ok ($(grep -c . "$W/quickstart.log") lines)"
rm -rf "$W/qs" # its preallocated segments: the scratch disk holds one pair at a time

# 2. README "Using it", in order. The guest's CPU is emulated (no KVM here), tens of times
# slower than a real one: 1,000 TLS handshakes at once can outlast the default 10 s
# handshake deadline, so the nodes get a longer one from the environment (operations.md §2).
export CORELOG_HANDSHAKE_TIMEOUT_MS=60000
corelog certs --out certs >/dev/null || fail "corelog certs"
corelog serve --role follower --data-dir "$W/data/f" --listen 127.0.0.1:9500 \
  --repl-listen 127.0.0.1:9700 --leader-addr 127.0.0.1:9400 \
  --cert certs/follower.pem --key certs/follower.key --client-ca certs/ca.pem \
  --metrics-listen 127.0.0.1:9301 >"$W/follower.log" 2>&1 &
FPID=$!
corelog serve --role leader --data-dir "$W/data/l" --listen 127.0.0.1:9400 \
  --repl-listen 127.0.0.1:9600 --follower-addr 127.0.0.1:9700 \
  --cert certs/server.pem --key certs/server.key --client-ca certs/ca.pem \
  --metrics-listen 127.0.0.1:9300 >"$W/leader.log" 2>&1 &
LPID=$!
healthy() { # metrics-port pid name
  i=0
  while [ $i -lt 600 ]; do
    kill -0 "$2" 2>/dev/null || fail "$3 exited during start-up"
    wget -qO- "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.1
    i=$((i + 1))
  done
  fail "$3 not healthy within 60 s"
}
healthy 9301 $FPID follower
healthy 9300 $LPID leader
grep "client connections in this process" "$W/leader.log" | sed 's/^/stock-vm: leader: /'

pos=$(corelog append "Hello World") || fail "append"
echo "$pos" | grep -Eq '^[0-9]+ [0-9]+$' || fail "append printed '$pos', not '<shard> <offset>'"
shard=${pos% *}
off=${pos#* }
corelog read --shard "$shard" --from "$off" --limit 1 | grep -q "Hello World" || fail "read did not return the append"
corelog tail --shard "$shard" --from "$off" --count 1 | grep -q "Hello World" || fail "tail did not return the append"
say "append/read/tail: ok ($pos)"

corelog-loadgen run --connections 1000 --duration 10s >"$W/loadgen.log" 2>&1 || fail "corelog-loadgen run exited $?"
grep -q "error codes" "$W/loadgen.log" && fail "load generator reported errors"
say "loadgen 1000 connections (exit 0: every connection established, no error frame): $(tail -n 1 "$W/loadgen.log")"

corelog append --idempotent "order-42 paid" 2>"$W/idem.err" | grep -Eq '^[0-9]+ [0-9]+$' || fail "idempotent append"
grep -q "next sequence 1" "$W/idem.err" || fail "idempotent append: no producer line: $(cat "$W/idem.err")"
first=$(corelog append --producer 0x5eed --seq 0 "order-42 paid" 2>/dev/null) || fail "producer append"
again=$(corelog append --producer 0x5eed --seq 0 "order-42 paid" 2>/dev/null) || fail "producer re-send"
[ "$again" = "$first duplicate" ] || fail "re-sent sequence answered '$again', want '$first duplicate'"
say "idempotent: ok ($first, then '$again')"

corelog append --stream order-42 --expect none "created" | grep -Eq '^[0-9]+ [0-9]+ 0$' || fail "stream append --expect none"
corelog append --stream order-42 --expect 0 "paid" | grep -Eq '^[0-9]+ [0-9]+ 1$' || fail "stream append --expect 0"
corelog append --stream order-42 --expect 0 "stale" 2>&1 | grep -q WrongExpectedVersion || fail "a stale --expect was not refused"
[ "$(corelog read --stream order-42 | cut -f 3 | tr '\n' ' ')" = "created paid " ] || fail "read --stream"
[ "$(corelog tail --prefix order- --count 2 | grep -c .)" = 2 ] || fail "tail --prefix"
say "streams: ok"

corelog admin trim --addr 127.0.0.1:9400,127.0.0.1:9500 --shard 0 --before 1000000 >"$W/trim.log" 2>&1 \
  || fail "admin trim: $(cat "$W/trim.log")"
corelog read --shard 0 --from 0 --limit 1 >/dev/null 2>"$W/read.err" || grep -q OutOfRange "$W/read.err" \
  || fail "read after trim: $(cat "$W/read.err")"
say "trim: $(head -n 1 "$W/trim.log")"

printf 'data_dir = "%s"\nrole = "leader"\n' "$W/data/l" >"$W/corelog.toml"
CORELOG_RETAIN_BYTES=100000000000 corelog serve --config "$W/corelog.toml" --print-config >"$W/config.out" 2>&1 \
  || fail "serve --print-config: $(cat "$W/config.out")"
grep -q "retain-bytes = 100000000000" "$W/config.out" || fail "print-config lacks the env setting: $(cat "$W/config.out")"

kill -TERM $LPID
wait $LPID || fail "the leader did not exit 0 on SIGTERM"
kill -TERM $FPID
wait $FPID || fail "the follower did not exit 0 on SIGTERM"
corelog inspect "$W/data/l" >"$W/inspect.log" 2>&1 || fail "inspect exited $?: $(cat "$W/inspect.log")"
corelog inspect --compare "$W/data/l" "$W/data/f" >"$W/compare.log" 2>&1 || fail "inspect --compare exited $?: $(cat "$W/compare.log")"
say "graceful stop, inspect, compare: ok"
say "PASS"
