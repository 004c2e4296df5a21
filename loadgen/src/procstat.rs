//! CPU time of a process: utime + stime from /proc/<pid>/stat, in seconds.

/// CPU seconds (user + system, all threads) the process has used so far; None if it
/// is gone or unreadable.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&s)
}

/// CPU seconds of this process.
pub fn self_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(0.0)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The command name may hold spaces and parentheses: fields are counted after the last
/// ')'. utime and stime are fields 14 and 15 of the line (11 and 12 after the name).
pub fn parse_stat(s: &str) -> Option<f64> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Busy CPU seconds of the whole machine so far (every process and the kernel: all
/// fields of the `cpu` line of /proc/stat except idle and iowait).
pub fn machine_busy_seconds() -> f64 {
    machine_cpu().0
}

/// (busy, softirq) CPU seconds of the machine so far. Softirq time is mostly loopback TCP
/// receive processing. Without CONFIG_IRQ_TIME_ACCOUNTING (as here: server + load
/// generator CPU add up to the busy total) it is also inside the CPU time of whichever
/// process was interrupted; with it, it is charged to no process.
pub fn machine_cpu() -> (f64, f64) {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else { return (0.0, 0.0) };
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else { return (0.0, 0.0) };
    let f: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: f64 = f.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum();
    let softirq = f.get(6).copied().unwrap_or(0.0);
    (busy / clock_ticks(), softirq / clock_ticks())
}

/// CPU seconds of several processes (absent ones count 0).
pub fn sum_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_seconds(*p)).sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_a_stat_line_with_odd_name() {
        let line = "1234 (a b) c) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 3 0 1 1 1";
        let v = super::parse_stat(line).unwrap();
        assert!((v - 300.0 / super::clock_ticks()).abs() < 1e-9);
    }
}
