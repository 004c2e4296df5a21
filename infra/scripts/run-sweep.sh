#!/usr/bin/env bash
# infra/scripts/run-sweep.sh — run the reference sweep from the load generators and bring the
# reports back. Each step's total connection count is split evenly over the load generators,
# which all run the step at the same time; the script waits for every one before the next step,
# so the steps stay aligned across machines.
#
# Usage (from the repository root, after `terraform -chdir=infra/aws apply`):
#   infra/scripts/run-sweep.sh [--tf-dir DIR] [--env-file FILE] [--out DIR] [--dry-run]
#     --tf-dir DIR    Terraform root to read `output -raw sweep_env` from (default infra/aws)
#     --env-file F    read the KEY=VALUE cluster description from F instead of Terraform
#     --out DIR       results directory (default infra/results/<UTC timestamp>)
#     --dry-run       print the remote commands, touch nothing
# Environment overrides: every variable in the two blocks below (e.g. CONNECTIONS=1000,4000
# DURATION=10s), SSH_KEY=~/.ssh/id_ed25519, WAIT_BOOTSTRAP_S=1800.
# Needs: ssh/scp; for SSH_TRANSPORT=ssm also the AWS CLI with the session-manager-plugin;
# curl for the metrics snapshots; python3 for the summary (optional).
set -euo pipefail

# ---- the load-generator CLI, in one place --------------------------------------------------
# corelog-loadgen sweep --target HOST:9400 --connections N[,N...] --duration 30s --json OUT.json
#                       --ca FILE --cert FILE --key FILE
# Each call here is one step (one connection count). `corelog-loadgen run` takes the same flags
# for a single step: LOADGEN_SUBCOMMAND=run uses it.
CONNECTIONS="${CONNECTIONS:-1000,4000,9000,18000,36000}"   # totals over all load generators
DURATION="${DURATION:-30s}"
LOADGEN_BIN="${LOADGEN_BIN:-/usr/local/bin/corelog-loadgen}"
LOADGEN_SUBCOMMAND="${LOADGEN_SUBCOMMAND:-sweep}"
REMOTE_TLS_DIR="${REMOTE_TLS_DIR:-/etc/corelog/tls}"
REMOTE_CA="$REMOTE_TLS_DIR/ca.crt"
REMOTE_CERT="$REMOTE_TLS_DIR/client.crt"
REMOTE_KEY="$REMOTE_TLS_DIR/client.key"
REMOTE_DIR="${REMOTE_DIR:-/var/lib/corelog-loadgen}"
LOADGEN_EXTRA_ARGS="${LOADGEN_EXTRA_ARGS:-}"               # appended verbatim
loadgen_cmd() { # $1: connections for this load generator, $2: remote JSON report path
  echo "ulimit -n 1048576 2>/dev/null || true; mkdir -p $REMOTE_DIR && $LOADGEN_BIN $LOADGEN_SUBCOMMAND" \
    "--target $TARGET --connections $1 --duration $DURATION --json $2" \
    "--ca $REMOTE_CA --cert $REMOTE_CERT --key $REMOTE_KEY $LOADGEN_EXTRA_ARGS"
}
# ---- the cluster (from `terraform output -raw sweep_env`, or the environment) ---------------
# LOADGEN_HOSTS=a,b,c,d  SSH_TRANSPORT=direct|ssm  SSH_USER=ubuntu  AWS_REGION=ap-southeast-2
# TARGET=10.42.1.10:9400  METRICS_URL=http://x:9300/metrics  FOLLOWER_METRICS_URL=...
# DATA_NODE_TYPE=i4i.16xlarge  LOADGEN_TYPE=c7i.4xlarge
# ----------------------------------------------------------------------------------------------

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TF_DIR="$REPO/infra/aws"
ENV_FILE=""
OUT=""
DRY_RUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tf-dir) TF_DIR="$2"; shift 2 ;;
    --env-file) ENV_FILE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-sweep.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[$(date -u +%H:%M:%S)] $*"; }
die() { echo "run-sweep.sh: ERROR: $*" >&2; exit 1; }

# Cluster description: KEY=VALUE lines; only known keys; the environment wins.
if [ -n "$ENV_FILE" ]; then
  cluster="$(cat "$ENV_FILE")"
else
  command -v terraform >/dev/null || die "terraform not found; use --env-file"
  cluster="$(terraform -chdir="$TF_DIR" output -raw sweep_env)" || die "no sweep_env output in $TF_DIR (applied?)"
fi
while IFS='=' read -r k v; do
  case "$k" in
    LOADGEN_HOSTS|SSH_TRANSPORT|SSH_USER|AWS_REGION|TARGET|METRICS_URL|FOLLOWER_METRICS_URL|DATA_NODE_TYPE|LOADGEN_TYPE)
      if [ -z "${!k:-}" ]; then printf -v "$k" '%s' "$v"; fi ;;
    ''|'#'*) ;;
    *) echo "run-sweep.sh: ignoring unknown key $k" >&2 ;;
  esac
done <<<"$cluster"
: "${LOADGEN_HOSTS:?LOADGEN_HOSTS missing}" "${TARGET:?TARGET missing}"
SSH_TRANSPORT="${SSH_TRANSPORT:-direct}"
SSH_USER="${SSH_USER:-ubuntu}"
IFS=',' read -r -a HOSTS <<<"$LOADGEN_HOSTS"
IFS=',' read -r -a STEPS <<<"$CONNECTIONS"
N="${#HOSTS[@]}"
[ "$N" -ge 1 ] || die "no load generators"
for c in "${STEPS[@]}"; do
  if ! [[ "$c" =~ ^[0-9]+$ ]] || [ "$c" -lt "$N" ]; then die "bad step '$c' in CONNECTIONS"; fi
