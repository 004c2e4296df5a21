//! Re-executing this process: how a node changes role in coordinator mode, and how a
//! follower seeded by its leader starts over its new log. Used by both planes, so it
//! sits below both.

use std::time::{Duration, Instant};

use crate::coord::cell::ControlCell;

/// Stops the data plane and re-executes this process to take its new role from etcd:
/// the coordinator's role changes, and a node's start-up (a leader whose shard turned
/// out damaged) or a leader that learns it lost writes.
pub fn reexec(ctl: &ControlCell, why: &str) -> ! {
    log::info!("coordinator: {why}: re-executing to change role");
    stop_and_exec(ctl)
}

/// [`reexec`] from a shard's executor (a leader that learns it lost writes).
pub async fn reexec_on_executor(ctl: &ControlCell, why: &str) {
    log::info!("coordinator: {why}: re-executing to change role");
    stop_and_exec_on_executor(ctl).await
}

/// Stops the data plane (every shard write finished) and re-executes this process with
/// its arguments. From a thread that runs no shard (main, coordinator): it waits
/// blocking. A shard's executor calls [`stop_and_exec_on_executor`] instead.
pub fn stop_and_exec(ctl: &ControlCell) -> ! {
    ctl.stop();
    let until = Instant::now() + WRITES_FINISH_WITHIN;
    while writing(ctl) {
        if Instant::now() > until {
            write_did_not_finish();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let err = exec_self();
    crate::fatal(&format!("re-exec failed: {err}"))
}

/// [`stop_and_exec`] from a shard's executor (a follower seeded by its leader, a leader
/// that learns it lost writes): it waits without blocking the thread, because each
/// shard's write-in-flight flag is cleared by that shard's own commit loop, and the
/// other shards this executor runs (`--executors`) must get to theirs.
pub async fn stop_and_exec_on_executor(ctl: &ControlCell) {
    ctl.stop();
    let until = Instant::now() + WRITES_FINISH_WITHIN;
    while writing(ctl) {
        if Instant::now() > until {
            write_did_not_finish();
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    let err = exec_self();
    crate::fatal(&format!("re-exec failed: {err}"))
}

const WRITES_FINISH_WITHIN: Duration = Duration::from_secs(5);

fn writing(ctl: &ControlCell) -> bool {
    ctl.slots.iter().any(|s| s.writing.load(std::sync::atomic::Ordering::SeqCst))
}

fn write_did_not_finish() -> ! {
    crate::fatal("a shard write did not finish within 5 s of the stop; exiting instead of re-executing")
}

/// execv(2) of this binary with this process's arguments and environment — not
/// `Command::exec`, which first sets SIGPIPE back to its default action (process-wide)
/// while the other threads still run: a shard writing to a connection its peer had
/// just reset then killed the whole process with SIGPIPE, silently, in the instant
/// before the exec (seen as a node that vanished during a role change). Here SIGPIPE
/// stays ignored, as the new image sets it anyway, and the signal mask is inherited
/// (`serve` blocks the same signals again before its first thread).
fn exec_self() -> std::io::Error {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstr = |s: &std::ffi::OsStr| CString::new(s.as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput);
    let args: Result<Vec<CString>, _> = std::env::args_os().map(|a| cstr(&a)).collect();
    let args = match args {
        Ok(a) if !a.is_empty() => a,
        Ok(_) => return std::io::Error::other("no argv[0]"),
        Err(e) => return e.into(),
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: a NUL-terminated path and a NULL-terminated argv of live CStrings; execv
    // returns only on failure.
    unsafe { libc::execv(c"/proc/self/exe".as_ptr(), argv.as_ptr()) };
    std::io::Error::last_os_error()
}
