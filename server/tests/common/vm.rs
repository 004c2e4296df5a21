//! Tests run in a throw-away VM by `infra/vm/run-in-vm.sh` with a script of
//! `server/tests/vm/`: when they run, and how the harness's answer is judged.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::skip;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Whether VM test `test` runs here: not inside a guest (whose script may run this
/// binary again), and not with `CORELOG_SKIP_VM=1` (a skip, said as `skip` says it).
pub fn vm_wanted(test: &str) -> bool {
    if std::env::var("VM_GUEST").is_ok() {
        return false;
    }
    if std::env::var("CORELOG_SKIP_VM").is_ok_and(|v| v == "1") {
        skip(test, "CORELOG_SKIP_VM=1");
        return false;
    }
    true
}

/// `bash infra/vm/run-in-vm.sh`, to run from the repository root; the caller adds the
/// harness's options before `run_vm_script`.
pub fn vm_command() -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("infra/vm/run-in-vm.sh")).current_dir(repo_root());
    cmd
}

/// Runs `cmd` (from `vm_command`) on `server/tests/vm/{script}`. Exit 77 (qemu or the
/// Debian kernel missing) is a skip; otherwise it must exit 0 and print `{tag}: PASS`.
/// Prints the `{tag}:` lines and those `also` keeps.
pub fn run_vm_script(test: &str, mut cmd: Command, script: &str, tag: &str, also: impl Fn(&str) -> bool) {
    let t0 = Instant::now();
    let out = cmd.arg(repo_root().join("server/tests/vm").join(script)).output().expect("run infra/vm/run-in-vm.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let code = out.status.code().unwrap_or(-1);
    if code == 77 {
        let why = text.lines().find(|l| l.starts_with("SKIP")).unwrap_or("qemu or the Debian kernel is missing");
        skip(test, why);
        return;
    }
    assert!(code == 0, "{script} in the VM failed with exit code {code} after {:?}:\n{text}", t0.elapsed());
    assert!(text.contains(&format!("{tag}: PASS")), "no PASS line:\n{text}");
    let summary: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{tag}:")) || also(l)).collect();
    eprintln!("{test} passed in {:.1} s:\n{}", t0.elapsed().as_secs_f64(), summary.join("\n"));
}
