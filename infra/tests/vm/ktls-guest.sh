#!/bin/sh
# Runs INSIDE the test VM: the kTLS probe (dynamic ELF, copied with its libraries) over loopback.
set -e
grep -q tls /proc/modules || { echo "tls module not loaded"; exit 1; }
cat /proc/sys/net/ipv4/tcp_available_ulp
/usr/local/bin/ktls_probe
grep -E 'TlsCurrTxSw|TlsCurrRxSw' /proc/net/tls_stat || true
