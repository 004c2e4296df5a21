//! `pair_floor`'s leader and follower again, on corelog's runtime: one glommio executor per
//! process, glommio's sockets, the write through a glommio `DmaFile` opened
//! `O_DIRECT | O_DSYNC` (as corelog's segments) — and still no TLS, no framing checks, no
//! metrics, none of corelog's code. Same wire protocol as `pair_floor` (its `client`
//! drives it; `benches/pair_floor.sh` with MODES=glommio). What it separates: of
//! corelog's CPU per append over the bare pair's, how much the runtime costs by itself.
//!
//! - `follower`: one task — read a shipment, write it, send the 4-byte acknowledgement.
//! - `leader`: a task per client connection (read a request, stage it, wait for its
//!   answer, write it); a writer task (the requests staged since the last write form the
//!   next batch: ship it, write it); a task reading the follower's acknowledgements. A
//!   batch is answered once its own write returned and its acknowledgement came.
//!
//! Bounded as `pair_floor`: one request in flight per connection, a batch holds at most one
//! 4 KiB block, the file is a fixed ring of blocks.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::io::{DmaFile, OpenOptions};
use glommio::net::{TcpListener, TcpStream};
use glommio::LocalExecutorBuilder;

use corelog_benches::pair_wire::{shipment, zeroed_file, BLOCK, FILE_BLOCKS, REQ};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| -> String {
        let i = args.iter().position(|a| a == name).unwrap_or_else(|| die(&format!("missing {name}")));
        args.get(i + 1).cloned().unwrap_or_else(|| die(&format!("{name} needs a value")))
    };
    let role = args.get(1).cloned().unwrap_or_default();
    let (listen, file) = (get("--listen"), get("--file"));
    let follower_addr = if role == "leader" { get("--follower") } else { String::new() };
    let r = LocalExecutorBuilder::default()
        .io_memory(512 * 1024) // memlock is 8 MiB per user here (corelog's default too)
        .spawn(move || async move {
            match role.as_str() {
                "follower" => follower(&listen, &file).await,
                "leader" => leader(&listen, &follower_addr, &file).await,
                _ => die("usage: pair_floor_glommio follower|leader --listen A [--follower A] --file F"),
            }
        })
        .map_err(|e| io::Error::other(e.to_string()))
        .and_then(|h| h.join().map_err(|e| io::Error::other(format!("{e:?}"))))
        .and_then(|r| r);
    if let Err(e) = r {
        die(&e.to_string());
    }
}

fn die(msg: &str) -> ! {
    eprintln!("pair_floor_glommio: {msg}");
    std::process::exit(2)
}

/// The data file: zeroed and synced first (every timed write is an overwrite, as
/// corelog's zeroed-ahead segments are), then opened by glommio O_DIRECT | O_DSYNC.
struct Disk {
    file: DmaFile,
    next: u64,
}
impl Disk {
    async fn open(path: &str) -> io::Result<Disk> {
        zeroed_file(path)?;
        let file = OpenOptions::new().write(true).custom_flags(libc::O_DSYNC).dma_open(path).await?;
        Ok(Disk { file, next: 0 })
    }
    /// Writes `data` (≤ 4 KiB) as one block; returns once it is durable.
    async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        assert!(data.len() <= BLOCK);
        let mut b = self.file.alloc_dma_buffer(BLOCK);
        b.as_bytes_mut()[..data.len()].copy_from_slice(data);
        let at = (self.next % FILE_BLOCKS) * BLOCK as u64;
        let n = self.file.write_at(b, at).await?;
        assert_eq!(n, BLOCK, "short O_DIRECT write");
        self.next += 1;
        Ok(())
    }
}

/// glommio's `bind` sets SO_REUSEPORT but not SO_REUSEADDR (the previous run's
/// TIME_WAIT would refuse the port); std's sets SO_REUSEADDR.
fn bind(addr: &str) -> io::Result<TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    // SAFETY: a bound, listening socket whose ownership moves to glommio.
    Ok(unsafe { TcpListener::from_raw_fd(l.into_raw_fd()) })
}

async fn follower(listen: &str, file: &str) -> io::Result<()> {
    let mut disk = Disk::open(file).await?;
    let mut s = bind(listen)?.accept().await?;
    s.set_nodelay(true)?;
    // One read takes whatever shipments have arrived (as pair_floor's follower): a read
    // per shipment, not one for its count and another for its requests.
    let (mut buf, mut have) = (vec![0u8; 8 * (4 + BLOCK)], 0usize);
    loop {
        let n = s.read(&mut buf[have..]).await?;
        if n == 0 {
            return Ok(()); // the leader went away: the run is over
        }
        have += n;
        let mut at = 0;
        while let Some((reqs, len)) = shipment(&buf[at..have]) {
            disk.write(reqs).await?;
            s.write_all(&((reqs.len() / REQ) as u32).to_le_bytes()).await?; // the acknowledgement: its count
            at += len;
        }
        buf.copy_within(at..have, 0);
        have -= at;
    }
}

