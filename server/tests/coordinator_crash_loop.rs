//! The replicated crash loop in coordinator mode: one recorded closed-loop workload (100
//! connections over both addresses) runs throughout while, at random moments, the leader
//! is SIGKILLed (and restarted at once, racing its follower's take-over, or after the
//! follower took over), the follower is SIGKILLed (restarted at once or after the leader
//! degraded), or both are SIGKILLed and restarted in a random order. Between faults the
//! pair must come back to one leader with both in sync. At the end every acknowledged
//! append reads back at its position with its payload from whoever leads, nothing
//! refused is stored, nothing is stored twice, no older epoch acknowledged after a newer
//! one had (epoch order), Porcupine finds the history linearizable, and the other node's
//! log equals the leader's.
//!
//! CI runs `CORELOG_COORD_KILLS` (default 10) faults; `benches/coordinator-crash-loop.sh`
//! runs the long version. `CORELOG_SEED` replays a schedule.

mod common;

use std::time::Duration;

use common::coord::{cluster, run_for, CONNECTIONS};
use corelog_history as workload;
use rand::{Rng, SeedableRng};

fn faults() -> usize {
    std::env::var("CORELOG_COORD_KILLS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(10)
}

#[test]
fn coordinator_crash_loop_keeps_every_acknowledged_append() {
    let n = faults();
    let seed: u64 = std::env::var("CORELOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("coordinator crash loop: {n} faults, seed {seed} (CORELOG_SEED to replay the schedule)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let Some(mut c) = cluster("coord_crash_loop") else { return };
    let mut leader = c.wait_pair(Duration::from_secs(60));
    let load = workload::spawn(workload::Config {
        addrs: c.addrs(),
        client: c.client().with_failover_timeout(Duration::from_secs(3)).with_request_timeout(Duration::from_secs(5)),
        connections: CONNECTIONS,
        duration: Duration::from_secs(24 * 3600), // ended by finish()
        payload_bytes: 48,
        tag: "k".into(),
    })
    .expect("workload");
    let mut counts = [0usize; 5];
    for k in 0..n {
        // A random moment: 50–1,500 ms of load and some acknowledgements since the pair
        // was whole again.
        run_for(&load, Duration::from_millis(rng.gen_range(50..1500)), 20, "between faults");
        let follower = 1 - leader;
        let kind = rng.gen_range(0..10);
        let what = match kind {
            0..=3 => {
                c.nodes[leader].kill9();
                c.nodes[leader].spawn();
                "leader killed, restarted at once"
            }
            4..=5 => {
                c.nodes[leader].kill9();
                c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[follower].contains("role=leader"));
                c.nodes[leader].spawn();
                "leader killed, restarted after the take-over"
            }
            6 => {
                c.nodes[follower].kill9();
                c.nodes[follower].spawn();
                "follower killed, restarted at once"
            }
            7 => {
                c.nodes[follower].kill9();
                c.wait_metric(leader, "corelog_degraded", Duration::from_secs(30), |v| v == 1.0);
                c.nodes[follower].spawn();
                "follower killed, restarted after the leader degraded"
            }
            _ => {
                let first = rng.gen_range(0..2);
                c.nodes[leader].kill9();
                c.nodes[follower].kill9();
                c.nodes[first].spawn();
                c.nodes[1 - first].spawn();
                "both killed, restarted in a random order"
            }
        };
        counts[[0, 0, 0, 0, 1, 1, 2, 3, 4, 4][kind]] += 1;
        leader = c.wait_pair(Duration::from_secs(60));
        eprintln!(
            "fault {k}: {what}; node {} leads; {} ok, {} unknown so far",
            c.nodes[leader].name,
            load.live.oks(),
            load.live.unknown()
        );
    }
    run_for(&load, Duration::ZERO, 100, "after the last fault");
    let h = load.finish();
    let r = c.verify(leader, &h);
    c.wait_same_log(1 - leader, leader, Duration::from_secs(60));
    eprintln!(
        "coordinator crash loop: {n} faults (leader at once {}, leader after take-over {}, follower at once {}, follower after degrading {}, both {}); {} operations: {} ok, all read back; {} failed; {} unknown ({} stored); seed {seed}",
        counts[0], counts[1], counts[2], counts[3], counts[4], r.ops, r.ok, r.failed, r.unknown, r.unknown_present
    );
    eprintln!(
        "sealed segments (an index file and a checkpoint written at each roll, under the faults): {} {}, {} {}",
        c.nodes[0].name,
        common::sealed_segments(&c.nodes[0].data),
        c.nodes[1].name,
        common::sealed_segments(&c.nodes[1].data)
    );
}
