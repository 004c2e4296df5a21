#!/bin/sh
# Guest script for server/tests/ktls_vm.rs, run by infra/vm/run-in-vm.sh under Debian's kernel
# with `-m tls`. Proves the kernel-TLS data path end to end: a leader and a follower with mTLS on
# loopback, events appended and read back (and tailed) with the `corelog` CLI (tokio-rustls
# client, userspace TLS, against kTLS sockets on the server), the follower killed and restarted
# (the leader's kTLS replication link fails and re-dials), and both nodes must report kernel TLS
# on client AND replication connections in their logs and /metrics. Any mismatch: exit 1.
# First it runs the tests of server/tests/ktls_vm.rs ($KTLS_TEST_BIN) with kTLS required: the
# hand-off with records pipelined behind the handshake and a split record, and KeyUpdate.
# shellcheck disable=SC2086  # $CA, $CL, $TLS_* are flag lists, split on purpose
set -u
W=/scratch
C=$W/certs
OUT=$W/out
mkdir -p "$OUT"

say() { echo "ktls-vm: $*"; }
dump() {
  for f in "$W"/leader.log "$W"/follower.log; do
    [ -f "$f" ] && { echo "==== $f"; cat "$f"; }
  done
  for p in 9710 9720; do echo "==== metrics :$p"; wget -qO- "http://127.0.0.1:$p/metrics" 2>/dev/null | grep -E 'ktls|connections'; done
}
fail() { say "FAIL: $*"; dump; cp "$W"/*.log "$OUT"/ 2>/dev/null; exit 1; }

grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp || fail "the tls ULP is not registered (tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp))"
corelog certs --out "$C" >/dev/null || fail "corelog certs"

TLS_L="--cert $C/server.pem --key $C/server.key --client-ca $C/ca.pem"
TLS_F="--cert $C/follower.pem --key $C/follower.key --client-ca $C/ca.pem"
CA="--ca $C/ca.pem --cert $C/client.pem --key $C/client.key"
CL="--addr 127.0.0.1:9400 $CA"
SHARDS=2

start_follower() {
  corelog serve --role follower --shard-count $SHARDS --data-dir $W/f --listen 127.0.0.1:9500 \
    --repl-listen 127.0.0.1:9600 --leader-addr 127.0.0.1:9400 --metrics-listen 127.0.0.1:9720 \
    --segment-bytes 4194304 $TLS_F >>$W/follower.log 2>&1 &
  FPID=$!
}
start_leader() {
  corelog serve --role leader --shard-count $SHARDS --data-dir $W/l --listen 127.0.0.1:9400 \
    --repl-listen 127.0.0.1:9610 --follower-addr 127.0.0.1:9600 --metrics-listen 127.0.0.1:9710 \
    --segment-bytes 4194304 $TLS_L >>$W/leader.log 2>&1 &
  LPID=$!
}
healthy() { # port name pid
  i=0
  while [ $i -lt 300 ]; do
    kill -0 "$3" 2>/dev/null || fail "$2 exited during start-up"
    wget -qO- "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.2; i=$((i + 1))
  done
  fail "$2 not healthy within 60 s"
}
links() { grep -c 'follower 127.0.0.1:96[0-9]* joined at offset' $W/leader.log; }
wait_links() { # at least N link-up lines in the leader's log
  i=0
  while [ "$(links)" -lt "$1" ]; do
    [ $i -lt 300 ] || fail "replication links not up (want $1 link-up lines, have $(links))"
    sleep 0.2; i=$((i + 1))
  done
}

t0=$(date +%s)
# The hand-off with records pipelined behind the client's Finished and a split record,
# under kernel TLS (server/tests/ktls_vm.rs, copied in as $KTLS_TEST_BIN).
if [ -n "${KTLS_TEST_BIN:-}" ]; then
  # All its tests; ktls_in_vm returns at once in the guest (VM_GUEST is set).
  CORELOG_KTLS_REQUIRE=1 "$KTLS_TEST_BIN" --nocapture --test-threads 1 >$OUT/handoff.log 2>&1 ||
    { cat $OUT/handoff.log; fail "server/tests/ktls_vm.rs tests failed under kTLS"; }
  grep -E '^(handoff|key update):' $OUT/handoff.log
  say "hand-off and KeyUpdate tests passed under kernel TLS"
fi
start_follower
start_leader
healthy 9720 follower "$FPID"
healthy 9710 leader "$LPID"
wait_links $SHARDS
say "nodes up in $(( $(date +%s) - t0 )) s"

: >$OUT/expected
append() { # port payloads...: appends them in one connection, records "shard offset payload"
  port=$1; shift
  corelog append --addr 127.0.0.1:$port $CA "$@" >$OUT/appended || fail "corelog append failed"
  [ "$(wc -l <$OUT/appended)" -eq $# ] || fail "append printed $(wc -l <$OUT/appended) positions for $# events"
  n=0
  for p in "$@"; do
    n=$((n + 1))
    echo "$(sed -n "${n}p" $OUT/appended) $p" >>$OUT/expected
  done
}
check_read() { # compares what every shard reads back with everything appended so far
  TAB="$(printf '\t')"
  : >$OUT/got
  s=0
  while [ $s -lt $SHARDS ]; do
    corelog read $CL --shard $s >$OUT/read.$s || fail "corelog read --shard $s failed"
    while IFS="$TAB" read -r off pay; do echo "$s $off $pay"; done <$OUT/read.$s >>$OUT/got
    s=$((s + 1))
  done
  sort $OUT/expected >$OUT/expected.sorted
  sort $OUT/got >$OUT/got.sorted
  cmp -s $OUT/expected.sorted $OUT/got.sorted || {
    diff $OUT/expected.sorted $OUT/got.sorted | cut -c1-200 | head -20
    fail "records read back differ from those appended ($1)"
  }
  say "read back $(wc -l <$OUT/got) records: match ($1)"
}

# Small events and a few larger ones (several 16 KiB TLS records each way).
set --
i=0
while [ $i -lt 40 ]; do set -- "$@" "ktls-event-$i"; i=$((i + 1)); done
BIG="$(head -c 40000 /dev/zero | tr '\0' k)"
set -- "$@" "big-a-$BIG" "big-b-$BIG" "big-c-$BIG"
append 9401 "$@" # shard 0's direct port
append 9402 "$@" # shard 1's direct port
append 9400 "shared-port-1" "shared-port-2"
check_read "first batch"

# A tail (server push stream) of each shard must deliver the same records.
s=0
while [ $s -lt $SHARDS ]; do
  n=$(wc -l <$OUT/read.$s)
  [ "$n" -gt 0 ] || fail "shard $s got no records"
  corelog tail $CL --shard $s --count "$n" >$OUT/tail.$s || fail "corelog tail --shard $s failed"
  cmp -s $OUT/tail.$s $OUT/read.$s || fail "tail of shard $s differs from read"
  say "tail of shard $s: $n records match"
  s=$((s + 1))
done

# Kill the follower: the leader's kTLS link fails; restarted, it re-dials and catches up.
kill -9 "$FPID"; wait "$FPID" 2>/dev/null
before=$(links)
start_follower
healthy 9720 follower "$FPID"
wait_links $((before + SHARDS))
set --
i=0
while [ $i -lt 30 ]; do set -- "$@" "after-restart-$i"; i=$((i + 1)); done
set -- "$@" "big-d-$BIG"
append 9401 "$@"
append 9402 "$@"
check_read "after follower restart"

# Both nodes: kernel TLS probed active, used on client and replication connections, never refused.
for n in leader follower; do
  grep -q 'kernel TLS active (tls ULP' $W/$n.log || fail "$n did not log 'kernel TLS active' at start-up"
  grep -q 'kernel TLS active on replication connections' $W/$n.log || fail "$n: no kTLS replication connection"
  ! grep -q 'kernel TLS not' $W/$n.log || fail "$n: a connection stayed in userspace or kTLS was unavailable"
done
grep -q 'kernel TLS active on client connections' $W/leader.log || fail "leader: no kTLS client connection"
metric() { wget -qO- "http://127.0.0.1:$1/metrics" | grep "^$2" ; }
for p in 9710 9720; do
  g="$(metric $p 'corelog_ktls_active{')"
  [ "$(echo "$g" | grep -c ' 1$')" -eq $SHARDS ] || fail "corelog_ktls_active on :$p is not 1 on every shard: $g"
  c="$(metric $p 'corelog_ktls_connections_total{')"
  echo "$c" | grep 'conn="replication"' | grep -q 'path="kernel"' || fail ":$p: no kernel replication connection counted: $c"
  ! echo "$c" | grep -q 'path="userspace"' || fail ":$p: userspace TLS connections counted: $c"
done
c="$(metric 9710 'corelog_ktls_connections_total{')"
echo "$c" | grep 'conn="client"' | grep -q 'path="kernel"' || fail "leader: no kernel client connection counted: $c"
say "metrics leader: $(metric 9710 'corelog_ktls_connections_total{' | tr '\n' ' ')"
say "metrics follower: $(metric 9720 'corelog_ktls_connections_total{' | tr '\n' ' ')"
grep -h 'kernel TLS' $W/leader.log $W/follower.log | sort | uniq -c
cp $W/*.log $OUT/
say "PASS in $(( $(date +%s) - t0 )) s"
exit 0