/// Wakes one waiting task; a notify with no waiter is kept for the next wait.
#[derive(Default)]
struct Notify {
    set: Cell<bool>,
    waiter: RefCell<Option<Waker>>,
}
impl Notify {
    fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waiter.borrow_mut().take() {
            w.wake();
        }
    }
    async fn wait(&self) {
        poll_fn(|cx| {
            if self.set.replace(false) {
                return Poll::Ready(());
            }
            *self.waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// One client connection's request in flight.
#[derive(Default)]
struct Slot {
    answer: Cell<Option<[u8; 8]>>,
    ready: Notify,
}

/// A shipped batch: each request's slot and the answer it gets (its first 8 bytes).
type Batch = Vec<(Rc<Slot>, [u8; 8])>;

#[derive(Default)]
struct Leader {
    staged: RefCell<Vec<(Rc<Slot>, [u8; REQ])>>,
    staged_ready: Notify,
    /// Batches shipped, oldest first; `written` and `acked` count batches since the start,
    /// `answered` how many left the front.
    in_flight: RefCell<VecDeque<Batch>>,
    answered: Cell<u64>,
    written: Cell<u64>,
    acked: Cell<u64>,
}
impl Leader {
    /// Answers every batch that is durable on both nodes.
    fn answer_durable(&self) {
        let both = self.written.get().min(self.acked.get());
        let mut q = self.in_flight.borrow_mut();
        while self.answered.get() < both {
            for (slot, id) in q.pop_front().expect("a durable batch is in flight") {
                slot.answer.set(Some(id));
                slot.ready.notify();
            }
            self.answered.set(self.answered.get() + 1);
        }
    }
}

async fn leader(listen: &str, follower_addr: &str, file: &str) -> io::Result<()> {
    let disk = Disk::open(file).await?;
    // The follower may not listen yet: retry refusals for up to 10 s (as pair_floor).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let f = loop {
        match TcpStream::connect(follower_addr).await {
            Err(glommio::GlommioError::IoError(e))
                if e.kind() == io::ErrorKind::ConnectionRefused && std::time::Instant::now() < until =>
            {
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await
            }
            r => break r?,
        }
    };
    f.set_nodelay(true)?;
    let f = Rc::new(RefCell::new(f));
    let l = bind(listen)?;
    let st = Rc::new(Leader::default());
    glommio::spawn_local(writer(st.clone(), f.clone(), disk)).detach();
    glommio::spawn_local(acks(st.clone(), f)).detach();
    loop {
        let c = l.accept().await?;
        c.set_nodelay(true)?;
        glommio::spawn_local(client(st.clone(), c)).detach();
    }
}

async fn client(st: Rc<Leader>, mut c: TcpStream) {
    let slot = Rc::new(Slot::default());
    let mut req = [0u8; REQ];
    // A client that goes away only ends its task.
    while c.read_exact(&mut req).await.is_ok() {
        st.staged.borrow_mut().push((slot.clone(), req));
        st.staged_ready.notify();
        slot.ready.wait().await;
        let id = slot.answer.take().expect("woken with an answer");
        if c.write_all(&id).await.is_err() {
            return;
        }
    }
}

/// The follower's stream is read by `acks` and written by `writer`: each borrows it
/// only inside one poll (glommio keeps separate read and write sources per stream).
type Shared = Rc<RefCell<TcpStream>>;

async fn writer(st: Rc<Leader>, f: Shared, mut disk: Disk) {
    let mut ship = Vec::with_capacity(4 + BLOCK);
    loop {
        while st.staged.borrow().is_empty() {
            st.staged_ready.wait().await;
        }
        // The next batch: what arrived since the last write, at most one block.
        let batch: Vec<_> = {
            let mut s = st.staged.borrow_mut();
            let take = s.len().min(BLOCK / REQ);
            s.drain(..take).collect()
        };
        ship.clear();
        ship.extend_from_slice(&(batch.len() as u32).to_le_bytes());
        for (_, r) in &batch {
            ship.extend_from_slice(r);
        }
        st.in_flight.borrow_mut().push_back(batch.into_iter().map(|(s, r)| (s, r[..8].try_into().unwrap())).collect());
        let mut at = 0;
        while at < ship.len() {
            match poll_fn(|cx| Pin::new(&mut *f.borrow_mut()).poll_write(cx, &ship[at..])).await {
                Ok(n) if n > 0 => at += n,
                r => die(&format!("shipping to the follower: {r:?}")),
            }
        }
        if let Err(e) = disk.write(&ship[4..]).await {
            die(&format!("write: {e}"));
        }
        st.written.set(st.written.get() + 1);
        st.answer_durable();
    }
}

async fn acks(st: Rc<Leader>, f: Shared) {
    let (mut buf, mut have) = ([0u8; 256], 0usize);
    loop {
        let n = match poll_fn(|cx| Pin::new(&mut *f.borrow_mut()).poll_read(cx, &mut buf[have..])).await {
            Ok(0) | Err(_) => std::process::exit(0), // the follower went away: the run is over
            Ok(n) => n,
        };
        have += n;
        let whole = have / 4 * 4;
        for a in buf[..whole].chunks_exact(4) {
            let count = u32::from_le_bytes(a.try_into().unwrap()) as usize;
            let front = st.in_flight.borrow().get((st.acked.get() - st.answered.get()) as usize).map(Vec::len);
            assert_eq!(front, Some(count), "acknowledgements out of order");
            st.acked.set(st.acked.get() + 1);
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
        st.answer_durable();
    }
}
