#!/usr/bin/env bash
# infra/vm/run-in-vm.sh — run a shell script inside a throw-away Debian-kernel VM (qemu, software
# emulation, no KVM) and return the script's exit code on the host.
#
# Why: the host kernel here has no md (software RAID), no device-mapper and no kTLS (`tls`
# module). Debian's stock kernel has them as modules; this tool boots that kernel with a tiny
# busybox initramfs holding exactly the modules, files and binaries you name.
#
# Usage:
#   infra/vm/run-in-vm.sh [options] [--] GUEST_SCRIPT [ARG...]
#
# Options (each also settable by the environment variable in brackets):
#   -m, --module NAMES      kernel modules to load, in order; comma/space separated, repeatable
#                           [VM_MODULES]. Dependencies, soft dependencies and aliases are
#                           resolved by the host's `modprobe --show-depends` against the guest
#                           kernel's tree, so `-m raid0,xfs` is enough. Built-ins are skipped.
#                           .ko, .ko.xz, .ko.zst and .ko.gz are all handled (decompressed).
#   -f, --file SRC[:DST]    copy a host file or directory into the guest (DST defaults to SRC),
#                           repeatable [VM_FILES, space separated]. For an ELF binary its shared
#                           libraries (ldd) and the dynamic loader are copied too, paths kept.
#                           A bare command name (e.g. `-f mdadm`) is looked up in PATH.
#   -d, --disk IMAGE        attach a raw disk image as a virtio disk (/dev/vdX), repeatable
#                           [VM_DISKS]. In the guest $VM_DISKS lists the device nodes of all
#                           -d/-n disks in the order given (found by serial, not probe order).
#   -n, --nvme-disk IMAGE   attach a raw disk image as an emulated NVMe drive (/dev/nvmeXn1,
#                           model "QEMU NVMe Ctrl"), repeatable [VM_NVME_DISKS].
#   -s, --scratch MIB       attach a fresh ext4 scratch disk of MIB MiB mounted at /scratch
#                           [VM_SCRATCH_MB]; guest env VM_SCRATCH=/scratch.
#   -o, --out DIR           copy the guest's /scratch/out back to host DIR after the run
#                           (implies a 256 MiB scratch disk if none was asked for) [VM_OUT].
#   -e, --env K=V           export K=V to the guest script, repeatable.
#       --mem MIB           guest memory, default 1024 [VM_MEM].
#       --smp N             guest vCPUs, default 2 [VM_SMP].
#   -t, --timeout SEC       hard wall-clock limit for the whole VM, default 300 [VM_TIMEOUT].
#       --kernel PATH       kernel image, default newest /boot/vmlinuz-*-amd64 with modules
#                           [VM_KERNEL]. Modules come from /lib/modules/<its version>.
#       --append ARGS       extra kernel command-line arguments [VM_APPEND].
#       --no-autoload       do not ship the on-demand module set (see below) [VM_AUTOLOAD=0].
#       --keep              keep the work directory (initramfs, log) and print its path.
#   -q, --quiet             do not echo the guest console (it is still in the log on failure).
#   -h, --help              this text.
#   Environment only: VM_NO_SETUP=1 — never try infra/vm/setup.sh when something is missing.
#
# Guest environment: busybox (all applets) as /bin/sh; /proc /sys /dev(devtmpfs) /dev/pts
# /dev/shm /tmp /run mounted; loopback up (127.0.0.1 and ::1); /etc/hosts, /etc/passwd,
# /etc/group, /etc/nsswitch.conf present; PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:
# /usr/bin:/sbin:/bin; HOME=/root; cwd /. Variables: VM_DISKS, VM_SCRATCH (if any), VM_GUEST=1.
# On-demand modules: the kernel's own request_module() (e.g. tls asking for "gcm(aes)", ext4 for
# crc32c) works in the guest: the host's kmod is installed as /sbin/modprobe with the modules.*
# index files and every module under kernel/crypto, arch/x86/crypto and lib, so kTLS with
# AES-GCM/ChaCha20-Poly1305 needs only `-m tls`. Modules outside that set must be named with -m.
# The script runs with the interpreter of its shebang if that program exists in the guest
# (copy /bin/bash in with -f to use bash), else with busybox sh. No network besides loopback.
#
# Exit code: the guest script's exit code. Harness failures: 124 VM timed out, 125 the guest
# never reported an exit code (kernel panic, module load failure, crash), 2 usage error,
# 77 SKIP — qemu or the Debian kernel/modules are missing and cannot be installed.
# The guest reports its exit code with a console line `VM-EXIT-CODE=<n>` before powering off.
#
# Example (kTLS smoke test of a dynamic Rust binary on loopback):
#   infra/vm/run-in-vm.sh -m tls -f target/release/corelog:/usr/local/bin/corelog \
#       -s 512 -t 240 -- server/tests/vm/ktls.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "run-in-vm: $*" >&2; exit 2; }
skip() { echo "SKIP: run-in-vm: $*" >&2; exit 77; }
log() { echo "run-in-vm: $*" >&2; }

