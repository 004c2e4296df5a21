#!/usr/bin/env bash
# infra/bootstrap/tune.sh — OS settings for a corelog node (data node or load generator):
# kernel network/file limits, per-user limits, the service user, and the kernel TLS module.
# Idempotent. CORELOG_ROOT=/some/dir writes the config files under that prefix and applies
# nothing (used by the tests).
set -euo pipefail

ROOT="${CORELOG_ROOT:-}"
SERVICE_USER="${CORELOG_USER:-corelog}"
DATA_DIR="${CORELOG_DATA_DIR:-/var/lib/corelog}"
# Listening ports must never be handed out as ephemeral ports (the range below starts at 1024).
RESERVED_PORTS="${CORELOG_RESERVED_PORTS:-9300,9400-9499,9500-9755}"

say() { echo "tune.sh: $*"; }
mkdir -p "$ROOT/etc/sysctl.d" "$ROOT/etc/security/limits.d" "$ROOT/etc/modules-load.d"

cat >"$ROOT/etc/sysctl.d/90-corelog.conf" <<CONF
# corelog benchmark node (infra/bootstrap/tune.sh)
# tens of thousands of connections: accept backlog and SYN queue
net.core.somaxconn = 65535
net.ipv4.tcp_max_syn_backlog = 65535
net.core.netdev_max_backlog = 65536
# file descriptors: one per connection plus segment files
fs.file-max = 4194304
fs.nr_open = 4194304
# client side: ~64k ephemeral ports per (source ip, destination) pair, reuse TIME_WAIT ports
net.ipv4.ip_local_port_range = 1024 65535
net.ipv4.ip_local_reserved_ports = $RESERVED_PORTS
net.ipv4.tcp_tw_reuse = 1
net.ipv4.tcp_fin_timeout = 15
# TCP buffers: small defaults (36k sockets), room to grow for the replication links
net.core.rmem_max = 67108864
net.core.wmem_max = 67108864
net.ipv4.tcp_rmem = 4096 131072 67108864
net.ipv4.tcp_wmem = 4096 65536 67108864
net.ipv4.tcp_slow_start_after_idle = 0
# io_uring / Direct I/O
fs.aio-max-nr = 1048576
vm.max_map_count = 1048576
CONF

cat >"$ROOT/etc/security/limits.d/90-corelog.conf" <<'CONF'
# corelog: interactive/ssh sessions (the load generator runs from them); services set their own.
*    soft nofile  1048576
*    hard nofile  1048576
*    soft memlock unlimited
*    hard memlock unlimited
root soft nofile  1048576
root hard nofile  1048576
CONF

echo tls >"$ROOT/etc/modules-load.d/corelog-tls.conf"

if [ -n "$ROOT" ]; then
  say "config written under $ROOT (nothing applied)"
  exit 0
fi

sysctl --quiet --system >/dev/null
say "sysctls applied: somaxconn=$(sysctl -n net.core.somaxconn) file-max=$(sysctl -n fs.file-max)"

# Kernel TLS: corelog moves the session keys into the kernel after the rustls handshake when the
# `tls` module is present, and falls back to userspace TLS otherwise (it logs which).
if ! modprobe tls 2>/dev/null; then
  say "tls module missing from the base kernel package; installing linux-modules-extra-$(uname -r)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "linux-modules-extra-$(uname -r)" >/dev/null 2>&1 || true
  modprobe tls 2>/dev/null || say "WARNING: no tls kernel module; corelog will use userspace TLS"
fi
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null; then say "kTLS available (tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp))"; fi

if ! id "$SERVICE_USER" >/dev/null 2>&1; then
  useradd --system --home-dir "$DATA_DIR" --no-create-home --shell /usr/sbin/nologin "$SERVICE_USER"
  say "created system user $SERVICE_USER"
fi
