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

/// Busy CPU seconds of the whole machine so far (every process and the kernel).
pub fn machine_busy_seconds() -> f64 {
    machine_cpu().0
}

/// (busy, softirq) CPU seconds of the machine so far; only differences between two
/// calls mean anything. Softirq time is mostly loopback TCP receive processing. Without
/// CONFIG_IRQ_TIME_ACCOUNTING (as here: server + load generator CPU add up to the busy
/// total) it is also inside the CPU time of whichever process was interrupted; with it,
/// it is charged to no process.
pub fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    machine_cpu_from(&stat, &uptime, clock_ticks())
}

/// Busy = wall time × online CPUs less idle and iowait time: the kernel measures idle
/// time at idle entry and exit, while the busy fields (user, system, …) are sampled at
/// each tick and miss most of a CPU woken thousands of times a second between idle
/// periods (on a 16-vCPU machine at 2,000 appends/s they summed to a third of the
/// servers' own /proc/PID/stat time). Softirq stays the tick-sampled field.
fn machine_cpu_from(stat: &str, uptime: &str, hz: f64) -> (f64, f64) {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return (0.0, 0.0) };
    let f: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let idle = (f.get(3).copied().unwrap_or(0.0) + f.get(4).copied().unwrap_or(0.0)) / hz;
    let softirq = f.get(6).copied().unwrap_or(0.0) / hz;
    let cpus =
        stat.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count();
    let wall: f64 = uptime.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ((wall * cpus as f64 - idle).max(0.0), softirq)
}

/// CPU seconds of several processes (absent ones count 0).
pub fn sum_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_seconds(*p)).sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn machine_busy_is_wall_time_less_idle() {
        // Two CPUs, 100 s up: 200 CPU seconds, of which 150 idle and 10 iowait (ticks at
        // 100 Hz). The busy fields (here 1 + 2 + 3 s) are not what is counted.
        let stat = "cpu  100 0 200 15000 1000 0 300 0 0 0\n\
                    cpu0 50 0 100 7500 500 0 150 0 0 0\n\
                    cpu1 50 0 100 7500 500 0 150 0 0 0\n\
                    intr 12345\n";
        let (busy, softirq) = super::machine_cpu_from(stat, "100.00 150.00\n", 100.0);
        assert!((busy - 40.0).abs() < 1e-9, "{busy}");
        assert!((softirq - 3.0).abs() < 1e-9, "{softirq}");
        // Unreadable inputs give zeros, not a panic.
        assert_eq!(super::machine_cpu_from("", "", 100.0), (0.0, 0.0));
    }

    #[test]
    fn parses_a_stat_line_with_odd_name() {
        let line = "1234 (a b) c) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 3 0 1 1 1";
        let v = super::parse_stat(line).unwrap();
        assert!((v - 300.0 / super::clock_ticks()).abs() < 1e-9);
    }
}