# ---------------------------------------------------------------- options
split_list() { local l="${1//,/ }"; for w in $l; do echo "$w"; done; }
MODULES=(); FILES=(); DISKS=(); ENVS=()
[ -n "${VM_MODULES:-}" ] && mapfile -t MODULES < <(split_list "$VM_MODULES")
[ -n "${VM_FILES:-}" ] && read -r -a FILES <<<"$VM_FILES"
[ -n "${VM_DISKS:-}" ] && read -r -a DISKS <<<"$VM_DISKS"
if [ -n "${VM_NVME_DISKS:-}" ]; then for d in ${VM_NVME_DISKS}; do DISKS+=("nvme:$d"); done; fi
SCRATCH_MB="${VM_SCRATCH_MB:-0}"
OUT_DIR="${VM_OUT:-}"
MEM="${VM_MEM:-1024}"
SMP="${VM_SMP:-2}"
TIMEOUT="${VM_TIMEOUT:-300}"
KERNEL="${VM_KERNEL:-}"
APPEND="${VM_APPEND:-}"
KEEP=0
QUIET=0
AUTOLOAD="${VM_AUTOLOAD:-1}"

while [ $# -gt 0 ]; do
  case "$1" in
    -m|--module) [ $# -ge 2 ] || die "$1 needs a value"; mapfile -t -O "${#MODULES[@]}" MODULES < <(split_list "$2"); shift 2 ;;
    -f|--file) [ $# -ge 2 ] || die "$1 needs a value"; FILES+=("$2"); shift 2 ;;
    -d|--disk) [ $# -ge 2 ] || die "$1 needs a value"; DISKS+=("virtio:$2"); shift 2 ;;
    -n|--nvme-disk) [ $# -ge 2 ] || die "$1 needs a value"; DISKS+=("nvme:$2"); shift 2 ;;
    -s|--scratch) [ $# -ge 2 ] || die "$1 needs a value"; SCRATCH_MB="$2"; shift 2 ;;
    -o|--out) [ $# -ge 2 ] || die "$1 needs a value"; OUT_DIR="$2"; shift 2 ;;
    -e|--env) [ $# -ge 2 ] || die "$1 needs a value"; ENVS+=("$2"); shift 2 ;;
    --mem) [ $# -ge 2 ] || die "$1 needs a value"; MEM="$2"; shift 2 ;;
    --smp) [ $# -ge 2 ] || die "$1 needs a value"; SMP="$2"; shift 2 ;;
    -t|--timeout) [ $# -ge 2 ] || die "$1 needs a value"; TIMEOUT="$2"; shift 2 ;;
    --kernel) [ $# -ge 2 ] || die "$1 needs a value"; KERNEL="$2"; shift 2 ;;
    --append) [ $# -ge 2 ] || die "$1 needs a value"; APPEND="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-autoload) AUTOLOAD=0; shift ;;
    -q|--quiet) QUIET=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; die "no guest script given"; }
SCRIPT="$1"; shift
[ -f "$SCRIPT" ] || die "guest script $SCRIPT not found"
for n in "$MEM" "$SMP" "$TIMEOUT" "$SCRATCH_MB"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "not a number: $n"
done
for e in "${ENVS[@]}"; do [[ "$e" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "bad --env $e (want K=V)"; done
for i in "${!DISKS[@]}"; do
  case "${DISKS[$i]}" in nvme:*|virtio:*) ;; *) DISKS[i]="virtio:${DISKS[$i]}" ;; esac
  d="${DISKS[$i]#*:}"
  [ -f "$d" ] || [ -b "$d" ] || die "disk image $d not found"
