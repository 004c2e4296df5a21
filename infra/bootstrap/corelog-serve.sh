#!/usr/bin/env bash
# infra/bootstrap/corelog-serve.sh — the ONE place that spells out the corelog server command line
# on the AWS nodes. systemd runs it (corelog-leader.service / corelog-follower.service); it reads
# /etc/corelog/corelog.env (written by the user data) and execs:
#
#   corelog serve --data-dir DIR --listen 0.0.0.0:9400 --role leader|follower
#                 --repl-listen 0.0.0.0:9500 [--follower-addr HOST:9500  (leader only)]
#                 [--follower-name NAME (leader)] [--leader-addr HOST:9400 (follower)]
#                 --cert FILE --key FILE --client-ca FILE
#                 --metrics-listen 0.0.0.0:9300 --cores N
#
# That CLI is the contract with the server (server/, `corelog serve --help`); adjust the
# variables below, not the units, if it changes. CORELOG_DRY_RUN=1 prints the command instead.
set -euo pipefail

ENV_FILE="${CORELOG_ENV_FILE:-/etc/corelog/corelog.env}"
if [ -r "$ENV_FILE" ]; then
  # shellcheck disable=SC1090  # written by the user data at boot
  . "$ENV_FILE"
fi

# ---- the server CLI, in one place ---------------------------------------------------------
ROLE="${1:-${CORELOG_ROLE:-}}"
BIN="${CORELOG_BIN:-/usr/local/bin/corelog}"
DATA_DIR="${CORELOG_DATA_DIR:-/var/lib/corelog}"
LISTEN="0.0.0.0:${CORELOG_CLIENT_PORT:-9400}"
REPL_LISTEN="0.0.0.0:${CORELOG_REPL_PORT_BASE:-9500}"   # shard i listens on base + i
METRICS_LISTEN="0.0.0.0:${CORELOG_METRICS_PORT:-9300}"
FOLLOWER_ADDR="${CORELOG_FOLLOWER_ADDR:-}"              # HOST:PORT of the follower's base port
FOLLOWER_NAME="${CORELOG_FOLLOWER_NAME:-}"              # leader: name in the follower's certificate
LEADER_ADDR="${CORELOG_LEADER_ADDR:-}"                  # follower: leader's client address (NotLeader)
TLS_DIR="${CORELOG_TLS_DIR:-/etc/corelog/tls}"
CERT="$TLS_DIR/node.crt"
KEY="$TLS_DIR/node.key"
CLIENT_CA="$TLS_DIR/ca.crt"
CORES="${CORELOG_CORES:-0}"                             # 0: every vCPU of the node
EXTRA_ARGS="${CORELOG_EXTRA_ARGS:-}"                    # appended verbatim (word-split)
# ---------------------------------------------------------------------------------------------

case "$ROLE" in
  leader|follower) ;;
  *) echo "corelog-serve.sh: role must be leader or follower (argument or CORELOG_ROLE), not '$ROLE'" >&2; exit 2 ;;
esac
if [ "$CORES" = 0 ]; then CORES="$(nproc)"; fi

args=(serve
  --data-dir "$DATA_DIR"
  --listen "$LISTEN"
  --role "$ROLE"
  --repl-listen "$REPL_LISTEN"
  --cert "$CERT" --key "$KEY" --client-ca "$CLIENT_CA"
  --metrics-listen "$METRICS_LISTEN"
  --cores "$CORES")
if [ "$ROLE" = leader ]; then
  [ -n "$FOLLOWER_ADDR" ] || { echo "corelog-serve.sh: the leader needs CORELOG_FOLLOWER_ADDR" >&2; exit 2; }
  args+=(--follower-addr "$FOLLOWER_ADDR")
  if [ -n "$FOLLOWER_NAME" ]; then args+=(--follower-name "$FOLLOWER_NAME"); fi
elif [ -n "$LEADER_ADDR" ]; then
  args+=(--leader-addr "$LEADER_ADDR")
fi
if [ -n "$EXTRA_ARGS" ]; then
  read -r -a extra <<<"$EXTRA_ARGS"
  args+=("${extra[@]}")
fi

if [ "${CORELOG_DRY_RUN:-0}" = 1 ]; then
  echo "$BIN ${args[*]}"
  exit 0
fi
exec "$BIN" "${args[@]}"
