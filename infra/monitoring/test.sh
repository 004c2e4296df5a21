#!/usr/bin/env bash
# infra/monitoring/test.sh — checks the Prometheus/Grafana files against Debian's
# prometheus and a real corelog pair. Run from anywhere; .ci/test runs it.
#   1. install prometheus (apt-get, --no-install-recommends) if prometheus/promtool are missing
#   2. promtool check config prometheus.yml, promtool check rules alerts.yml,
#      promtool test rules alerts_test.yml (every alert fires and stays silent when it should),
#      promcheck.py static (dashboard structure, every alert tested both ways + in docs/operations.md §14)
#   3. live: a leader + follower (--insecure, loopback, free ports, temp data dirs,
#      --shard-count 2) and a Prometheus using prometheus.yml (targets rewritten to those
#      ports, 5 s scrapes) and alerts.yml; corelog-loadgen for LOAD_SECONDS (default 20)
#      with --warmup 0s --json; then promcheck.py live: Prometheus's count and rate of the
#      leader's acknowledged appends against the load generator's (within 5 %), every
#      dashboard expr parses and returns data, every rule is healthy and evaluates, no
#      alert fires.
# Exit non-zero on any failure. Where prometheus cannot be installed or the corelog
# binaries are missing it prints `SKIP <why>` and exits 0 — or fails if CORELOG_NO_SKIP=1.
# Env: CORELOG_BIN_DIR (default: target/release), LOAD_SECONDS, LOAD_CONNECTIONS (50),
#      MON_KEEP=1 keeps the temp dir (data, logs, Prometheus TSDB).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BIN_DIR="${CORELOG_BIN_DIR:-$REPO/target/release}"
LOAD_SECONDS="${LOAD_SECONDS:-20}"
LOAD_CONNECTIONS="${LOAD_CONNECTIONS:-50}"
t_begin=$SECONDS

skip_or_fail() {
  if [ "${CORELOG_NO_SKIP:-0}" = 1 ]; then
    echo "FAIL (CORELOG_NO_SKIP=1): $*"
    exit 1
  fi
  echo "SKIP $*"
  exit 0
}

# ------------------------------------------------------------------ 1. tools
echo "--- prometheus / promtool"
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "installing Debian's prometheus (apt-get install --no-install-recommends prometheus)"
  # The package's systemd unit is not used: this script starts its own prometheus.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null; then
    skip_or_fail "monitoring tests: apt-get install prometheus failed (not root, or no package source)"
  fi
fi
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  skip_or_fail "monitoring tests: prometheus/promtool not on PATH after installing"
fi
prom_version="$(prometheus --version 2>&1 | sed -n 1p)"
echo "$prom_version"

# ------------------------------------------------------------------ 2. static checks
failures=()
echo "--- promtool check config prometheus.yml"
promtool check config "$HERE/prometheus.yml" || failures+=("promtool check config")
echo "--- promtool check rules alerts.yml"
promtool check rules "$HERE/alerts.yml" || failures+=("promtool check rules")
echo "--- promtool test rules alerts_test.yml"
(cd "$HERE" && promtool test rules alerts_test.yml) || failures+=("promtool test rules")
echo "--- promcheck.py static (dashboard.json, alert coverage, docs/operations.md §14)"
python3 "$HERE/promcheck.py" static "$HERE" || failures+=("promcheck.py static")

