#!/bin/sh
# Guest script for server/tests/storage_vm.rs, run by infra/vm/run-in-vm.sh under Debian's
# kernel with device-mapper (`-m dm_mod`). A standalone node's data dir sits on ext4 on a
# device-mapper linear device over a virtio disk; faults are injected by reloading the
# table (an `error` target over the blocks of one segment file, or over the whole device)
# or by writing the raw device. Every acknowledged append is recorded (offset + payload)
# and read back after healing. Scenarios:
#   A. a read error at start-up: the node refuses (exit 1, naming file and byte), never
#      dies of SIGBUS; `inspect` exits 2; healed, every acknowledged append reads back.
#   B. a flipped byte in the last acknowledged batch, written to the raw device: refused,
#      nothing cut; `admin accept-loss` is the only way past it.
#   D. a read error while running (the table reloaded under the running node, which
#      also makes the device refuse polled reads: EOPNOTSUPP, answered by a plain-read
#      fallback): that read fails naming EIO, the node lives and keeps acknowledging;
#      the table reloaded healthy: reads work again.
#   C. EIO on write/fdatasync while running: exit 70, no acknowledgement after the
#      failure; healed, every acknowledged append reads back.
#   E. a full disk at start-up: exit 1, the message says the disk is full.
#   F. the disk fills up while running (a segment roll-over hits ENOSPC): exit 70,
#      nothing acknowledged after it; with space freed, every acknowledged append reads back.
# Any mismatch: exit 1. The last line is `storage-vm: PASS` on success.
# shellcheck disable=SC2015,SC2059,SC2086  # `A && B || fail` is meant (fail exits); $CL is a flag list; the printf builds an octal escape
set -u
W=/scratch
OUT=$W/out
mkdir -p "$OUT"
say() { echo "storage-vm: $*"; }
fail() {
  say "FAIL: $*"
  for f in "$W"/*.log; do [ -f "$f" ] && { echo "==== $f"; tail -40 "$f"; }; done
  exit 1
}

DEV=$(echo "$VM_DISKS" | cut -d' ' -f1)
[ -b "$DEV" ] || fail "no data disk ($VM_DISKS)"
SECTORS=$(blockdev --getsz "$DEV") || fail "blockdev"
linear() { echo "0 $SECTORS linear $DEV 0"; }
table() { dmsetup suspend data && dmsetup load data --table "$1" && dmsetup resume data || fail "table reload: $1"; }
# No udev in the guest: libdevmapper makes the /dev/mapper nodes itself.
export DM_DISABLE_UDEV=1
dmsetup create data --table "$(linear)" || fail "dmsetup create"
dmsetup mknodes data
[ -b /dev/mapper/data ] || fail "no /dev/mapper/data after dmsetup create"
mkfs.ext4 -q -F -b 4096 /dev/mapper/data || fail "mkfs"
mkdir -p /data
mount /dev/mapper/data /data || fail "mount"
SEG=/data/d/shard-0/00000000000000000000.log
CL="--addr 127.0.0.1:9400 --insecure"
PID=""

serve() { # serve LOG: starts a standalone node, returns when it is ready or has exited
  corelog serve --role standalone --shard-count 1 --data-dir /data/d --listen 127.0.0.1:9400 \
    --segment-bytes 4194304 --insecure >>"$W/$1" 2>&1 &
  PID=$!
  i=0
  while [ $i -lt 300 ]; do
    grep -q "ready:" "$W/$1" && return 0
    kill -0 "$PID" 2>/dev/null || return 0
    sleep 0.1
    i=$((i + 1))
  done
  fail "node not ready in 30 s"
}
stop() { kill -9 "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""; }
wait_exit() { # waits (bounded) for the node to exit; its exit status in $code
  i=0
  while kill -0 "$PID" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  kill -0 "$PID" 2>/dev/null && fail "node still running after 30 s"
  wait "$PID"
  code=$?
}
append() { # append TAG N: one append at a time, each acknowledged one recorded
  n=0
  while [ $n -lt "$2" ]; do
    p="$1-$n-payload-of-an-acknowledged-append"
    if r=$(corelog append $CL "$p" 2>>"$W/client.log"); then
      echo "$(echo "$r" | cut -d' ' -f2) $p" >>"$W/acked"
    else
      echo "$1-$n failed" >>"$W/client.log"
      return 1
    fi
    n=$((n + 1))
  done
}
check_all() { # every acknowledged append at its offset with its payload
  corelog read $CL --shard 0 --from 0 --limit 100000 >"$W/read" 2>>"$W/client.log" || fail "read back"
  while read -r off p; do
    grep -qxF "$off	$p" "$W/read" || fail "acknowledged offset $off ($p) not read back: $(grep "^$off	" "$W/read")"
  done <"$W/acked"
  say "$1: $(wc -l <"$W/acked") acknowledged appends, all read back at their offsets ($(wc -l <"$W/read") records)"
}
pblock() { # physical 4 KiB block of logical block $1 of the segment (fs unmounted)
  debugfs -R "bmap /d/shard-0/00000000000000000000.log $1" /dev/mapper/data 2>/dev/null | tail -1
}
refused() { # refused X WHAT LINE: the node, started (log X-fault.log), exits 1 logging
  # LINE (WHAT names the case); `inspect` then writes $W/X-inspect, its exit status in $icode
  serve "$1-fault.log"
  wait_exit
  [ "$code" = 1 ] || fail "$2 gave exit status $code, want 1 (refused; 135 = SIGBUS)"
  grep -q "$3" "$W/$1-fault.log" || fail "$2: no '$3' line"
  corelog inspect /data/d >"$W/$1-inspect" 2>&1
  icode=$?
}
remount() { umount /data || fail "umount"; mount /dev/mapper/data /data || fail "mount"; }

# --- A: read error at start-up ---------------------------------------------------------
: >"$W/acked"
serve a.log
append a 20 || fail "appends before the fault"
stop
umount /data || fail "umount"
B=$(pblock 5)
[ -n "$B" ] && [ "$B" -gt 0 ] 2>/dev/null || fail "no physical block for the segment's block 5 ($B)"
S=$((B * 8))
table "0 $S linear $DEV 0
$S 8 error
$((S + 8)) $((SECTORS - S - 8)) linear $DEV $((S + 8))"
mount /dev/mapper/data /data || fail "mount with the error target"
refused a "A: a read error at start-up" "read error in $SEG at byte 20480"
[ "$icode" = 2 ] && grep -q "ERROR: read error" "$W/a-inspect" || fail "A: inspect exit $icode: $(cat "$W/a-inspect")"
say "A: read error at start-up refused (exit 1): $(grep -o 'read error in.*' "$W/a-fault.log" | head -1)"
umount /data
table "$(linear)"
mount /dev/mapper/data /data || fail "mount after healing"
serve a-healed.log
check_all A
stop

# --- B: a flipped byte in the last acknowledged batch, on the raw device --------------------
serve b.log
append b 5 || fail "B: appends"
stop
LAST=$(($(wc -l <"$W/acked") - 1))
umount /data || fail "B: umount"
B=$(pblock "$LAST")
[ -n "$B" ] && [ "$B" -gt 0 ] 2>/dev/null || fail "B: no physical block for the segment's block $LAST ($B)"
OFF=$((B * 4096 + 60))
old=$(dd if=/dev/mapper/data bs=1 skip=$OFF count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "\\$(printf '%03o' $(((old + 8) % 256)))" | dd of=/dev/mapper/data bs=1 seek=$OFF conv=notrunc 2>/dev/null
sync
echo 3 >/proc/sys/vm/drop_caches
mount /dev/mapper/data /data || fail "B: mount"
refused b "B: damaged last batch" "refusing to start: damaged batch at the end of the log"
[ "$icode" = 2 ] && grep -q "DAMAGED" "$W/b-inspect" || fail "B: inspect exit $icode: $(cat "$W/b-inspect")"
say "B: flipped byte in the last acknowledged batch (offset $LAST) refused: $(grep -o 'offsets [0-9=.]*' "$W/b-inspect" | head -1)"
corelog admin accept-loss --data-dir /data/d --shard 0 >"$W/b-accept" 2>&1 || fail "B: accept-loss: $(cat "$W/b-accept")"
grep -v "^$LAST " "$W/acked" >"$W/acked.b" && mv "$W/acked.b" "$W/acked"
serve b-after.log
check_all B
stop

# --- D: a read error while running, then the table reloaded back (as LVM does) -----------
serve d0.log
stop
umount /data || fail "D: umount"
B0=$(pblock 0)
mount /dev/mapper/data /data || fail "D: mount"
S0=$((B0 * 8))
serve d.log
append d 2 || fail "D: appends"
table "0 $S0 linear $DEV 0
$S0 8 error
$((S0 + 8)) $((SECTORS - S0 - 8)) linear $DEV $((S0 + 8))"
corelog read $CL --shard 0 --from 0 --limit 1 >"$W/d-read" 2>&1 && fail "D: a read of an unreadable block succeeded: $(cat "$W/d-read")"
kill -0 "$PID" 2>/dev/null || fail "D: the node died of a read error"
grep -q "Input/output error" "$W/d-read" || fail "D: the answer does not name the device error: $(cat "$W/d-read")"
# The IOPOLL ring is kept off (wal::probe::disable_poll_ring): the error comes from the
# device itself, not from a ring the new table cannot poll.
grep -q "refuses polled" "$W/d.log" && fail "D: reads went through the poll ring: $(grep 'refuses polled' "$W/d.log")"
say "D: read error while running answered: $(tail -1 "$W/d-read" | cut -c1-160)"
append d-during 2 || fail "D: appends after a read error"
table "$(linear)"
corelog read $CL --shard 0 --from 0 --limit 1 >"$W/d-read2" 2>&1 || fail "D: reads still fail after the table was reloaded healthy: $(cat "$W/d-read2")"
check_all D
stop

# --- C: EIO on write/fdatasync while running -----------------------------------------------
serve c.log
append c 5 || fail "C: appends before the fault"
table "0 $SECTORS error"
before=$(wc -l <"$W/acked")
append c-fault 3 && fail "C: an append was acknowledged after the device failed"
[ "$(wc -l <"$W/acked")" = "$before" ] || fail "C: acknowledged after the failure"
wait_exit
[ "$code" = 70 ] || fail "C: node exit status $code after EIO, want 70"
grep -q "FATAL" "$W/c.log" || fail "C: no FATAL line"
say "C: EIO on write: exit 70, nothing acknowledged after it: $(grep -o 'FATAL.*' "$W/c.log" | head -1 | cut -c1-160)"
umount /data 2>/dev/null || umount -l /data
table "$(linear)"
e2fsck -fy /dev/mapper/data >"$W/fsck.log" 2>&1
mount /dev/mapper/data /data || fail "C: mount after healing"
serve c-healed.log
check_all C
stop

# --- E: a restart on a full disk: the message says so (it used to blame O_DIRECT) -------
dd if=/dev/zero of=/data/filler bs=1M >/dev/null 2>&1
sync
corelog serve --role standalone --shard-count 1 --data-dir /data/d --listen 127.0.0.1:9400 \
  --insecure >>"$W/e.log" 2>&1 &
PID=$!
wait_exit
[ "$code" = 1 ] || fail "E: start on a full disk gave exit status $code, want 1"
grep -q "is full" "$W/e.log" || fail "E: the message does not say the disk is full"
grep -q "does not honour O_DIRECT" "$W/e.log" && fail "E: a full disk blamed on O_DIRECT"
say "E: full disk at start-up: $(grep -o 'data dir.*' "$W/e.log" | head -1 | cut -c1-160)"
rm -f /data/filler

# --- F: the disk fills up while running (at a segment roll-over) ----------------------------
serve f.log
dd if=/dev/zero of=/data/filler bs=1M >/dev/null 2>&1
size=$(stat -c %s /data/filler)
truncate -s $((size - 2097152)) /data/filler # ~2 MiB left: less than one 4 MiB segment
sync
BIG=$(head -c 60000 /dev/zero | tr '\0' 'x')
before=$(wc -l <"$W/acked")
n=0
while [ $n -lt 100 ]; do
  p="f-$n-$BIG"
  r=$(corelog append $CL "$p" 2>>"$W/client.log") || break
  echo "$(echo "$r" | cut -d' ' -f2) $p" >>"$W/acked"
  n=$((n + 1))
done
[ $n -lt 100 ] || fail "F: 100 appends of 60 kB acknowledged on a disk with 2 MiB free"
wait_exit
[ "$code" = 70 ] || fail "F: node exit status $code on a full disk, want 70"
grep -q "No space left on device" "$W/f.log" || fail "F: no ENOSPC in the FATAL line"
say "F: disk full while running after $n more acknowledged appends: exit 70: $(grep -o 'FATAL.*' "$W/f.log" | head -1 | cut -c1-140)"
rm -f /data/filler
serve f-healed.log
check_all F
stop
umount /data
say PASS
