//! Linearizability per shard with `tools/porcupine` (Go).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Porcupine's verdict (`tools/porcupine`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linearizability {
    Linearizable(String),
    NotLinearizable(String),
    /// Its time limit passed.
    Inconclusive(String),
}

/// Whether `go` is on PATH.
pub fn go_available() -> bool {
    Command::new("go").arg("version").output().is_ok_and(|o| o.status.success())
}

/// `tools/porcupine` of this source tree (for tests and benches).
pub fn porcupine_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/porcupine")
}

/// Runs `go run . HISTORY` in `tool_dir` (tools/porcupine). Err: go missing, input
/// error, or the tool failed.
pub fn porcupine(tool_dir: &Path, history: &Path) -> Result<Linearizability, String> {
    let history = std::path::absolute(history).map_err(|e| format!("{}: {e}", history.display()))?;
    let o = Command::new("go")
        .args(["run", ".", "-timeout", "300s"])
        .arg(&history)
        .current_dir(tool_dir)
        .output()
        .map_err(|e| format!("go run in {}: {e}", tool_dir.display()))?;
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    match o.status.code() {
        Some(0) => Ok(Linearizability::Linearizable(out)),
        Some(1) => Ok(Linearizability::NotLinearizable(out)),
        Some(3) => Ok(Linearizability::Inconclusive(out)),
        _ => Err(format!("porcupine ({}): {out} {err}", o.status)),
    }
}
