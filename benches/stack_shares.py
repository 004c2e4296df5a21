#!/usr/bin/env python3
"""Share of each process's samples by what the stack is doing (first match wins), from
folded stacks whose first frame is the process role (benches/profile.sh writes them)."""
import collections, sys
CATS = [
    ("sleep/wake-up", ("finish_task_switch", "schedule_timeout", "__schedule")),
    ("disk write", ("iomap_dio", "ext4_file_write_iter", "blk_mq_", "io_write")),
    ("socket send", ("__sys_sendto", "tcp_sendmsg", "sock_sendmsg")),
    ("socket receive", ("__sys_recvfrom", "tcp_recvmsg", "sock_recvmsg")),
    ("reactor: io_uring, membarrier", ("io_uring_enter", "io_submit_sqes", "__io_uring_get_cqe", "glommio::sys::uring")),
    # ";ring::" (a frame of the ring crate), not "uring::" (glommio's io_uring module).
    ("TLS (rustls/ring)", ("rustls::", "ring_core_", ";ring::")),
    ("interrupts/softirq", ("handle_softirqs", "asm_common_interrupt", "irq_exit")),
    ("membarrier", ("membarrier",)),
]
tot = collections.Counter(); cat = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    role = stack.split(";", 1)[0]; n = int(n); tot[role] += n
    for name, keys in CATS:
        if any(k in stack for k in keys):
            cat[role][name] += n; break
    else:
        cat[role]["corelog/glommio user code" if "corelog" in stack or "glommio" in stack else "other"] += n
for role in ("leader", "follower", "loadgen"):
    if tot[role]:
        parts = ", ".join(f"{k} {v * 100 / tot[role]:.0f} %" for k, v in cat[role].most_common())
        # cpu-clock weights are nanoseconds of CPU.
        print(f"  {role} ({tot[role] / 1e9:.2f} CPU s sampled): {parts}")