done
if [ -n "$OUT_DIR" ] && [ "$SCRATCH_MB" -eq 0 ]; then SCRATCH_MB=256; fi

# ---------------------------------------------------------------- prerequisites
find_kernel() {
  if [ -n "$KERNEL" ]; then [ -r "$KERNEL" ] && echo "$KERNEL"; return 0; fi
  local k v
  for k in $(printf '%s\n' /boot/vmlinuz-*-amd64 | sort -rV); do
    v="${k#/boot/vmlinuz-}"
    if [ -r "$k" ] && [ -f "/lib/modules/$v/modules.dep" ]; then echo "$k"; return 0; fi
  done
}
missing_prereqs() {
  local m=()
  command -v qemu-system-x86_64 >/dev/null 2>&1 || m+=("qemu-system-x86_64")
  [ -x /bin/busybox ] || m+=("/bin/busybox (busybox-static)")
  command -v cpio >/dev/null 2>&1 || m+=("cpio")
  command -v modprobe >/dev/null 2>&1 || m+=("modprobe (kmod)")
  command -v mke2fs >/dev/null 2>&1 || m+=("mke2fs (e2fsprogs)")
  [ -n "$(find_kernel)" ] || m+=("a Debian kernel /boot/vmlinuz-*-amd64 with /lib/modules (linux-image-amd64)")
  echo "${m[*]}"
}
MISSING="$(missing_prereqs)"
if [ -n "$MISSING" ] && [ "${VM_NO_SETUP:-0}" != 1 ]; then
  log "missing: $MISSING — trying $HERE/setup.sh"
  bash "$HERE/setup.sh" >&2 || true
  MISSING="$(missing_prereqs)"
fi
[ -z "$MISSING" ] || skip "cannot run a VM here, missing and not installable: $MISSING"
if [ -x /bin/busybox ] && ! /bin/busybox --list >/dev/null 2>&1; then
  skip "/bin/busybox has no --list (not busybox-static?)"
fi

KERNEL="$(find_kernel)"
KVER="$(basename "$KERNEL")"; KVER="${KVER#vmlinuz-}"
MODDIR="/lib/modules/$KVER"
[ -d "$MODDIR" ] || skip "no modules for kernel $KVER under $MODDIR"

# ---------------------------------------------------------------- work dir and cleanup
WORK="$(mktemp -d "${TMPDIR:-/tmp}/run-in-vm.XXXXXX")"
ROOT="$WORK/root"
QEMU_PID_FILE="$WORK/qemu.pid"
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  if [ -s "$QEMU_PID_FILE" ]; then
    local pid; pid="$(cat "$QEMU_PID_FILE")"
    if kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; sleep 1; kill -9 "$pid" 2>/dev/null || true; fi
  fi
  if [ "$KEEP" -eq 1 ]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,usr/local/sbin,etc,proc,sys,dev,tmp,run,root,scratch,guest/modules,lib,lib64}

