#!/usr/bin/env bash
# Window hook for `corelog-loadgen sweep --hook-window`: at the step with
# PROFILE_AT connections, samples the leader, the follower and the load generators
# (perf record -e cpu-clock --call-graph dwarf; hardware counters are not available
# here) for
# PROFILE_SECS seconds into $PROFILE_DIR/{leader,follower,loadgen}.perf.data.
# The sweep sets CORELOG_STEP_CONNECTIONS and CORELOG_LOADGEN_PIDS; sweep.sh exports
# PROFILE_AT, PROFILE_DIR, PROFILE_SECS, LEADER_PIDS and FOLLOWER_PIDS.
set -u
[ "${CORELOG_STEP_CONNECTIONS:-}" = "${PROFILE_AT:-none}" ] || exit 0
command -v perf >/dev/null || { echo "perf_hook: no perf; no profile" >&2; exit 0; }
secs=${PROFILE_SECS:-10}
mkdir -p "$PROFILE_DIR"
echo "perf_hook: profiling ${secs}s at ${CORELOG_STEP_CONNECTIONS} connections" >&2
pids=()
for who in leader follower loadgen; do
  case $who in
    leader) p=$LEADER_PIDS ;;
    follower) p=$FOLLOWER_PIDS ;;
    loadgen) p=$CORELOG_LOADGEN_PIDS ;;
  esac
  perf record -q -e cpu-clock -F "${PROFILE_HZ:-99}" --call-graph "${PROFILE_CALLGRAPH:-dwarf,16384}" -p "$p" -o "$PROFILE_DIR/$who.perf.data" -- sleep "$secs" \
    >"$PROFILE_DIR/$who.perf.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
exit 0