done

OUT="${OUT:-$REPO/infra/results/$(date -u +%Y%m%dT%H%M%SZ)}"
SSH_OPTS=(-o BatchMode=yes -o ConnectTimeout=15 -o ServerAliveInterval=15 -o ServerAliveCountMax=8
          -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$OUT/known_hosts" -o LogLevel=ERROR)
if [ -n "${SSH_KEY:-}" ]; then SSH_OPTS+=(-i "$SSH_KEY"); fi
case "$SSH_TRANSPORT" in
  direct) ;;
  ssm) SSH_OPTS+=(-o "ProxyCommand=aws ssm start-session --region ${AWS_REGION:-ap-southeast-2} --target %h --document-name AWS-StartSSHSession --parameters portNumber=%p") ;;
  *) die "SSH_TRANSPORT must be direct or ssm" ;;
esac

remote() { # host, command
  if [ "$DRY_RUN" -eq 1 ]; then echo "ssh $SSH_USER@$1 $2"; return 0; fi
  # shellcheck disable=SC2029  # the command is built here on purpose
  ssh "${SSH_OPTS[@]}" "$SSH_USER@$1" "$2"
}
fetch() { # host, remote path, local path
  if [ "$DRY_RUN" -eq 1 ]; then echo "scp $SSH_USER@$1:$2 $3"; return 0; fi
  scp -q "${SSH_OPTS[@]}" "$SSH_USER@$1:$2" "$3"
}
snapshot() { # name
  [ "$DRY_RUN" -eq 0 ] || return 0
  command -v curl >/dev/null || return 0
  if [ -n "${METRICS_URL:-}" ]; then curl -s -m 10 "$METRICS_URL" >"$OUT/metrics/leader-$1.prom" || true; fi
  if [ -n "${FOLLOWER_METRICS_URL:-}" ]; then curl -s -m 10 "$FOLLOWER_METRICS_URL" >"$OUT/metrics/follower-$1.prom" || true; fi
}

[ "$DRY_RUN" -eq 1 ] || mkdir -p "$OUT/metrics"
say "cluster: $N load generator(s) via $SSH_TRANSPORT, target $TARGET, steps $CONNECTIONS x $DURATION"
say "results: $OUT"

# 1. Wait until every load generator finished its bootstrap, and the target answers.
if [ "$DRY_RUN" -eq 0 ]; then
  deadline=$((SECONDS + ${WAIT_BOOTSTRAP_S:-1800}))
  for h in "${HOSTS[@]}"; do
    until remote "$h" "test -f /var/lib/corelog-bootstrap.done && $LOADGEN_BIN --version" >/dev/null 2>&1; do
      [ "$SECONDS" -lt "$deadline" ] || die "$h not bootstrapped (see /var/log/corelog-bootstrap.log there)"
      say "waiting for $h to finish its bootstrap..."; sleep 20
    done
  done
  remote "${HOSTS[0]}" "timeout 5 bash -c 'exec 3<>/dev/tcp/${TARGET%:*}/${TARGET##*:}'" \
    || die "the target $TARGET does not accept connections from ${HOSTS[0]} (is corelog-leader running?)"
  {
    echo "date_utc=$(date -u +%FT%TZ)"
    echo "connections=$CONNECTIONS"; echo "duration=$DURATION"; echo "load_generators=$N"
    echo "data_node_type=${DATA_NODE_TYPE:-}"; echo "loadgen_type=${LOADGEN_TYPE:-}"; echo "target=$TARGET"
    remote "${HOSTS[0]}" "cat /etc/corelog/build-info; $LOADGEN_BIN --version" || true
  } >"$OUT/run-info.txt"
fi

# 2. The steps.
failed=0
for total in "${STEPS[@]}"; do
  say "step: $total connections ($N x ~$((total / N))) for $DURATION"
  snapshot "before-$total"
  pids=()
  for i in "${!HOSTS[@]}"; do
    per=$((total / N)); [ "$i" -lt $((total % N)) ] && per=$((per + 1))
    cmd="$(loadgen_cmd "$per" "$REMOTE_DIR/step-$total.json")"
    if [ "$DRY_RUN" -eq 1 ]; then remote "${HOSTS[$i]}" "$cmd"; continue; fi
    mkdir -p "$OUT/loadgen-$((i + 1))"
    remote "${HOSTS[$i]}" "$cmd" >"$OUT/loadgen-$((i + 1))/step-$total.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      failed=1; say "load generator $((i + 1)) failed at step $total: see $OUT/loadgen-$((i + 1))/step-$total.log"
    fi
  done
  snapshot "after-$total"
  for i in "${!HOSTS[@]}"; do
    [ "$DRY_RUN" -eq 1 ] || mkdir -p "$OUT/loadgen-$((i + 1))"
    fetch "${HOSTS[$i]}" "$REMOTE_DIR/step-$total.json" "$OUT/loadgen-$((i + 1))/step-$total.json" \
      || { failed=1; say "no report from load generator $((i + 1)) for step $total"; }
  done
done

# 3. Summary (approximate; see docs/aws.md): writes/s summed, latency = worst load generator.
if [ "$DRY_RUN" -eq 0 ] && command -v python3 >/dev/null; then
  python3 "$HERE/summarize-sweep.py" "$OUT" | tee "$OUT/summary.txt" || true
fi
say "done: $OUT"
exit "$failed"
