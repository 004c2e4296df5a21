#!/bin/bash
# Runs INSIDE the test VM (infra/vm/run-in-vm.sh). Exercises infra/bootstrap/raid.sh for real:
#   - three emulated NVMe drives (model "QEMU NVMe Ctrl") found by model discovery -> md0 raid0, xfs
#   - idempotent re-run, then "reboot" (umount + mdadm --stop) -> re-assembled, data intact
#   - one virtio disk given by CORELOG_RAID_DEVICES -> used directly, ext4
#   - no matching drive -> exit 1
# Host side: infra/tests/test_vm_raid.py. Guest env: VM_DISKS = "nvme0n1 nvme1n1 nvme2n1 vda" order.
set -euo pipefail
RAID=/opt/corelog/raid.sh
fail() { echo "ASSERT FAILED: $*"; exit 1; }
ok() { echo "ok - $*"; }

read -r -a disks <<<"$VM_DISKS"
[ "${#disks[@]}" -eq 4 ] || fail "expected 4 disks, got: $VM_DISKS"
nvme=("${disks[@]:0:3}")
single="${disks[3]}"
echo "nvme drives: ${nvme[*]}  single: $single"
for d in "${nvme[@]}"; do
  model="$(cat "/sys/block/${d##*/}/device/model")"
  echo "$d model: '$model'"
done

# 1. discovery by model, 3 drives -> RAID0 + xfs at the data dir
t0=$(date +%s)
CORELOG_NVME_MODEL="QEMU NVMe Ctrl" bash "$RAID"
echo "raid.sh took $(( $(date +%s) - t0 ))s"
cat /proc/mdstat
grep -Eq '^md0 : active raid0' /proc/mdstat || fail "/dev/md0 is not an active raid0"
for d in "${nvme[@]}"; do
  grep -E '^md0 :' /proc/mdstat | grep -q "${d##*/}\[" || fail "$d is not a member of md0"
done
members="$(mdadm --detail /dev/md0 | awk -F: '/Raid Devices/ { gsub(/ /, "", $2); print $2 }')"
[ "$members" = 3 ] || fail "md0 has $members raid devices, expected 3"
level="$(mdadm --detail /dev/md0 | awk -F: '/Raid Level/ { gsub(/ /, "", $2); print $2 }')"
[ "$level" = raid0 ] || fail "md0 level is $level"
ok "md0 is raid0 over ${nvme[*]}"
awk '$2 == "/var/lib/corelog" { print $1, $3 }' /proc/mounts | grep -Eq '^/dev/md0 xfs$' \
  || fail "/dev/md0 (xfs) is not mounted at /var/lib/corelog: $(grep corelog /proc/mounts || true)"
ok "xfs on /dev/md0 mounted at /var/lib/corelog"
size_kb="$(df -k /var/lib/corelog | awk 'NR == 2 { print $2 }')"
[ "$size_kb" -gt 300000 ] || fail "filesystem too small ($size_kb KiB) for 3 x 128 MiB"

dd if=/dev/urandom of=/tmp/blob bs=1M count=16 2>/dev/null
cp /tmp/blob /var/lib/corelog/blob
sync
echo 3 >/proc/sys/vm/drop_caches
want="$(sha256sum </tmp/blob)"
got="$(sha256sum </var/lib/corelog/blob)"
[ "$want" = "$got" ] || fail "read back differs"
ok "16 MiB written and read back through the array"

# 2. idempotent
out="$(CORELOG_NVME_MODEL="QEMU NVMe Ctrl" bash "$RAID")"
echo "$out" | grep -q "already mounted" || fail "second run did not notice the mount: $out"
ok "re-run is a no-op"

# 3. reboot: array stopped, unmounted -> re-assembled, filesystem kept, data intact
umount /var/lib/corelog
mdadm --stop /dev/md0
CORELOG_NVME_MODEL="QEMU NVMe Ctrl" bash "$RAID" | tee /tmp/out3
grep -q "assembling the existing array" /tmp/out3 || fail "did not assemble the existing array"
grep -q "creating xfs" /tmp/out3 && fail "re-created the filesystem after a reboot"
got="$(sha256sum </var/lib/corelog/blob)"
[ "$want" = "$got" ] || fail "data lost across re-assembly"
ok "re-assembled after a simulated reboot, data intact"

# 4. one drive given explicitly -> used directly, ext4
CORELOG_RAID_DEVICES="$single" CORELOG_FS=ext4 CORELOG_DATA_DIR=/srv/one bash "$RAID"
awk '$2 == "/srv/one" { print $1, $3 }' /proc/mounts | grep -Eq "^$single ext4$" \
  || fail "$single (ext4) not mounted at /srv/one"
echo hello >/srv/one/f
sync
[ "$(cat /srv/one/f)" = hello ] || fail "rw on single drive"
grep -Eq '^md1' /proc/mdstat && fail "an md array was made for a single drive"
ok "single drive used directly with ext4"

# 5. no drive of the model -> clear failure
if CORELOG_NVME_MODEL="No Such Model" CORELOG_DATA_DIR=/srv/none bash "$RAID" 2>/tmp/err5; then
  fail "raid.sh succeeded without drives"
fi
grep -q "no instance-store NVMe drive found" /tmp/err5 || fail "unclear error: $(cat /tmp/err5)"
ok "no drive -> exit 1 with a clear message"

umount /var/lib/corelog /srv/one
mdadm --stop /dev/md0 >/dev/null
echo "ALL RAID CHECKS PASSED"
