//! The CPU floor of a replicated append at moderate load, without corelog: how little CPU
//! can a leader and a follower spend per append on this machine when they do only what the
//! durability contract needs — receive the request, ship it, write it durably on both
//! (4 KiB `O_DIRECT | O_DSYNC`), acknowledge, reply — over plain TCP on loopback, with
//! blocking system calls and no TLS, no framing checks, no metrics, no runtime.
//!
//! Three roles, one process each (`benches/pair_floor.sh` starts them):
//! - `follower`: blocking loop — read one shipment, write it, send a 4-byte acknowledgement.
//! - `leader`: one thread on epoll; requests that arrived since the last write form the next
//!   batch (group commit, as corelog's); ships it, then writes it (blocking `pwrite`), and
//!   answers a batch's requests when the follower's acknowledgement for it has come.
//! - `client`: open loop over N connections at a fixed rate (connection `k % N` sends the
//!   k-th request at `start + k / rate`, as `corelog-loadgen --rate` paces; `--rate 0`:
//!   closed loop, as the load generator without `--rate`); after a warm-up
//!   it reads the leader's and follower's CPU ticks and context switches from /proc for the
//!   window and prints them per acknowledged append.
//!
//! Bounded: one request in flight per connection, a batch holds at most one 4 KiB block of
//! requests, the files are a fixed ring of blocks, the client runs for a fixed time.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use corelog_loadgen::procstat::cpu_seconds;

use corelog_benches::pair_wire::{shipment, zeroed_file, BLOCK, FILE_BLOCKS, REQ};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| -> String {
        let i = args.iter().position(|a| a == name).unwrap_or_else(|| die(&format!("missing {name}")));
        args.get(i + 1).cloned().unwrap_or_else(|| die(&format!("{name} needs a value")))
    };
    let engine = if args.iter().any(|a| a == "--engine") { get("--engine") } else { "pwrite".into() };
    let r = match args.get(1).map(String::as_str) {
        Some("follower") => follower(&get("--listen"), &get("--file"), &engine),
        Some("leader") => leader(&get("--listen"), &get("--follower"), &get("--file"), &engine),
        Some("client") => client(
            &get("--target"),
            parse(&get("--connections")),
            parse(&get("--rate")),
            parse(&get("--warmup")),
            parse(&get("--duration")),
            [parse(&get("--leader-pid")), parse(&get("--follower-pid"))],
        ),
        _ => die("usage: pair_floor follower|leader|client ... (see benches/pair_floor.sh)"),
    };
    if let Err(e) = r {
        die(&e.to_string());
    }
}

fn die(msg: &str) -> ! {
    eprintln!("pair_floor: {msg}");
    std::process::exit(2)
}

fn parse<T: std::str::FromStr>(s: &str) -> T {
    s.parse().unwrap_or_else(|_| die(&format!("not a number: {s}")))
}

/// A 4 KiB-aligned block for O_DIRECT.
struct Block(Box<[u8]>, usize);
impl Block {
    fn new() -> Block {
        let v = vec![0u8; 2 * BLOCK].into_boxed_slice();
        let off = (BLOCK - (v.as_ptr() as usize % BLOCK)) % BLOCK;
        Block(v, off)
    }
    fn buf(&mut self) -> &mut [u8] {
        &mut self.0[self.1..self.1 + BLOCK]
    }
}

/// The data file: zeroed with buffered writes and synced first (so every timed write is an
/// overwrite, as corelog's zeroed-ahead segments are), then reopened O_DIRECT | O_DSYNC.
fn disk(path: &str, engine: &str) -> io::Result<Disk> {
    let ring = match engine {
        "pwrite" => None,
        "uring" => Some(io_uring::IoUring::new(8)?),
        e => die(&format!("--engine {e}: pwrite or uring")),
    };
    Ok(Disk { file: open_data(path)?, block: Block::new(), next: 0, ring })
}

fn open_data(path: &str) -> io::Result<Option<File>> {
    if path == "none" {
        return Ok(None);
    }
    zeroed_file(path)?;
    OpenOptions::new().write(true).custom_flags(libc::O_DIRECT | libc::O_DSYNC).open(path).map(Some)
}

