#!/bin/sh
# Runs INSIDE the test VM: arguments, --env, /proc, /tmp, loopback TCP, then exits with $1.
echo "args: $*"
[ "$2" = "two words" ] || { echo "argument quoting broken: '$2'"; exit 90; }
[ "$SMOKE_VALUE" = "it's ok" ] || { echo "env broken: '$SMOKE_VALUE'"; exit 91; }
[ -r /proc/cpuinfo ] || exit 92
echo data >/tmp/f && [ "$(cat /tmp/f)" = data ] || exit 93
# loopback TCP: busybox nc server and client
nc -l -p 5555 >/tmp/received &
sleep 1
echo over-loopback | nc -w 2 127.0.0.1 5555 || true
sleep 1
[ "$(cat /tmp/received)" = over-loopback ] || { echo "loopback TCP failed: '$(cat /tmp/received)'"; exit 94; }
echo "smoke ok; exiting with $1"
exit "$1"