# ------------------------------------------------------------------ 3. live
CORELOG="$BIN_DIR/corelog"
LOADGEN="$BIN_DIR/corelog-loadgen"
if [ ! -x "$CORELOG" ] || [ ! -x "$LOADGEN" ]; then
  if [ "${#failures[@]}" -gt 0 ]; then
    echo "FAILED: ${failures[*]}"
    exit 1
  fi
  skip_or_fail "monitoring live test: $CORELOG or $LOADGEN missing (cargo build --release first)"
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/corelog-monitoring.XXXXXX")"
pids=()
cleanup() {
  local rc=$? pid deadline
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "pid $pid still running after SIGTERM + 20 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  if [ "${MON_KEEP:-0}" = 1 ]; then
    echo "kept $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Poll URL until it answers 200, at most $2 seconds.
wait_http() {
  local url=$1 deadline=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if curl -sf -o /dev/null --max-time 2 "$url"; then
      return 0
    fi
    sleep 0.2
  done
  echo "no answer from $url within $2 s"
  return 1
}

show_logs() {
  local f
  for f in "$TMP"/*.log; do
    echo "--- tail $f"
    tail -n 20 "$f" || true
  done
}

base="$(python3 "$HERE/promcheck.py" free-ports 13)"
L_CLIENT=$base          # leader clients, +1 +2: the shards' direct ports
L_REPL=$((base + 3))    # leader replication base (2 shards)
F_CLIENT=$((base + 5))  # follower clients (+1 +2)
F_REPL=$((base + 8))    # follower replication base (2 shards)
L_METRICS=$((base + 10))
F_METRICS=$((base + 11))
PROM_PORT=$((base + 12))
PROM="http://127.0.0.1:$PROM_PORT"
echo "--- live: ports from $base, temp dir $TMP"

# Starts one node of the pair and waits for its /health: ROLE CLIENT_PORT REPL_PORT
# METRICS_PORT, then the flag that names its peer.
serve() {
  local role=$1 client=$2 repl=$3 metrics=$4
  shift 4
  "$CORELOG" serve --role "$role" --insecure --shard-count 2 --segment-bytes 67108864 \
    --data-dir "$TMP/$role" --listen "127.0.0.1:$client" --repl-listen "127.0.0.1:$repl" \
    --metrics-listen "127.0.0.1:$metrics" "$@" >"$TMP/$role.log" 2>&1 &
  pids+=("$!")
  wait_http "http://127.0.0.1:$metrics/health" 60 || { show_logs; exit 1; }
}

serve follower "$F_CLIENT" "$F_REPL" "$F_METRICS" --leader-addr "127.0.0.1:$L_CLIENT"
serve leader "$L_CLIENT" "$L_REPL" "$L_METRICS" --follower-addr "127.0.0.1:$F_REPL"
echo "leader and follower healthy (metrics on $L_METRICS, $F_METRICS)"

# The shipped prometheus.yml with its two targets pointed at this pair; alerts.yml beside it.
cp "$HERE/alerts.yml" "$TMP/alerts.yml"
sed -e "s/127\.0\.0\.1:9300/127.0.0.1:$L_METRICS/" -e "s/127\.0\.0\.1:9301/127.0.0.1:$F_METRICS/" \
  "$HERE/prometheus.yml" >"$TMP/prometheus.yml"
if ! grep -q "127.0.0.1:$L_METRICS" "$TMP/prometheus.yml" || ! grep -q "127.0.0.1:$F_METRICS" "$TMP/prometheus.yml"; then
  echo "could not rewrite the targets of prometheus.yml"
  exit 1
fi
promtool check config "$TMP/prometheus.yml" >/dev/null
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prom-data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$TMP/prometheus.log" 2>&1 &
pids+=("$!")
wait_http "$PROM/-/ready" 60 || { show_logs; exit 1; }

# Both targets scraped and up: poll Prometheus (scrapes every 5 s).
targets_up() {
  curl -sf --max-time 2 "$PROM/api/v1/query" --data-urlencode 'query=count(up{job="corelog"} == 1)' |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; sys.exit(0 if r and r[0]["value"][1] == "2" else 1)'
}
deadline=$((SECONDS + 30))
until targets_up; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "Prometheus did not see both targets up within 30 s"; show_logs; exit 1
  fi
  sleep 0.5
done
echo "Prometheus ($PROM) scrapes both nodes"

# A scrape before the load is needed as the count's baseline: wait for the next one.
t_start="$(date +%s.%N)"
deadline=$((SECONDS + 15))
until curl -sf --max-time 2 "$PROM/api/v1/query" --data-urlencode 'query=timestamp(up{instance="leader"})' |
  python3 -c "import json,sys; r=json.load(sys.stdin)['data']['result']; sys.exit(0 if r and float(r[0]['value'][1]) > $t_start else 1)"; do
  if [ "$SECONDS" -ge "$deadline" ]; then echo "no scrape within 15 s"; exit 1; fi
  sleep 0.2
done

t_start="$(date +%s.%N)"
echo "--- corelog-loadgen: $LOAD_CONNECTIONS connections, ${LOAD_SECONDS} s, no warm-up"
timeout $((LOAD_SECONDS + 120)) "$LOADGEN" run --target "127.0.0.1:$L_CLIENT" --insecure \
  --connections "$LOAD_CONNECTIONS" --duration "${LOAD_SECONDS}s" --warmup 0s --source-ips 1 \
  --json "$TMP/loadgen.json" 2>"$TMP/loadgen.log" || { echo "corelog-loadgen failed"; show_logs; exit 1; }
t_end="$(date +%s.%N)"

echo "--- promcheck.py live (Prometheus's view against the load generator's)"
python3 "$HERE/promcheck.py" live "$PROM" "$TMP/loadgen.json" "$t_start" "$t_end" "$HERE/dashboard.json" |
  tee "$TMP/live.out" || failures+=("live checks")

echo
echo "=== monitoring summary ($prom_version; $((SECONDS - t_begin)) s) ==="
echo "static: promtool check config, check rules, test rules, promcheck static: ${#failures[@]} failed so far"
grep -E '^(ok|FAIL) +(count|rate)' "$TMP/live.out" || true
grep -cE '^FAIL' "$TMP/live.out" | sed 's/^/live checks failed: /' || true
if [ "${#failures[@]}" -gt 0 ]; then
  show_logs
  echo "FAILED: ${failures[*]}"
  exit 1
fi
echo "monitoring tests passed"