/// `--file none`: no disk at all (the network and wake-up share of the floor).
/// `--engine uring`: the write goes through an io_uring and the thread sleeps in
/// `io_uring_enter` for its completion — corelog's path, where the cache flush that
/// `O_DSYNC` needs runs in a kernel worker (not charged to the process) instead of in the
/// writer's `pwrite` (`--engine pwrite`, the default).
struct Disk {
    file: Option<File>,
    block: Block,
    next: u64,
    ring: Option<io_uring::IoUring>,
}
impl Disk {
    /// Writes `data` (≤ 4 KiB) as one block; returns once it is durable.
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        assert!(data.len() <= BLOCK);
        let Some(file) = &self.file else { return Ok(()) };
        let b = self.block.buf();
        b[..data.len()].copy_from_slice(data);
        let at = (self.next % FILE_BLOCKS) * BLOCK as u64;
        let n = match &mut self.ring {
            None => file.write_at(b, at)?,
            Some(ring) => {
                let op = io_uring::opcode::Write::new(io_uring::types::Fd(file.as_raw_fd()), b.as_ptr(), BLOCK as u32)
                    .offset(at)
                    .build();
                // SAFETY: the buffer and the file outlive the operation: we wait for it here.
                unsafe { ring.submission().push(&op).expect("an empty ring has room") };
                ring.submit_and_wait(1)?;
                let cqe = ring.completion().next().expect("submit_and_wait(1) returned a completion");
                if cqe.result() < 0 {
                    return Err(io::Error::from_raw_os_error(-cqe.result()));
                }
                cqe.result() as usize
            }
        };
        assert_eq!(n, BLOCK, "short O_DIRECT write");
        self.next += 1;
        Ok(())
    }
}

fn follower(listen: &str, file: &str, engine: &str) -> io::Result<()> {
    let mut disk = disk(file, engine)?;
    let (mut s, _) = TcpListener::bind(listen)?.accept()?;
    s.set_nodelay(true)?;
    // One blocking read takes whatever shipments have arrived (usually one, whole).
    let (mut buf, mut have) = (vec![0u8; 8 * (4 + BLOCK)], 0usize);
    loop {
        let n = s.read(&mut buf[have..])?;
        if n == 0 {
            return Ok(()); // the leader went away: the run is over
        }
        have += n;
        let mut at = 0;
        while let Some((reqs, len)) = shipment(&buf[at..have]) {
            disk.write(reqs)?;
            s.write_all(&((reqs.len() / REQ) as u32).to_le_bytes())?; // the acknowledgement: its count
            at += len;
        }
        buf.copy_within(at..have, 0);
        have -= at;
    }
}

