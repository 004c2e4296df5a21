//! A checkpoint's stream heads in pages: entries sorted by name, packed into pages of
//! about 4 KiB with a CRC-32 each, and a directory (each page's length, entry count and
//! first name) that the checkpoint's checksummed metadata carries (format.md §10).
//!
//! A start reads the directory only — a page per ≈ 4 KiB of heads, ≈ 40 bytes each — and
//! finds a stream by a binary search of the first names and one page read: nothing at
//! start is done per stream. Each page read is checked (its CRC, then every entry
//! scanned as `decode_entry` checks it, names in order), so a damaged page is never
//! served; a start also has every page checked once in the background (`verify`).

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::entry::{decode_entry, Entry};
use crate::le::{checked_body, Reader};

/// Bytes of entries after which a page is closed (its CRC makes it 4 KiB). An entry is
/// never split: a page holds at least one, and an entry is at most ≈ 930 bytes.
const PAGE: usize = 4096 - 4;

/// The smallest entry (`entry.rs`: a one-byte name, no pointer) and the smallest page.
const MIN_ENTRY: u32 = 15;
const MIN_PAGE: u32 = MIN_ENTRY + 4;

pub(super) struct PageRef {
    /// From the first page's first byte.
    at: u64,
    /// Entries and CRC.
    len: u32,
    /// Number of its first entry (entries are numbered in name order from 0).
    first_id: u64,
    first: Box<[u8]>,
}

/// Where each page lies and what it starts with.
#[derive(Default)]
pub struct Dir {
    /// Entries in all pages.
    n: u64,
    pages: Vec<PageRef>,
}

impl Dir {
    pub(super) fn len(&self) -> u64 {
        self.n
    }

    #[cfg(test)]
    pub(super) fn pages(&self) -> usize {
        self.pages.len()
    }

    #[cfg(test)]
    pub(super) fn set_first_name(&mut self, k: usize, name: &[u8]) {
        self.pages[k].first = name.into();
    }

    #[cfg(test)]
    pub(super) fn swap_first_names(&mut self, a: usize, b: usize) {
        let t = std::mem::take(&mut self.pages[a].first);
        self.pages[a].first = std::mem::replace(&mut self.pages[b].first, t);
    }

    /// Bytes of all pages.
    pub(super) fn pages_len(&self) -> u64 {
        self.pages.last().map_or(0, |p| p.at + u64::from(p.len))
    }

    fn count(&self, k: usize) -> u64 {
        self.pages.get(k + 1).map_or(self.n, |p| p.first_id) - self.pages[k].first_id
    }

    /// The page that holds `name` if any does.
    fn page_of_name(&self, name: &[u8]) -> Option<usize> {
        self.pages.partition_point(|p| *p.first <= *name).checked_sub(1)
    }

    /// Count, pages, then per page its length, entry count and first name.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&(self.pages.len() as u32).to_le_bytes());
        for k in 0..self.pages.len() {
            let p = &self.pages[k];
            out.extend_from_slice(&p.len.to_le_bytes());
            out.extend_from_slice(&(self.count(k) as u32).to_le_bytes());
            out.push(p.first.len() as u8);
            out.extend_from_slice(&p.first);
        }
    }

    /// What `encode` wrote, for pages that take `pages_len` bytes: lengths that add up to
    /// them, counts to the entries, first names in strictly increasing order.
    pub fn decode(r: &mut Reader<'_>, pages_len: u64) -> Result<Dir, String> {
        let (n, k) = (r.u64()?, r.u32()? as usize);
        if k > r.rest() / 10 {
            return Err(format!("{k} pages of stream heads in {} bytes", r.rest()));
        }
        let mut d = Dir { n, pages: Vec::with_capacity(k) };
        let (mut at, mut id) = (0u64, 0u64);
        for _ in 0..k {
            let (len, count) = (r.u32()?, r.u32()?);
            let first: Box<[u8]> = r.take(r.0.first().copied().ok_or("truncated")? as usize + 1)?[1..].into();
            if len < MIN_PAGE
                || count == 0
                || u64::from(count) * u64::from(MIN_ENTRY) > u64::from(len)
                || first.is_empty()
            {
                return Err(format!("page {} of stream heads: {count} entries in {len} bytes", d.pages.len()));
            }
            if d.pages.last().is_some_and(|p| p.first >= first) {
                return Err(format!("page {} of stream heads: names out of order", d.pages.len()));
            }
            d.pages.push(PageRef { at, len, first_id: id, first });
            at += u64::from(len);
            id += u64::from(count);
        }
        if at != pages_len || id != n {
            return Err(format!(
                "stream heads: pages of {at} bytes and {id} entries, the file has {pages_len} bytes and says {n}"
            ));
        }
        Ok(d)
    }
}