# ---------------------------------------------------------------- files and their libraries
COPIED_NAMES=()
copy_one() { # host path -> guest path (file content, symlinks resolved)
  local src="$1" dst="$2"
  mkdir -p "$ROOT$(dirname "$dst")"
  cp -L --preserve=mode "$src" "$ROOT$dst"
}
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' \n')" = '177ELF' ]; }
copy_libs() {
  local bin="$1" line lib
  # ldd prints "name => /path (addr)", "/lib64/ld-linux-x86-64.so.2 (addr)" or "statically linked".
  while read -r line; do
    lib=""
    case "$line" in
      *"=> /"*) lib="${line#*=> }"; lib="${lib%% (*}" ;;
      /*) lib="${line%% (*}" ;;
      *"not found"*) die "$bin: shared library not found on host: $line" ;;
    esac
    [ -n "$lib" ] || continue
    [ -e "$ROOT$lib" ] || copy_one "$lib" "$lib"
  done < <(ldd "$bin" 2>/dev/null || true)
}
for spec in "${FILES[@]}"; do
  src="${spec%%:*}"; dst="${spec#*:}"
  [ "$spec" = "$src" ] && dst=""
  if [ ! -e "$src" ] && [[ "$src" != */* ]]; then
    resolved="$(command -v "$src" || true)"; [ -n "$resolved" ] || die "--file $src: not found in PATH"
    src="$resolved"
  fi
  [ -e "$src" ] || die "--file $src: not found"
  [ -n "$dst" ] || dst="$src"
  [[ "$dst" = /* ]] || die "--file destination must be absolute: $dst"
  if [ -d "$src" ]; then
    mkdir -p "$ROOT$dst"; cp -a "$src/." "$ROOT$dst/"
  else
    copy_one "$src" "$dst"
    if is_elf "$src"; then copy_libs "$src"; fi
  fi
  COPIED_NAMES+=("$(basename "$dst")")
  # Merged /usr (Debian 12): /usr/bin/bash is also reachable as /bin/bash on the host; mirror it.
  case "$dst" in
    /usr/bin/*|/usr/sbin/*) alt="${dst#/usr}" ;;
    /bin/*|/sbin/*) alt="/usr$dst" ;;
    *) alt="" ;;
  esac
  if [ -n "$alt" ] && [ ! -e "$ROOT$alt" ] && [ ! -L "$ROOT$alt" ]; then
    mkdir -p "$ROOT$(dirname "$alt")"; ln -s "$dst" "$ROOT$alt"
  fi
done

# ---------------------------------------------------------------- on-demand module set
KMOD="$(command -v kmod || true)"
if [ "$AUTOLOAD" = 1 ] && [ -n "$KMOD" ]; then
  copy_one "$KMOD" /usr/bin/kmod
  copy_libs "$KMOD"
  for l in /sbin/modprobe /usr/sbin/modprobe; do
    mkdir -p "$ROOT$(dirname "$l")"; ln -sf /usr/bin/kmod "$ROOT$l"
  done
  mkdir -p "$ROOT$MODDIR"
  cp "$MODDIR"/modules.* "$ROOT$MODDIR/"
  for sub in kernel/crypto kernel/arch/x86/crypto kernel/lib; do
    if [ -d "$MODDIR/$sub" ]; then mkdir -p "$ROOT$MODDIR/$sub"; cp -a "$MODDIR/$sub/." "$ROOT$MODDIR/$sub/"; fi
  done
fi

# ---------------------------------------------------------------- busybox and base system
cp /bin/busybox "$ROOT/bin/busybox"
while read -r applet; do
  [ -n "$applet" ] || continue
  name="$(basename "$applet")"
  skip_it=0
  for c in "${COPIED_NAMES[@]}"; do [ "$c" = "$name" ] && skip_it=1 && break; done
  [ "$skip_it" -eq 1 ] && continue
  [ -e "$ROOT/$applet" ] || [ -L "$ROOT/$applet" ] || ln -s /bin/busybox "$ROOT/$applet"
done < <(/bin/busybox --list-full 2>/dev/null)
[ -e "$ROOT/bin/sh" ] || ln -s /bin/busybox "$ROOT/bin/sh"
cat >"$ROOT/etc/hosts" <<'EOF'
127.0.0.1 localhost vm
::1 localhost ip6-localhost ip6-loopback
EOF
echo "hosts: files" >"$ROOT/etc/nsswitch.conf"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
[ -e "$ROOT/etc/mke2fs.conf" ] || { [ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$ROOT/etc/mke2fs.conf"; } || true

# ---------------------------------------------------------------- kernel modules
WANT_MODULES=()
if [ "$SCRATCH_MB" -gt 0 ] || [[ " ${DISKS[*]} " == *" virtio:"* ]]; then WANT_MODULES+=(virtio_pci virtio_blk); fi
[[ " ${DISKS[*]} " == *" nvme:"* ]] && WANT_MODULES+=(nvme)
[ "$SCRATCH_MB" -gt 0 ] && WANT_MODULES+=(ext4)
WANT_MODULES+=("${MODULES[@]}")
: >"$ROOT/guest/modules.list"
declare -A LOADED=()
for mod in "${WANT_MODULES[@]}"; do
  # `modprobe --show-depends` prints, in load order: "insmod /path/x.ko [params]" or "builtin x".
  deps="$(modprobe --set-version "$KVER" --show-depends "$mod" 2>&1)" || die "module $mod: $deps"
  while read -r kind path _; do
    [ "$kind" = insmod ] || continue
    [ -z "${LOADED[$path]:-}" ] || continue
    LOADED[$path]=1
    base="$(basename "$path")"; base="${base%.ko*}.ko"
    case "$path" in
      *.ko.xz) xz -dc "$path" >"$ROOT/guest/modules/$base" ;;
      *.ko.zst) zstd -qdc "$path" >"$ROOT/guest/modules/$base" ;;
      *.ko.gz) gzip -dc "$path" >"$ROOT/guest/modules/$base" ;;
      *) cp "$path" "$ROOT/guest/modules/$base" ;;
    esac
    echo "$base" >>"$ROOT/guest/modules.list"
  done <<<"$deps"
done

# ---------------------------------------------------------------- guest script, env, init
cp "$SCRIPT" "$ROOT/guest/script"
chmod 0755 "$ROOT/guest/script"
squote() { local s="$1"; printf "'%s'" "${s//\'/\'\\\'\'}"; }
interp=""
first_line="$(head -n 1 "$SCRIPT")"
if [[ "$first_line" == '#!'* ]]; then
  read -r -a sb <<<"${first_line#\#!}"
  interp="${sb[0]:-}"
  if [ "$(basename "$interp")" = env ] && [ -n "${sb[1]:-}" ]; then interp="${sb[1]}"; fi
fi
{
  echo "export VM_GUEST=1"
  for e in "${ENVS[@]}"; do echo "export ${e%%=*}=$(squote "${e#*=}")"; done
  printf 'set --'; for a in "$@"; do printf ' %s' "$(squote "$a")"; done; echo
  echo "interp=$(squote "$interp")"
} >"$ROOT/guest/env"

NDISKS="${#DISKS[@]}"
cat >"$ROOT/init" <<EOF
#!/bin/sh
# generated by infra/vm/run-in-vm.sh
NDISKS=$NDISKS
SCRATCH_MB=$SCRATCH_MB
EOF
cat >>"$ROOT/init" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
fail() { echo "run-in-vm guest: $*"; echo; echo "VM-EXIT-CODE=125"; sync; poweroff -f; sleep 5; echo o >/proc/sysrq-trigger; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || mount -t tmpfs tmpfs /dev
mkdir -p /dev/pts /dev/shm
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
[ -e /dev/stdin ] || ln -s /proc/self/fd/0 /dev/stdin
[ -e /dev/stdout ] || ln -s /proc/self/fd/1 /dev/stdout
[ -e /dev/stderr ] || ln -s /proc/self/fd/2 /dev/stderr
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo 1 >/proc/sys/kernel/printk 2>/dev/null
ip link set lo up || fail "cannot bring up loopback"
hostname vm
while read -r m; do
  [ -n "$m" ] || continue
  insmod "/guest/modules/$m" || fail "insmod $m failed"
done </guest/modules.list
# Disks: find each by its serial (vmdisk<i>, vmscratch), not by probe order.
wait_serial() {
  i=0
  while [ "$i" -lt 100 ]; do
    for b in /sys/block/vd* /sys/block/nvme*; do
      s=""
      if [ -r "$b/serial" ]; then s="$(cat "$b/serial")"; elif [ -r "$b/device/serial" ]; then s="$(cat "$b/device/serial")"; fi
      s="$(echo $s)"
      if [ "$s" = "$1" ]; then echo "/dev/${b##*/}"; return 0; fi
    done
    i=$((i + 1)); sleep 0.1
  done
  return 1
}
VM_DISKS=""
i=0
while [ "$i" -lt "$NDISKS" ]; do
  d="$(wait_serial "vmdisk$i")" || fail "disk $i did not appear"
  VM_DISKS="${VM_DISKS:+$VM_DISKS }$d"
  i=$((i + 1))