struct Epoll(i32);
impl Epoll {
    fn new() -> io::Result<Epoll> {
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll(fd))
    }
    fn add(&self, fd: i32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        if unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    fn wait(&self, evs: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
        loop {
            let n = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), evs.len() as i32, timeout_ms) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Reads what is there without blocking; Ok(false) at end of stream. A read that does not
/// fill the buffer took everything there was (level-triggered epoll reports the rest), so
/// the usual case is one `read`, not a second one that says EAGAIN.
fn drain(s: &mut TcpStream, into: &mut Vec<u8>) -> io::Result<bool> {
    let mut tmp = [0u8; 8192];
    loop {
        match s.read(&mut tmp) {
            Ok(0) => return Ok(false),
            Ok(n) if n < tmp.len() => {
                into.extend_from_slice(&tmp[..n]);
                return Ok(true);
            }
            Ok(n) => into.extend_from_slice(&tmp[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

const LISTENER: u64 = u64::MAX;
const FOLLOWER: u64 = u64::MAX - 1;

fn leader(listen: &str, follower_addr: &str, file: &str, engine: &str) -> io::Result<()> {
    let mut disk = disk(file, engine)?;
    let mut f = connect(follower_addr)?;
    f.set_nodelay(true)?;
    f.set_nonblocking(true)?;
    let l = TcpListener::bind(listen)?;
    l.set_nonblocking(true)?;
    let ep = Epoll::new()?;
    ep.add(l.as_raw_fd(), LISTENER)?;
    ep.add(f.as_raw_fd(), FOLLOWER)?;
    let mut clients: Vec<(TcpStream, Vec<u8>)> = Vec::new();
    let mut staged: Vec<(usize, [u8; REQ])> = Vec::new(); // (client, request)
    let mut in_flight: VecDeque<Vec<(usize, [u8; 8])>> = VecDeque::new(); // batches shipped
    let mut acks = Vec::new();
    let mut ship = Vec::with_capacity(4 + BLOCK);
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        let n = ep.wait(&mut evs, if staged.is_empty() { -1 } else { 0 })?;
        for ev in &evs[..n] {
            match ev.u64 {
                LISTENER => loop {
                    match l.accept() {
                        Ok((s, _)) => {
                            s.set_nodelay(true)?;
                            s.set_nonblocking(true)?;
                            ep.add(s.as_raw_fd(), clients.len() as u64)?;
                            clients.push((s, Vec::new()));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                },
                FOLLOWER => {
                    if !drain(&mut f, &mut acks)? {
                        return Ok(()); // the follower went away: the run is over
                    }
                    while acks.len() >= 4 {
                        let count = u32::from_le_bytes(acks[..4].try_into().unwrap()) as usize;
                        acks.drain(..4);
                        let batch = in_flight.pop_front().expect("an acknowledgement for a batch never shipped");
                        assert_eq!(batch.len(), count, "acknowledgements out of order");
                        // Both copies are durable: this batch's own write returned before
                        // its acknowledgement could be read (the write is synchronous).
                        for (c, id) in batch {
                            // 8 bytes, one in flight: fits; a client gone is skipped.
                            let _ = clients[c].0.write_all(&id);
                        }
                    }
                }
                c => {
                    let (s, buf) = &mut clients[c as usize];
                    // A client that goes away (reset, with answers unread) is only closed.
                    let open = drain(s, buf).unwrap_or(false);
                    while buf.len() >= REQ {
                        let mut r = [0u8; REQ];
                        r.copy_from_slice(&buf[..REQ]);
                        buf.drain(..REQ);
                        staged.push((c as usize, r));
                    }
                    if !open {
                        let _ =
                            unsafe { libc::epoll_ctl(ep.0, libc::EPOLL_CTL_DEL, s.as_raw_fd(), std::ptr::null_mut()) };
                    }
                }
            }
        }
        if staged.is_empty() {
            continue;
        }
        // The next batch: what arrived since the last write, at most one block.
        let take = staged.len().min(BLOCK / REQ);
        ship.clear();
        ship.extend_from_slice(&(take as u32).to_le_bytes());
        let mut batch = Vec::with_capacity(take);
        for (c, r) in staged.drain(..take) {
            ship.extend_from_slice(&r);
            batch.push((c, r[..8].try_into().unwrap()));
        }
        // At most 4 KiB into an idle loopback socket's buffer: a full buffer is an error.
        f.write_all(&ship)?;
        disk.write(&ship[4..])?;
        in_flight.push_back(batch);
    }
}

const TIMER: u64 = u64::MAX - 2;

fn monotonic_now() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// A CLOCK_MONOTONIC timerfd armed at absolute times.
struct Timer(i32);
impl Timer {
    fn new() -> io::Result<Timer> {
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Timer(fd))
    }
    /// Fires at `at` on CLOCK_MONOTONIC (at once if that is past).
    fn arm(&self, at: Duration) -> io::Result<()> {
        let at = at.max(Duration::from_nanos(1));
        let v = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: at.as_secs() as libc::time_t,
                tv_nsec: at.subsec_nanos() as libc::c_long,
            },
        };
        if unsafe { libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &v, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    fn clear(&self) {
        let mut b = [0u8; 8];
        let _ = unsafe { libc::read(self.0, b.as_mut_ptr().cast(), 8) };
    }
}

/// Connects, retrying for up to 10 s while the peer is still starting (refused).
fn connect(addr: &str) -> io::Result<TcpStream> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => return r,
        }
    }
}

/// CPU seconds (utime + stime, `corelog_loadgen::procstat`) and voluntary + involuntary
/// context switches of a process, over all its threads (`pair_floor_glommio` runs its
/// executor on a thread of its own).
fn proc_cost(pid: u32) -> io::Result<(f64, u64)> {
    let cpu = cpu_seconds(pid).ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat unreadable")))?;
    let mut cs = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread that ended between the listing and the read counts no more.
        let Ok(status) = std::fs::read_to_string(t?.path().join("status")) else { continue };
        cs += status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
            .sum::<u64>();
    }
    Ok((cpu, cs))
}

/// One load connection: its socket, the bytes of answers read so far, and when the
/// request in flight counts from (None: none in flight).
type Conn = (TcpStream, Vec<u8>, Option<Instant>);

/// CPU seconds and context switches of the leader and the follower at the window's start.
type Costs = ((f64, u64), (f64, u64));

fn client(target: &str, conns: usize, rate: f64, warmup: f64, duration: f64, pids: [u32; 2]) -> io::Result<()> {
    // rate 0: closed loop — each connection sends its next request as soon as its answer
    // came (ab.sh's one-connection figures), latency measured from that send.
    assert!(conns >= 1 && rate >= 0.0);
    let closed = rate == 0.0;
    let ep = Epoll::new()?;
    let mut cs = open_conns(target, conns, &ep)?;
    let timer = Timer::new()?;
    ep.add(timer.0, TIMER)?;
    let (base, origin) = (Instant::now(), monotonic_now());
    let interval = if closed { Duration::ZERO } else { Duration::from_secs_f64(1.0 / rate) };
    let start = Instant::now() + Duration::from_millis(50);
    let (w0, w1) = (start + Duration::from_secs_f64(warmup), start + Duration::from_secs_f64(warmup + duration));
    let mut k: u64 = 0;
    let (mut acked, mut skipped, mut lat) = (0u64, 0u64, Vec::new());
    let mut at_w0 = None;
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut req = [7u8; REQ];
    loop {
        let now = Instant::now();
        if at_w0.is_none() && now >= w0 {
            at_w0 = Some((proc_cost(pids[0])?, proc_cost(pids[1])?, acked));
        }
        if now >= w1 {
            break;
        }
        if closed && now >= start {
            for c in cs.iter_mut().filter(|c| c.2.is_none()) {
                req[..8].copy_from_slice(&k.to_le_bytes());
                c.0.write_all(&req)?;
                c.2 = Some(Instant::now());
                k += 1;
            }
        }
        // Send every request whose time has come (open loop: its connection may be busy).
        while !closed && start + interval.mul_f64(k as f64) <= now {
            let c = (k % conns as u64) as usize;
            if cs[c].2.is_none() {
                req[..8].copy_from_slice(&k.to_le_bytes());
                cs[c].0.write_all(&req)?;
                cs[c].2 = Some(start + interval.mul_f64(k as f64));
            } else if at_w0.is_some() {
                skipped += 1;
            }
            k += 1;
        }
        // Sleep until the next send time (a timerfd: epoll_wait's timeout is in whole ms)
        // or an answer, whichever comes first.
        // Closed loop: only answers wake it (the window's edges are checked every 10 ms).
        if !closed {
            timer.arm(start + interval.mul_f64(k as f64) - base + origin)?;
        }
        let n = ep.wait(&mut evs, if closed { 10 } else { 1000 })?;
        let window = at_w0.is_some().then_some(&mut lat);
        acked += receive(&mut cs, &evs[..n], &timer, window)?;
    }
    let (l0, f0, _) = at_w0.expect("the window started");
    print_totals((l0, f0), pids, acked, skipped, lat, duration)
}

/// Opens `conns` connections to `target`, non-blocking, each watched by `ep` under its
/// index.
fn open_conns(target: &str, conns: usize, ep: &Epoll) -> io::Result<Vec<Conn>> {
    let mut cs = Vec::with_capacity(conns);
    for i in 0..conns {
        let s = connect(target)?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        ep.add(s.as_raw_fd(), i as u64)?;
        cs.push((s, Vec::new(), None::<Instant>));
    }
    Ok(cs)
}

/// Reads the answers the events `evs` announce; inside the window (`window`: where the
/// latencies go) returns how many came and records their latencies, else 0.
fn receive(
    cs: &mut [Conn],
    evs: &[libc::epoll_event],
    timer: &Timer,
    mut window: Option<&mut Vec<u64>>,
) -> io::Result<u64> {
    let mut acked = 0;
    for ev in evs {
        let c = ev.u64 as usize;
        if ev.u64 == TIMER {
            timer.clear();
            continue;
        }
        let (s, buf, sent) = &mut cs[c];
        if !drain(s, buf)? {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the leader closed a connection"));
        }
        while buf.len() >= 8 {
            buf.drain(..8);
            let t = sent.take().expect("an answer with no request in flight");
            if let Some(lat) = window.as_deref_mut() {
                acked += 1;
                lat.push(t.elapsed().as_micros() as u64);
            }
        }
    }
    Ok(acked)
}

/// Prints the window's totals: the line benches/pair_floor.sh sums over pairs, then the
/// one for people. `at_w0`: the servers' costs at the window's start.
fn print_totals(
    at_w0: Costs,
    pids: [u32; 2],
    acked: u64,
    skipped: u64,
    mut lat: Vec<u64>,
    duration: f64,
) -> io::Result<()> {
    let ((l0, lc0), (f0, fc0)) = at_w0;
    let ((l1, lc1), (f1, fc1)) = (proc_cost(pids[0])?, proc_cost(pids[1])?);
    let per = |t0: f64, t1: f64| (t1 - t0) * 1e6 / acked.max(1) as f64;
    lat.sort_unstable();
    let p = |q: f64| lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1))).copied().unwrap_or(0);
    println!(
        "totals acked {acked} leader_cpu_us {:.0} follower_cpu_us {:.0} leader_switches {} follower_switches {} p50_us {}",
        (l1 - l0) * 1e6,
        (f1 - f0) * 1e6,
        lc1 - lc0,
        fc1 - fc0,
        p(0.5)
    );
    println!(
        "acked {acked} in {duration} s ({:.0}/s), skipped {skipped}; CPU µs/append leader {:.1} follower {:.1} \
         server {:.1}; context switches/append leader {:.2} follower {:.2}; latency p50 {} µs p99 {} µs",
        acked as f64 / duration,
        per(l0, l1),
        per(f0, f1),
        per(l0 + f0, l1 + f1),
        (lc1 - lc0) as f64 / acked.max(1) as f64,
        (fc1 - fc0) as f64 / acked.max(1) as f64,
        p(0.5),
        p(0.99)
    );
    Ok(())
}
