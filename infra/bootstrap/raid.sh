#!/usr/bin/env bash
# infra/bootstrap/raid.sh — put the node's local NVMe instance-store drives under the corelog data
# directory: RAID0 (mdadm) over all of them, one filesystem, mounted. Idempotent: run it at every
# boot (corelog-storage.service does), it assembles an existing array, creates one only when
# the drives are blank (a stop/start of an i4i instance hands back blank drives), and does
# nothing when the data directory is already mounted.
#
# Environment (all optional):
#   CORELOG_RAID_DEVICES  space-separated block devices to use, overriding discovery (tests use
#                         this with virtual disks). Default: every NVMe drive whose model is
#                         $CORELOG_NVME_MODEL, found in sysfs (/sys/block/nvme*/device/model —
#                         what lsblk's MODEL column and `nvme id-ctrl` report).
#   CORELOG_NVME_MODEL    default "Amazon EC2 NVMe Instance Storage".
#   CORELOG_DATA_DIR      mount point, default /var/lib/corelog.
#   CORELOG_MD_DEVICE     md device to create, default /dev/md0.
#   CORELOG_FS            xfs (default) or ext4.
#   CORELOG_USER          owner of the mounted directory if that user exists, default corelog.
#   CORELOG_RAID_CHUNK_KB RAID0 chunk size in KiB, default 512.
# One drive: it is used directly (no md). No drive: exit 1, unless CORELOG_ALLOW_NO_DISKS=1, in
# which case the data directory is left on the root filesystem with a warning.
set -euo pipefail

NVME_MODEL="${CORELOG_NVME_MODEL:-Amazon EC2 NVMe Instance Storage}"
DATA_DIR="${CORELOG_DATA_DIR:-/var/lib/corelog}"
MD_DEVICE="${CORELOG_MD_DEVICE:-/dev/md0}"
FS_TYPE="${CORELOG_FS:-xfs}"
SERVICE_USER="${CORELOG_USER:-corelog}"
CHUNK_KB="${CORELOG_RAID_CHUNK_KB:-512}"
MD_NAME="corelog"

say() { echo "raid.sh: $*"; }
die() { echo "raid.sh: ERROR: $*" >&2; exit 1; }

case "$FS_TYPE" in xfs|ext4) ;; *) die "CORELOG_FS must be xfs or ext4, not $FS_TYPE" ;; esac

is_mounted() { # is anything mounted exactly at $1?
  awk -v d="$1" '$2 == d { found = 1 } END { exit !found }' /proc/mounts
}

discover_devices() {
  local b model
  for b in /sys/block/nvme*n*; do
    [ -e "$b" ] || continue
    case "${b##*/}" in *p[0-9]*) continue ;; esac # partitions are not whole drives
    model=""
    if [ -r "$b/device/model" ]; then model="$(tr -s ' ' <"$b/device/model" | sed 's/^ //; s/ $//')"; fi
    if [ "$model" = "$NVME_MODEL" ]; then echo "/dev/${b##*/}"; fi
  done | sort -V
}

# md device (e.g. /dev/md127) that is already active with $1 as a member, if any.
active_md_with() {
  local dev="${1##*/}"
  awk -v d="$dev" '/^md[0-9]+ : active/ { for (i = 5; i <= NF; i++) { split($i, p, "["); if (p[1] == d) print "/dev/" $1 } }' /proc/mdstat 2>/dev/null | head -n 1
}

wait_for_block() {
  local i=0
  while [ ! -b "$1" ]; do
    i=$((i + 1)); [ "$i" -le 100 ] || die "$1 did not appear"
    sleep 0.1
  done
}

if is_mounted "$DATA_DIR"; then
  say "$DATA_DIR is already mounted; nothing to do"
  exit 0
fi

if [ -n "${CORELOG_RAID_DEVICES:-}" ]; then
  read -r -a DEVICES <<<"$CORELOG_RAID_DEVICES"
  say "using devices from CORELOG_RAID_DEVICES: ${DEVICES[*]}"
else
  mapfile -t DEVICES < <(discover_devices)
  say "found ${#DEVICES[@]} drive(s) with model \"$NVME_MODEL\": ${DEVICES[*]:-none}"
fi
for d in "${DEVICES[@]}"; do [ -b "$d" ] || die "$d is not a block device"; done

if [ "${#DEVICES[@]}" -eq 0 ]; then
  if [ "${CORELOG_ALLOW_NO_DISKS:-0}" = 1 ]; then
    say "WARNING: no instance-store drive; $DATA_DIR stays on the root filesystem"
    mkdir -p "$DATA_DIR"
    exit 0
  fi
  die "no instance-store NVMe drive found (model \"$NVME_MODEL\"); set CORELOG_RAID_DEVICES to override"
elif [ "${#DEVICES[@]}" -eq 1 ]; then
  TARGET="${DEVICES[0]}"
  say "one drive: using $TARGET directly"
else
  TARGET="$(active_md_with "${DEVICES[0]}")"
  if [ -n "$TARGET" ]; then
    say "array $TARGET is already active"
  elif mdadm --examine "${DEVICES[0]}" >/dev/null 2>&1; then
    say "assembling the existing array on ${DEVICES[*]} as $MD_DEVICE"
    mdadm --assemble "$MD_DEVICE" "${DEVICES[@]}"
    TARGET="$MD_DEVICE"
  else
    say "creating RAID0 $MD_DEVICE over ${#DEVICES[@]} drives (chunk ${CHUNK_KB} KiB)"
    mdadm --create "$MD_DEVICE" --run --level=0 --metadata=1.2 --name="$MD_NAME" \
      --chunk="$CHUNK_KB" --raid-devices="${#DEVICES[@]}" "${DEVICES[@]}"
    TARGET="$MD_DEVICE"
  fi
  wait_for_block "$TARGET"
fi

fs_now="$(blkid -o value -s TYPE "$TARGET" 2>/dev/null || true)"
if [ -z "$fs_now" ]; then
  say "creating $FS_TYPE on $TARGET"
  case "$FS_TYPE" in
    # -K / nodiscard: instance-store drives come back blank; a full discard takes minutes.
    xfs) mkfs.xfs -f -q -K -L corelog "$TARGET" ;;
    ext4) mkfs.ext4 -F -q -m 0 -L corelog -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$TARGET" ;;
  esac
  fs_now="$FS_TYPE"
elif [ "$fs_now" != "$FS_TYPE" ]; then
  say "WARNING: $TARGET already holds $fs_now (asked for $FS_TYPE); keeping it"
fi

mkdir -p "$DATA_DIR"
mount -t "$fs_now" -o noatime "$TARGET" "$DATA_DIR"
if id "$SERVICE_USER" >/dev/null 2>&1; then
  chown "$SERVICE_USER:" "$DATA_DIR"
  chmod 0750 "$DATA_DIR"
fi
say "mounted $TARGET ($fs_now) at $DATA_DIR"
