#!/usr/bin/env bash
# A rolling upgrade and downgrade of a static-role pair under load (issue 33,
# docs/operations.md §15): both nodes start on OLD's binary, `corelog workload` (this
# tree's Rust client: it falls back to protocol version 2 on a node that refuses 3) appends
# throughout and records every operation; every STEP seconds one node is stopped with
# SIGTERM and started on the other binary: follower OLD→NEW, leader OLD→NEW, follower
# NEW→OLD, leader NEW→OLD. At the end the workload reads back every acknowledged append
# (position and payload; failed ones must be absent), and with both nodes stopped
# `corelog inspect --compare` must find the two logs identical. Exit 0 only if both hold.
#
# Usage: benches/upgrade.sh [OLD_REV]     (default 4d41559: issue 33's starting tree)
# Env: BIN (this tree's release binaries, default target/release), STEP=6 (seconds),
# CONNS=20, SHARDS=2, OUT (default target/upgrade). OLD's binary is built once by
# .ci/old-binary (from .ci/old/corelog-OLD.tar.xz; `.ci/old-binary --vendor OLD` makes one
# from git). Loopback only; stops every process it started, by pid. The coordinator-mode
# (etcd) rolling upgrade is a test: server/tests/upgrade.rs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh

OLD=${1:-4d41559}
BIN=${BIN:-target/release}; STEP=${STEP:-6}; CONNS=${CONNS:-20}; SHARDS=${SHARDS:-2}
OUT=${OUT:-target/upgrade}
cl_need_bins upgrade.sh "$BIN" corelog
OLDBIN=$(.ci/old-binary "$OLD"); NEWBIN="$PWD/$BIN/corelog"
NEW=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- server client || echo '+dirty')

rm -rf "$OUT"; mkdir -p "$OUT"
"$NEWBIN" certs --out "$OUT/certs" >/dev/null
C="$OUT/certs"
# Leader: client 27400 (+1.. direct), metrics 27450, replication 27480; follower 27500, 27550, 27580.
declare -A PID=()
start() { # $1 leader|follower, $2 binary
  local role=$1 bin=$2 args
  if [ "$role" = leader ]; then
    args=(--role leader --data-dir "$OUT/a" --listen 127.0.0.1:27400 --metrics-listen 127.0.0.1:27450
      --repl-listen 127.0.0.1:27480 --follower-addr 127.0.0.1:27580 --cert "$C/server.pem" --key "$C/server.key")
  else
    args=(--role follower --data-dir "$OUT/b" --listen 127.0.0.1:27500 --metrics-listen 127.0.0.1:27550
      --repl-listen 127.0.0.1:27580 --leader-addr 127.0.0.1:27400 --cert "$C/follower.pem" --key "$C/follower.key")
  fi
  echo "---- $(date -u +%T) start on $bin ----" >>"$OUT/$role.log"
  "$bin" serve "${args[@]}" --client-ca "$C/ca.pem" --shard-count "$SHARDS" --segment-bytes 4194304 >>"$OUT/$role.log" 2>&1 &
  PID[$role]=$!
  if [ "$role" = leader ]; then cl_healthy 27450; else cl_healthy 27550; fi
}
stop() { # $1 leader|follower: SIGTERM, wait for the exit (the node's own bound is 15 s)
  local p=${PID[$1]} i
  kill -TERM "$p"
  for i in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  [ "$i" -lt 300 ] || { echo "$1 did not stop within 30 s: kill -9" >&2; kill -9 "$p" 2>/dev/null || true; }
  wait "$p" 2>/dev/null || true
  PID[$1]=""
}
WL=""
cleanup() {
  local p
  for p in "${PID[@]}" $WL; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "upgrade.sh: OLD $OLD ($OLDBIN), NEW $NEW ($NEWBIN); $SHARDS shards, $CONNS connections, a step every $STEP s"
start follower "$OLDBIN"; start leader "$OLDBIN"
steps=("follower $NEWBIN" "leader $NEWBIN" "follower $OLDBIN" "leader $OLDBIN")
total_ms=$(( (${#steps[@]} + 1) * STEP * 1000 + 20000 ))
"$NEWBIN" workload --addr 127.0.0.1:27400,127.0.0.1:27500 --ca "$C/ca.pem" --cert "$C/client.pem" \
  --key "$C/client.key" --connections "$CONNS" --duration-ms "$total_ms" --failover-timeout-ms 20000 \
  --history "$OUT/history.txt" >"$OUT/workload.out" 2>&1 &
WL=$!
for s in "${steps[@]}"; do
  sleep "$STEP"
  read -r role bin <<<"$s"
  t0=$(date +%s%N)
  stop "$role"; start "$role" "$bin"
  echo "$(date -u +%T) $role now on $( [ "$bin" = "$OLDBIN" ] && echo "OLD $OLD" || echo "NEW $NEW"): down $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
rc=0
wait "$WL" || rc=$?
WL=""
tail -n 6 "$OUT/workload.out"
[ "$rc" = 0 ] || echo "upgrade.sh: the workload's check FAILED (exit $rc)"
stop leader; stop follower
cmp=0
"$NEWBIN" inspect --compare "$OUT/a" "$OUT/b" >"$OUT/compare.out" 2>&1 || cmp=$?
tail -n "$SHARDS" "$OUT/compare.out"
[ "$cmp" = 0 ] || echo "upgrade.sh: the two logs differ (inspect --compare exit $cmp)"
[ "$rc" = 0 ] && [ "$cmp" = 0 ] && echo "upgrade.sh: PASS" || { echo "upgrade.sh: FAIL"; exit 1; }
