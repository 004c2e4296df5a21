//! Shards are pinned inside the process's affinity mask: a node started under
//! `taskset -c C` runs every shard executor on CPU C (it used to pin shard k to CPU k,
//! escaping the mask — a leader and a follower split over one machine's CPUs then shared
//! the same ones).

mod common;

use common::*;

/// The `Cpus_allowed_list` of every thread of process `pid` whose name starts with
/// `prefix` (glommio names an executor's threads `<name>-<executor id>`).
fn threads_cpus(pid: u32, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap_or("");
            out.push(line.split_whitespace().nth(1).unwrap_or("?").to_string());
        }
    }
    out
}

#[test]
fn shards_run_on_the_cpus_of_the_process_mask() {
    let cpus = corelog_server::cpus::allowed();
    if cpus.len() < 2 {
        return skip("shards_run_on_the_cpus_of_the_process_mask", "needs two CPUs to tell the mask from CPU 0");
    }
    // The last CPU: shard 0 would be pinned to the first without the fix.
    let cpu = cpus[cpus.len() - 1].to_string();
    let dir = TempDir::new("placement");
    let ports = ports();
    let args = Node::args(Mode::Standalone, &dir.path().join("data"), ports, None, "", &["--shard-count", "2"]);
    let mut node = Node::new("standalone", dir.path().join("data"), ports, args);
    node.wrap = vec!["taskset".into(), "-c".into(), cpu.clone()];
    node.start();
    let pid = node.child.as_ref().unwrap().id();
    for shard in ["shard-0-", "shard-1-"] {
        let seen = threads_cpus(pid, shard);
        assert!(!seen.is_empty(), "no {shard}* thread in the node");
        assert!(seen.iter().all(|c| *c == cpu), "{shard}* threads of a node under taskset -c {cpu}: {seen:?}");
    }
    // And it serves from there: every acknowledged append reads back.
    let rt = runtime();
    let acked = Acked::default();
    let cfg = client_config(None);
    let errors = rt.block_on(load(&node.addr(), &cfg, 4, 25, "placement", &acked));
    assert_eq!(errors, 0, "connections that failed");
    assert_eq!(acked.lock().unwrap().len(), 100);
    let shards =
        rt.block_on(async { vec![read_all(&node.addr(), &cfg, 0).await, read_all(&node.addr(), &cfg, 1).await] });
    verify_acked(&acked, &shards);
}
