#!/usr/bin/env bash
# Prints an authorization policy (docs/operations.md §18) of N grants for benchmarks: N-1
# grants for other principals (stream prefixes, shards, groups) and, last, the one that
# lets the load generator's certificate (`corelog certs`' client.pem, principal
# "corelog client") append to and read every shard. The check a request pays does not
# depend on N (each connection holds its principal's compiled rights); a policy change
# rebuilds them.
# Usage: benches/authz-policy.sh [N=100] > policy.toml
set -euo pipefail
N="${1:-100}"
[ "$N" -ge 1 ] || { echo "N must be at least 1" >&2; exit 2; }
echo '[groups]'
echo 'readers = ["reporting", "audit", "dashboards"]'
for ((i = 1; i < N; i++)); do
  echo
  echo '[[grant]]'
  case $((i % 3)) in
    0) echo "principals = [\"service-$i\", \"group:readers\"]"; echo 'ops = ["read"]'; echo "streams = [\"svc$i-\", \"shared-$i\"]" ;;
    1) echo "principals = [\"service-$i\"]"; echo 'ops = ["append", "read"]'; echo "streams = [\"svc$i-\"]" ;;
    2) echo "principals = [\"ops-$i\"]"; echo 'ops = ["admin", "read"]'; echo 'shards = true' ;;
  esac
done
echo
echo '[[grant]]'
echo 'principals = ["corelog client"]'
echo 'ops = ["append", "read"]'
echo 'shards = true'
