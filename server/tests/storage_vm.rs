//! Storage faults at the device level. The host kernels here have no device-mapper, so
//! the faults are injected inside a throw-away VM running Debian's kernel
//! (`infra/vm/run-in-vm.sh -m dm_mod`), by `tests/vm/storage.sh`: a read error at
//! start-up (refused with file and byte, no SIGBUS), a flipped byte in the last
//! acknowledged batch written to the raw device (refused, nothing cut), EIO on
//! write/fdatasync while running (exit 70, nothing acknowledged after it), a read error
//! while running and tables reloaded under the node, a restart on a full disk, the disk
//! filling up while running — every acknowledged append read back after healing. Skipped (with the reason printed) only
//! where the harness answers 77 (qemu or the Debian kernel cannot be installed), or with
//! `CORELOG_SKIP_VM=1`; under `CORELOG_NO_SKIP=1` a skip is a failure.

use std::path::Path;

mod common;

/// A host tool to ship into the guest (`-f PATH`), from the usual sbin directories.
fn tool(name: &str) -> Option<String> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().map(|d| format!("{d}/{name}")).find(|p| Path::new(p).exists())
}

#[test]
fn storage_faults_in_vm() {
    if !common::vm::vm_wanted("storage_faults_in_vm") {
        return;
    }
    let tools = ["dmsetup", "mkfs.ext4", "debugfs", "e2fsck"];
    let paths: Vec<String> = match tools.iter().map(|t| tool(t).ok_or(*t)).collect::<Result<_, _>>() {
        Ok(p) => p,
        Err(missing) => {
            common::skip("storage_faults_in_vm", &format!("{missing} is not installed (packages dmsetup, e2fsprogs)"));
            return;
        }
    };
    let dir = common::TempDir::new("storage-vm");
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(128 << 20).unwrap();
    let mut cmd = common::vm::vm_command();
    cmd.args(["-m", "dm_mod", "-s", "64", "-t", "420", "--mem", "1024", "-d"])
        .arg(&disk)
        .arg("-f")
        .arg(format!("{}:/usr/local/bin/corelog", env!("CARGO_BIN_EXE_corelog")));
    for p in &paths {
        cmd.arg("-f").arg(p);
    }
    common::vm::run_vm_script("storage_faults_in_vm", cmd, "storage.sh", "storage-vm", |_| false);
}
