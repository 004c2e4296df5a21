//! One stream's entry in memory: its next version, the offsets of its events in the last
//! segment, and the skip list over its runs in sealed segments (`levels`), plus the copy
//! of it a read takes ([`Located`]).
//!
//! The skip list is what keeps memory independent of the log's length: `levels[j]` is the
//! newest run whose number is a multiple of 2^j, so a read finds the run holding any
//! version in O(log runs) entry reads (`streamread.rs`).
//!
//! Also the entry's checkpoint form, written by [`Entry::encode_head`] and checked by
//! [`decode_entry`] (in place, for the base, or into an entry): name length (1), name,
//! next version (8), runs (4), pointer count with the [`NO_FIRST`] bit (1), then per
//! pointer segment (8), position (4), first version (8).

use corelog_client::record::MAX_STREAM_NAME;

use crate::le::Reader;
use crate::wal::segidx::RunRef;

/// Set in a checkpoint stream's `refs` count: the stream has no first run.
const NO_FIRST: u8 = 0x80;
const _: () = assert!(MAX_STREAM_NAME <= u8::MAX as usize, "a stream name's length is one byte");

#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// The version its next event gets.
    pub(super) next: u64,
    /// Offsets of its events at or above the last segment's first offset (`active_from`):
    /// versions `next - active.len()..next`.
    pub(super) active: Vec<u64>,
    /// Runs in sealed segments so far (the next one gets this number).
    pub(super) runs: u32,
    /// Its first run (number 0), once it has one.
    pub(super) first: Option<RunRef>,
    /// `levels[j]`: its newest run whose number is a multiple of 2^j; levels above the
    /// last are its first run.
    pub(super) levels: Vec<RunRef>,
}

impl Entry {
    pub(super) fn level(&self, j: usize) -> Option<RunRef> {
        self.levels.get(j).copied().or(self.first)
    }

    /// The skip pointers a new run gets: the newest earlier run at each level.
    pub(super) fn pointers(&self) -> Vec<RunRef> {
        if self.runs == 0 {
            return Vec::new();
        }
        let n = (32 - self.runs.leading_zeros()) as usize; // levels 0..=log2(runs)
        let ptrs: Vec<RunRef> = (0..n).filter_map(|j| self.level(j)).collect();
        debug_assert!(
            ptrs.windows(2).all(|w| w[0].first_version >= w[1].first_version),
            "skip pointers from the newest run down: {ptrs:?}"
        );
        ptrs
    }

    /// Takes a new sealed run as the newest (its number is `self.runs`).
    pub(super) fn push_run(&mut self, r: RunRef) {
        let n = self.runs;
        // Runs come in version order: every newer run starts above the newest held.
        assert!(
            self.levels.first().is_none_or(|l| l.first_version < r.first_version),
            "run {n} from version {} after a run from version {}",
            r.first_version,
            self.levels[0].first_version
        );
        if n == 0 {
            self.first = Some(r);
            self.levels = vec![r];
        } else {
            for j in 0..=n.trailing_zeros() as usize {
                match self.levels.get_mut(j) {
                    Some(l) => *l = r,
                    None => self.levels.push(r),
                }
            }
        }
        self.runs = n + 1;
    }

    /// Appends this stream's head as it stood at the last segment's start (its events
    /// there not yet counted) in the checkpoint form; false, writing nothing, when it had
    /// no event before it.
    pub(super) fn encode_head(&self, name: &str, out: &mut Vec<u8>) -> bool {
        assert!(self.active.len() as u64 <= self.next, "stream {name:?}: more events in memory than versions");
        let next = self.next - self.active.len() as u64;
        if next == 0 {
            return false;
        }
        assert!(
            !name.is_empty() && name.len() <= MAX_STREAM_NAME,
            "stream name of {} bytes in a checkpoint",
            name.len()
        );
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&next.to_le_bytes());
        out.extend_from_slice(&self.runs.to_le_bytes());
        let refs: Vec<RunRef> = self.first.into_iter().chain(self.levels.iter().copied()).collect();
        assert!(refs.len() < NO_FIRST as usize, "stream {name:?}: {} pointers do not fit the count byte", refs.len());
        // The high bit: no first run (retention deleted it before this node saw it).
        let no_first = if self.first.is_none() && self.runs > 0 { NO_FIRST } else { 0 };
        out.push(refs.len() as u8 | no_first);
        for r in refs {
            out.extend_from_slice(&r.seg.to_le_bytes());
            out.extend_from_slice(&r.pos.to_le_bytes());
            out.extend_from_slice(&r.first_version.to_le_bytes());
        }
        true
    }
}

