#!/usr/bin/env bash
# infra/vm/setup.sh — install what infra/vm/run-in-vm.sh needs (idempotent, safe to re-run).
#
# Installs (Debian 12 package names):
#   qemu-system-x86   qemu-system-x86_64 (software emulation; KVM is not used)
#   linux-image-amd64 /boot/vmlinuz-*-amd64 and /lib/modules/<ver>/kernel/** (md, raid0, tls, dm ...)
#   busybox-static    a static /bin/busybox for the guest initramfs
#   cpio              builds the initramfs archive
#   kmod xz-utils zstd  modprobe --show-depends (dependency lookup), guest modprobe, decompression
#   mdadm e2fsprogs xfsprogs  host tools copied into guests that build RAID arrays / filesystems
#   [pkg shellcheck]  lints the bootstrap scripts (used by infra/tests/run.sh)
#
# Usage:  bash infra/vm/setup.sh            (as root, or with sudo available)
# Env:    VM_SETUP_EXTRA="pkg1 pkg2"        extra packages to install in the same apt call
# Exit:   0 when everything is present afterwards, 1 otherwise (the reason is printed).
set -euo pipefail

PKGS=(qemu-system-x86 linux-image-amd64 busybox-static cpio kmod xz-utils zstd
      mdadm e2fsprogs xfsprogs dmsetup shellcheck)
# shellcheck disable=SC2206  # word splitting of the extra list is intended
PKGS+=(${VM_SETUP_EXTRA:-})

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup.sh: not root and no sudo: cannot install ${PKGS[*]}" >&2; exit 1
  fi
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup.sh: all packages present"
else
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: no apt-get on this machine: cannot install ${missing[*]}" >&2; exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Another engineer (or CI step) may hold the dpkg lock: wait for it instead of failing.
  apt_opts=(-o DPkg::Lock::Timeout=300 -y -q --no-install-recommends)
  echo "setup.sh: installing ${missing[*]}"
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
  $SUDO apt-get "${apt_opts[@]}" install "${missing[@]}" >/tmp/corelog-vm-setup.log 2>&1 || {
    echo "setup.sh: apt-get install failed; last lines of /tmp/corelog-vm-setup.log:" >&2
    tail -20 /tmp/corelog-vm-setup.log >&2
    exit 1
  }
fi

# Sanity: the pieces run-in-vm.sh looks for.
ok=1
command -v qemu-system-x86_64 >/dev/null || { echo "setup.sh: qemu-system-x86_64 missing" >&2; ok=0; }
[ -x /bin/busybox ] || { echo "setup.sh: /bin/busybox missing" >&2; ok=0; }
compgen -G "/boot/vmlinuz-*-amd64" >/dev/null || { echo "setup.sh: no /boot/vmlinuz-*-amd64" >&2; ok=0; }
[ "$ok" -eq 1 ] || exit 1
echo "setup.sh: ready ($(printf "%s\n" /boot/vmlinuz-*-amd64 | sort -V | tail -n 1))"