done
export VM_DISKS
if [ "$SCRATCH_MB" -gt 0 ]; then
  d="$(wait_serial vmscratch)" || fail "scratch disk did not appear"
  mount -t ext4 "$d" /scratch || fail "cannot mount scratch disk $d"
  mkdir -p /scratch/out
  export VM_SCRATCH=/scratch
fi
. /guest/env
cd /
if [ -n "$interp" ] && command -v "$interp" >/dev/null 2>&1; then
  "$interp" /guest/script "$@"
else
  /bin/sh /guest/script "$@"
fi
rc=$?
cd /
# Stop whatever the script left running (daemons, background jobs) so /scratch can be unmounted.
kill -TERM -1 2>/dev/null; sleep 0.3; kill -KILL -1 2>/dev/null
sync
[ "$SCRATCH_MB" -gt 0 ] && umount /scratch
echo
echo "VM-EXIT-CODE=$rc"
poweroff -f
sleep 5
echo o >/proc/sysrq-trigger
EOF
chmod 0755 "$ROOT/init"

(cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$WORK/initrd.gz"

# ---------------------------------------------------------------- disks
QEMU_DISK_ARGS=()
i=0
for spec in "${DISKS[@]}"; do
  d="${spec#*:}"
  dev="virtio-blk-pci"; [ "${spec%%:*}" = nvme ] && dev="nvme"
  QEMU_DISK_ARGS+=(-drive "file=$d,if=none,id=vmdisk$i,format=raw,cache=unsafe"
                   -device "$dev,drive=vmdisk$i,serial=vmdisk$i")
  i=$((i + 1))
done
if [ "$SCRATCH_MB" -gt 0 ]; then
  truncate -s "${SCRATCH_MB}M" "$WORK/scratch.img"
  mke2fs -q -F -t ext4 -L vmscratch "$WORK/scratch.img" >/dev/null
  QEMU_DISK_ARGS+=(-drive "file=$WORK/scratch.img,if=none,id=vmscratch,format=raw,cache=unsafe"
                   -device "virtio-blk-pci,drive=vmscratch,serial=vmscratch")
fi

# ---------------------------------------------------------------- boot
LOGF="$WORK/console.log"
[ "$QUIET" -eq 1 ] || log "booting $KVER (mem ${MEM}M, smp $SMP, ${#WANT_MODULES[@]} module(s) asked, $NDISKS disk(s), timeout ${TIMEOUT}s)"
start_s=$SECONDS
set +e
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
  -machine pc -cpu max -m "$MEM" -smp "$SMP" \
  -nodefaults -no-user-config -display none -monitor none -serial stdio -net none \
  -kernel "$KERNEL" -initrd "$WORK/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 $APPEND" \
  -no-reboot -pidfile "$QEMU_PID_FILE" \
  "${QEMU_DISK_ARGS[@]}" </dev/null 2>&1 \
  | tr -d '\r' | if [ "$QUIET" -eq 1 ]; then cat >"$LOGF"; else tee "$LOGF"; fi
qrc="${PIPESTATUS[0]}"
set -e
elapsed=$((SECONDS - start_s))

if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
  [ "$QUIET" -eq 0 ] || tail -n 50 "$LOGF" >&2
  log "FAIL: VM timed out after ${TIMEOUT}s"
  exit 124
fi
code="$(grep -a -E '^VM-EXIT-CODE=[0-9]+$' "$LOGF" | tail -n 1 | cut -d= -f2 || true)"
if [ -z "$code" ]; then
  [ "$QUIET" -eq 0 ] || tail -n 50 "$LOGF" >&2
  log "FAIL: guest reported no exit code (qemu exit $qrc) — see the console output above"
  exit 125
fi
if [ -n "$OUT_DIR" ]; then
  mkdir -p "$OUT_DIR"
  mkdir -p "$WORK/out"
  if debugfs -R "rdump /out $WORK/out" "$WORK/scratch.img" >/dev/null 2>&1 && [ -d "$WORK/out/out" ]; then
    cp -a "$WORK/out/out/." "$OUT_DIR/"
  else
    log "warning: could not copy the guest's /scratch/out back to $OUT_DIR"
  fi
fi
if [ "$QUIET" -eq 1 ] && [ "$code" -ne 0 ]; then
  log "guest exit code $code; last console lines:"; tail -n 40 "$LOGF" >&2
fi
[ "$QUIET" -eq 1 ] || log "guest exit code $code (VM ran ${elapsed}s)"
exit "$code"