/// Packs entries given in name order into pages.
#[derive(Default)]
pub(super) struct Pager {
    bytes: Vec<u8>,
    dir: Dir,
    open: usize,
    last: Vec<u8>,
}

impl Pager {
    /// Adds an entry in the checkpoint form (`Entry::encode_head`); its name must sort
    /// after the last one's.
    pub(super) fn push(&mut self, entry: &[u8]) {
        let name = &entry[1..1 + entry[0] as usize];
        assert!(self.dir.n == 0 || *name > *self.last, "stream heads: {:?} after {:?}", name, self.last);
        if self.bytes.len() > self.open && self.bytes.len() - self.open + entry.len() > PAGE {
            self.close();
        }
        if self.bytes.len() == self.open {
            self.dir.pages.push(PageRef { at: self.open as u64, len: 0, first_id: self.dir.n, first: name.into() });
        }
        self.bytes.extend_from_slice(entry);
        self.dir.n += 1;
        self.last.clear();
        self.last.extend_from_slice(name);
    }

    /// Entries pushed so far: the number the next one gets.
    pub(super) fn pushed(&self) -> u64 {
        self.dir.n
    }

    fn close(&mut self) {
        let crc = crc32fast::hash(&self.bytes[self.open..]);
        self.bytes.extend_from_slice(&crc.to_le_bytes());
        let p = self.dir.pages.last_mut().expect("a page is open");
        p.len = u32::try_from(self.bytes.len() - self.open).expect("a page is 4 KiB");
        self.open = self.bytes.len();
    }

    /// The directory and the pages' bytes.
    pub(super) fn finish(mut self) -> (Dir, Vec<u8>) {
        if self.bytes.len() > self.open {
            self.close();
        }
        debug_assert_eq!(self.dir.pages_len(), self.bytes.len() as u64, "stream heads: the directory misses bytes");
        (self.dir, self.bytes)
    }
}

/// Where the pages are: a checkpoint's file (the one a start found, or a roll wrote), or
/// its bytes in memory (tests; a roll whose file could not be opened again).
#[derive(Clone)]
pub enum Src {
    Mem { bytes: Arc<Vec<u8>>, at: usize },
    File { file: Arc<File>, at: u64, path: Arc<PathBuf> },
}

/// A checkpoint's stream heads: where they are, their directory, and the offset the
/// checkpoint stands at (every pointer lies below it). Shared with the threads that
/// write the next checkpoint and check this one.
#[derive(Clone)]
pub(super) struct Pages {
    src: Src,
    dir: Arc<Dir>,
    active_from: u64,
}

impl Pages {
    pub(super) fn new(src: Src, dir: Dir, active_from: u64) -> Pages {
        Pages { src, dir: Arc::new(dir), active_from }
    }

