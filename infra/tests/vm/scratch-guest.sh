#!/bin/sh
# Runs INSIDE the test VM: the scratch disk is a mounted ext4 block device; /scratch/out comes back.
set -e
grep -q ' /scratch ext4 ' /proc/mounts
[ "$VM_SCRATCH" = /scratch ]
mkdir -p /scratch/out/sub
echo hello >/scratch/out/hello.txt
echo nested >/scratch/out/sub/nested.txt
