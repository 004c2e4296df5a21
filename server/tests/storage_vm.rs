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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod common;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A host tool to ship into the guest (`-f PATH`), from the usual sbin directories.
fn tool(name: &str) -> Option<String> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().map(|d| format!("{d}/{name}")).find(|p| Path::new(p).exists())
}

#[test]
fn storage_faults_in_vm() {
    if std::env::var("VM_GUEST").is_ok() {
        return; // already inside a VM
    }
    if std::env::var("CORELOG_SKIP_VM").is_ok_and(|v| v == "1") {
        common::skip("storage_faults_in_vm", "CORELOG_SKIP_VM=1");
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
    let root = repo_root();
    let dir = common::TempDir::new("storage-vm");
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(128 << 20).unwrap();
    let corelog = env!("CARGO_BIN_EXE_corelog");
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("infra/vm/run-in-vm.sh"))
        .args(["-m", "dm_mod", "-s", "64", "-t", "420", "--mem", "1024", "-d"])
        .arg(&disk)
        .arg("-f")
        .arg(format!("{corelog}:/usr/local/bin/corelog"));
    for p in &paths {
        cmd.arg("-f").arg(p);
    }
    let t0 = Instant::now();
    let out = cmd.arg(root.join("server/tests/vm/storage.sh")).current_dir(&root).output().expect("run-in-vm.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let code = out.status.code().unwrap_or(-1);
    if code == 77 {
        let why = text.lines().find(|l| l.starts_with("SKIP")).unwrap_or("qemu or the Debian kernel is missing");
        common::skip("storage_faults_in_vm", why);
        return;
    }
    let summary: Vec<&str> = text.lines().filter(|l| l.starts_with("storage-vm:")).collect();
    assert!(code == 0, "VM storage test failed with exit code {code} after {:?}:\n{text}", t0.elapsed());
    assert!(text.contains("storage-vm: PASS"), "no PASS line:\n{text}");
    eprintln!("storage_faults_in_vm passed in {:.1} s:\n{}", t0.elapsed().as_secs_f64(), summary.join("\n"));
}
