//! The stream heads a start found in the newest checkpoint (or a roll just wrote), read
//! where they lie (`pages.rs`): a stream's head is looked up in its page when asked, and
//! nothing is done per stream until then.
//!
//! The heads never change. A stream that the shard touches (an event, a sealed run) is
//! decoded once into the index's map, which shadows the entry here from then on
//! (`shadowed`); the next checkpoint merges the entries nobody shadowed, as they are, with
//! the map's, in name order (`heads.rs`).

use super::entry::Entry;
use super::pages::Pages;

#[derive(Default)]
pub(super) struct Base {
    pages: Option<Pages>,
    /// Bit `i`: entry `i` lives in the map now.
    shadowed: Vec<u64>,
    n_shadowed: usize,
}

impl Base {
    pub(super) fn new(pages: Pages) -> Base {
        let n = pages.dir().len() as usize;
        Base { pages: Some(pages), shadowed: vec![0; n.div_ceil(64)], n_shadowed: 0 }
    }

    fn n(&self) -> usize {
        self.pages.as_ref().map_or(0, |p| p.dir().len() as usize)
    }

    /// The entry of `name`, unless the map holds it: its number and the entry decoded.
    pub(super) fn find(&self, name: &str) -> Option<(usize, Entry)> {
        let (i, e) = self.pages.as_ref()?.find(name)?;
        let i = i as usize;
        (!self.is_shadowed(i)).then_some((i, e))
    }

    fn is_shadowed(&self, i: usize) -> bool {
        self.shadowed[i / 64] & (1 << (i % 64)) != 0
    }

    /// Entry `i` moved into the map.
    pub(super) fn shadow(&mut self, i: usize) {
        assert!(!self.is_shadowed(i), "stream head {i} shadowed twice");
        self.shadowed[i / 64] |= 1 << (i % 64);
        self.n_shadowed += 1;
    }

    /// Entries not in the map.
    pub(super) fn live(&self) -> usize {
        self.n() - self.n_shadowed
    }

    /// Visits the entries not in the map in name order: name and entry bytes (a page
    /// read at a time).
    pub(super) fn for_each_live(&self, f: &mut dyn FnMut(&str, &[u8])) {
        if let Some(p) = &self.pages {
            for_each_unshadowed(p, &self.shadowed, f);
        }
    }

    /// What a thread needs to visit the same entries while the index goes on.
    pub(super) fn view(&self) -> Option<(Pages, Vec<u64>)> {
        self.pages.clone().map(|p| (p, self.shadowed.clone()))
    }

    /// Those entries decoded (for a comparison of whole indexes, `inspect`).
    pub(super) fn live_entries(&self) -> Vec<(Box<str>, Entry)> {
        let mut v = Vec::with_capacity(self.live());
        self.for_each_live(&mut |n, b| {
            let e = super::entry::decode_entry(&mut crate::le::Reader(b), u64::MAX, true).expect("checked by the scan");
            v.push((n.into(), e.1));
        });
        v
    }

    /// Every page checked (`pages.rs`); what the background check of a start runs.
    pub(super) fn pages(&self) -> Option<&Pages> {
        self.pages.as_ref()
    }

    /// Memory held.
    pub(super) fn bytes_held(&self) -> usize {
        self.pages.as_ref().map_or(0, Pages::bytes_held) + 8 * self.shadowed.capacity()
    }
}

/// The entries of `pages` whose bit in `shadowed` is clear, in name order.
pub(super) fn for_each_unshadowed(pages: &Pages, shadowed: &[u64], f: &mut dyn FnMut(&str, &[u8])) {
    for k in 0..pages.pages() {
        pages.walk(k, &mut |id, name, b| {
            let i = id as usize;
            if shadowed[i / 64] & (1 << (i % 64)) == 0 {
                f(name, b);
            }
            true
        });
    }
}