    pub(super) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The bytes of pages `k..e` (entries and CRCs).
    fn read(&self, k: usize, e: usize) -> Result<Cow<'_, [u8]>, String> {
        let (from, to) = (self.dir.pages[k].at, self.dir.pages[e - 1].at + u64::from(self.dir.pages[e - 1].len));
        match &self.src {
            Src::Mem { bytes, at } => {
                Ok(Cow::Borrowed(bytes.get(at + from as usize..at + to as usize).ok_or("past the end")?))
            }
            Src::File { file, at, .. } => {
                let mut b = vec![0u8; (to - from) as usize];
                file.read_exact_at(&mut b, at + from).map_err(|e| e.to_string())?;
                Ok(Cow::Owned(b))
            }
        }
    }

    /// Visits page `k`'s entries in order — number, name, entry bytes — until `f` says
    /// stop, each checked as it is passed; with `whole`, also that the page holds exactly
    /// the entries the directory says.
    fn scan(&self, k: usize, whole: bool, f: &mut dyn FnMut(u64, &str, &[u8]) -> bool) -> Result<(), String> {
        self.scan_bytes(k, &self.read(k, k + 1)?, whole, f)
    }

    /// `scan` of page `k`, whose bytes (entries and CRC) are `page`.
    fn scan_bytes(
        &self,
        k: usize,
        page: &[u8],
        whole: bool,
        f: &mut dyn FnMut(u64, &str, &[u8]) -> bool,
    ) -> Result<(), String> {
        let body = checked_body(page)?;
        let p = &self.dir.pages[k];
        let mut r = Reader(body);
        let (mut id, mut last): (u64, &str) = (p.first_id, "");
        let end = p.first_id + self.dir.count(k);
        while r.rest() > 0 {
            if id == end {
                return Err(format!("more entries than the directory's {}", self.dir.count(k)));
            }
            let before = r.0;
            let (name, _) = decode_entry(&mut r, self.active_from, false)?;
            let first = id == p.first_id;
            if (first && name.as_bytes() != &*p.first) || (!first && name <= last) {
                return Err(format!("stream {name:?} out of order"));
            }
            if !f(id, name, &before[..before.len() - r.rest()]) {
                return Ok(());
            }
            (id, last) = (id + 1, name);
        }
        if whole && id - p.first_id != self.dir.count(k) {
            return Err(format!("{} entries, the directory says {}", id - p.first_id, self.dir.count(k)));
        }
        // A lookup searches the one page whose first name is at or below the name: pages
        // must not overlap.
        if whole && self.dir.pages.get(k + 1).is_some_and(|n| last.as_bytes() >= &*n.first) {
            return Err(format!("stream {last:?} at or above the next page's first"));
        }
        Ok(())
    }

    /// `scan`, or the node stops: a damaged page is never served.
    pub(super) fn walk(&self, k: usize, f: &mut dyn FnMut(u64, &str, &[u8]) -> bool) {
        if let Err(e) = self.scan(k, true, f) {
            self.damaged(k, &e);
        }
    }

    pub(super) fn pages(&self) -> usize {
        self.dir.pages.len()
    }

    /// The entry of `name`: its number and the entry decoded.
    pub(super) fn find(&self, name: &str) -> Option<(u64, Entry)> {
        let k = self.dir.page_of_name(name.as_bytes())?;
        let mut found = None;
        self.walk(k, &mut |id, n, b| {
            if n == name {
                let e = decode_entry(&mut Reader(b), u64::MAX, true).expect("checked by the scan").1;
                found = Some((id, e));
            }
            n < name
        });
        found
    }

    /// Every page checked as a read checks it, and the page's entry count; read a MiB
    /// at a time.
    pub(super) fn verify(&self) -> Result<(), String> {
        let pages = &self.dir.pages;
        let mut k = 0;
        while k < pages.len() {
            let mut e = k + 1;
            while e < pages.len() && pages[e].at + u64::from(pages[e].len) - pages[k].at <= 1 << 20 {
                e += 1;
            }
            let run = self.read(k, e).map_err(|err| self.where_(k, &err))?;
            for j in k..e {
                let at = (pages[j].at - pages[k].at) as usize;
                let page = &run[at..at + pages[j].len as usize];
                self.scan_bytes(j, page, true, &mut |_, _, _| true).map_err(|err| self.where_(j, &err))?;
            }
            k = e;
        }
        Ok(())
    }

    fn where_(&self, k: usize, e: &str) -> String {
        let what = match &self.src {
            Src::Mem { .. } => "a checkpoint in memory".to_string(),
            Src::File { path, .. } => path.display().to_string(),
        };
        format!("{what}: page {k} of its stream heads is damaged ({e})")
    }

    /// A page that does not check out: the checkpoint file is moved aside (the next start
    /// rebuilds the stream index from the segments' index files) and the node stops.
    pub(super) fn damaged(&self, k: usize, e: &str) -> ! {
        self.stop(&self.where_(k, e))
    }

    /// Stops the node for a damaged page (`msg` from `verify`), moving the file aside.
    pub(super) fn stop(&self, msg: &str) -> ! {
        match &self.src {
            Src::Mem { .. } => panic!("{msg}"),
            Src::File { path, .. } => {
                let aside = path.with_extension("ckpt.damaged");
                let moved = match std::fs::rename(&**path, &aside) {
                    Ok(()) => format!("moved to {}", aside.display()),
                    Err(e) => format!("not moved aside: {e}"),
                };
                crate::fatal(&format!(
                    "{msg}; {moved}; the next start rebuilds the stream index from the segment index files"
                ))
            }
        }
    }

    /// Memory held: the directory, and the bytes of a checkpoint in memory.
    pub(super) fn bytes_held(&self) -> usize {
        let dir = self.dir.pages.iter().map(|p| 40 + p.first.len()).sum::<usize>();
        dir + match &self.src {
            Src::Mem { bytes, .. } => bytes.capacity(),
            Src::File { .. } => 0,
        }
    }
}
