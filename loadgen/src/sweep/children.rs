//! The load-generating children of one step: spawned as `run --start-at stdin --json
//! FILE`, each with its share of the connections and its own CPUs; heard saying `READY`,
//! given the shared start time, waited for, and read back from their JSON files.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{procs_for, split, SweepConfig, CHILD_GRACE};
use crate::procstat;
use crate::result::RunResult;

/// The children of one run of a step, in the order of their shares.
pub(super) struct Children {
    children: Vec<Child>,
    /// Where child k writes its result.
    json_paths: Vec<PathBuf>,
    /// Lines of the children's stdout, tagged with the child's index; `EOF` when one
    /// closed it.
    lines: mpsc::Receiver<(usize, String)>,
}

impl Drop for Children {
    fn drop(&mut self) {
        // Never leave a child behind on an error path.
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Children {
    /// Spawns the children that hold `n` connections together (run `rep` of the step).
    pub(super) fn spawn(cfg: &SweepConfig, n: usize, rep: usize, tag: &str) -> Result<Children, String> {
        let procs = procs_for(n, cfg.max_conns_per_proc);
        let shares = split(n, procs);
        crate::log!("{tag}: spawning {procs} load-generator process(es) of {shares:?} connections");
        let (tx, lines) = mpsc::channel::<(usize, String)>();
        let mut kids = Children { children: Vec::new(), json_paths: Vec::new(), lines };
        for (k, &share) in shares.iter().enumerate() {
            let json = cfg.work_dir.join(format!("step-{n}-rep-{rep}-proc-{k}.json"));
            let _ = std::fs::remove_file(&json);
            let mut c = child_command(cfg, n, procs, k, share, &json);
            c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
            let mut child = c.spawn().map_err(|e| format!("spawn {}: {e}", cfg.exe.display()))?;
            let out = child.stdout.take().expect("piped");
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((k, line)).is_err() {
                        break;
                    }
                }
                let _ = tx.send((k, "EOF".into()));
            });
            kids.children.push(child);
            kids.json_paths.push(json);
        }
        Ok(kids)
    }

    pub(super) fn len(&self) -> usize {
        self.children.len()
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    /// Waits until every child is connected (or gave up); returns the connections they
    /// hold together.
    pub(super) fn await_ready(&mut self, cfg: &SweepConfig, tag: &str) -> Result<u64, String> {
        let connect_deadline = Instant::now() + cfg.connect_deadline + CHILD_GRACE;
        let mut ready = vec![false; self.children.len()];
        let mut connected = 0u64;
        while ready.iter().any(|r| !r) {
            let left = connect_deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{tag}: children not ready within {:?}", cfg.connect_deadline + CHILD_GRACE));
            }
            match self.lines.recv_timeout(left) {
                Ok((k, line)) if line.starts_with("READY") => {
                    ready[k] = true;
                    connected += line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                }
                Ok((k, line)) if line == "EOF" => {
                    let st = self.children[k].wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!("{tag}: load generator {k} exited before it was ready ({st})"));
                }
                Ok(_) => {}
                Err(_) => return Err(format!("{tag}: children not ready in time")),
            }
        }
        Ok(connected)
    }

    /// Tells every child the UNIX time at which its clock starts.
    pub(super) fn send_start(&mut self, start_unix: f64, tag: &str) -> Result<(), String> {
        for c in &mut self.children {
            let stdin = c.stdin.as_mut().expect("piped");
            writeln!(stdin, "{start_unix:.6}").map_err(|e| format!("{tag}: send start time: {e}"))?;
            stdin.flush().map_err(|e| format!("{tag}: send start time: {e}"))?;
        }
        Ok(())
    }

    /// Waits for the children to finish their in-flight appends, write their JSON and
    /// exit (killing those still there after the timeout and CHILD_GRACE). Returns each
    /// one's CPU seconds as last seen while it ran.
    pub(super) fn await_exit(&mut self, cfg: &SweepConfig, tag: &str) -> Result<Vec<f64>, String> {
        let exit_deadline = Instant::now() + cfg.timeout + CHILD_GRACE;
        let mut cpu_total = vec![0.0; self.children.len()];
        for (k, c) in self.children.iter_mut().enumerate() {
            loop {
                if let Some(cpu) = procstat::cpu_seconds(c.id()) {
                    cpu_total[k] = cpu;
                }
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < exit_deadline => std::thread::sleep(Duration::from_millis(20)),
                    Ok(None) => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Err(e) => return Err(format!("{tag}: wait for load generator {k}: {e}")),
                }
            }
        }
        Ok(cpu_total)
    }

    /// The children's results; `cpu_total` is what [`Children::await_exit`] saw.
    pub(super) fn results(&self, tag: &str, cpu_total: &[f64]) -> Result<Vec<RunResult>, String> {
        let mut results = Vec::new();
        for (k, p) in self.json_paths.iter().enumerate() {
            let s = std::fs::read_to_string(p)
                .map_err(|e| format!("{tag}: load generator {k} left no result {}: {e}", p.display()))?;
            let mut r = RunResult::from_json(s.trim())?;
            // The child's own count includes the time after the window; keep the larger.
            r.cpu_s = r.cpu_s.max(cpu_total[k]);
            results.push(r);
        }
        Ok(results)
    }
}

/// The command line of child `k` of `procs`, holding `share` of the step's `n` connections.
fn child_command(cfg: &SweepConfig, n: usize, procs: usize, k: usize, share: usize, json: &Path) -> Command {
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let cores_each = (ncpu / procs).max(1);
    let mut c = Command::new(&cfg.exe);
    c.arg("run")
        .args(["--target", &cfg.targets])
        .args(["--connections", &share.to_string()])
        .args(["--warmup", &format!("{}ms", cfg.warmup.as_millis())])
        .args(["--duration", &format!("{}ms", cfg.duration.as_millis())])
        .args(["--cores", &cores_each.to_string()])
        .args(["--first-cpu", &((k * cores_each) % ncpu).to_string()])
        .args(["--source-ips", &cfg.source_ips.to_string()])
        .args(["--source-ip-base", &(1 + (k * cfg.source_ips as usize) % 250).to_string()])
        .args(["--connect-deadline", &format!("{}ms", cfg.connect_deadline.as_millis())])
        .args(["--timeout", &format!("{}ms", cfg.timeout.as_millis())])
        .args(["--start-at", "stdin"])
        .args(["--label", &format!("loadgen[{k}]")])
        .arg("--quiet")
        .arg("--json")
        .arg(json)
        .args(&cfg.child_args);
    if let Some(rate) = cfg.rate {
        c.args(["--rate", &format!("{}", rate * share as f64 / n as f64)]);
    }
    c
}