/// What a read of one stream needs from memory (`streamread.rs`): copied out, so that the
/// reads of its runs on disk hold no borrow.
#[derive(Clone, Debug)]
pub struct Located {
    pub next: u64,
    /// Offsets of its events in the last segment, from version `next - active.len()`.
    pub active: Vec<u64>,
    pub first: Option<RunRef>,
    pub levels: Vec<RunRef>,
    pub runs: u32,
}

impl Located {
    /// Version of the first event in the last segment.
    pub fn active_from(&self) -> u64 {
        debug_assert!(self.active.len() as u64 <= self.next, "more events in memory than versions");
        self.next - self.active.len() as u64
    }

    /// The pointer at level `j` from the top (memory's view): the newest run whose number
    /// is a multiple of 2^j.
    pub fn level(&self, j: usize) -> Option<RunRef> {
        self.levels.get(j).copied().or(self.first)
    }

    /// Levels worth walking: up to log2 of its runs.
    pub fn height(&self) -> usize {
        (32 - self.runs.leading_zeros()) as usize
    }
}

/// The next version of a checked entry in the checkpoint form.
pub(super) fn head_next(b: &[u8]) -> u64 {
    let at = 1 + b[0] as usize;
    u64::from_le_bytes(b[at..at + 8].try_into().expect("checked at decode"))
}

/// One stream of a checkpoint (`Streams::heads_job`), checked: a name, a next version
/// above every pointer, no more pointers than its runs allow, none at or above
/// `active_from` (the checkpoint's offset). Without `keep` the pointers are only checked
/// (the entry's `first` and `levels` are left empty: nothing allocated).
pub(super) fn decode_entry<'a>(r: &mut Reader<'a>, active_from: u64, keep: bool) -> Result<(&'a str, Entry), String> {
    let len = r.u8()? as usize;
    let name = std::str::from_utf8(r.take(len)?).map_err(|_| "a stream name is not UTF-8")?;
    let (next, runs) = (r.u64()?, r.u32()?);
    let flags = r.u8()?;
    let (nrefs, no_first) = ((flags & !NO_FIRST) as usize, flags & NO_FIRST != 0);
    let mut e = Entry { next, runs, ..Entry::default() };
    if keep {
        e.levels.reserve_exact(nrefs);
    }
    let mut fits = true;
    for k in 0..nrefs {
        let p = RunRef { seg: r.u64()?, pos: r.u32()?, first_version: r.u64()? };
        fits &= p.first_version < next && p.seg < active_from;
        match (keep, k == 0 && !no_first) {
            (false, _) => {}
            (true, true) => e.first = Some(p),
            (true, false) => e.levels.push(p),
        }
    }
    // Pointers: the first run (unless retention took it) and one per level up to
    // log2(runs); a stream with runs has at least one, one without runs none.
    let levels_ok = match (runs, nrefs) {
        (0, 0) => true,
        (0, _) | (_, 0) => false,
        (n, k) => k - 1 <= (32 - n.leading_zeros()) as usize,
    };
    if name.is_empty() || next == 0 || !levels_ok || !fits {
        return Err(format!(
            "stream {name:?}: runs {runs}, {nrefs} pointer(s) do not fit a checkpoint at {active_from}"
        ));
    }
    Ok((name, e))
}
