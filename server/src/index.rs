//! What a shard derives from its records besides the log itself: the idempotent
//! producers' table and the stream index. Both are fed every record in offset order
//! (boot scan, replicated batches, the leader's appends) and rolled back together.

use corelog_client::record::{self, Ext};

use crate::producers::Producers;
use crate::streams::Streams;

pub struct LogIndex {
    pub producers: Producers,
    pub streams: Streams,
}

impl LogIndex {
    pub fn new(max_producers: usize) -> LogIndex {
        LogIndex { producers: Producers::new(max_producers), streams: Streams::default() }
    }

    /// Feeds one record's extensions.
    pub fn note(&mut self, offset: u64, ext: Ext<'_>) {
        if let Some(p) = ext.producer {
            self.producers.note(p, offset);
        }
        if let Some(s) = ext.stream {
            self.streams.note(s.name, s.version, offset);
        }
    }

    /// Feeds every record of a verified run (a batch from the boot scan or the leader).
    pub fn note_run(&mut self, records: &[u8]) {
        let mut at = 0;
        while at < records.len() {
            let (offset, ext, n) = record::peek(&records[at..]).expect("records were verified");
            self.note(offset, ext);
            at += n;
        }
    }

    /// Offsets from `from` on were handed out again.
    pub fn forget_from(&mut self, from: u64) {
        self.producers.forget_from(from);
        self.streams.forget_from(from);
    }
}
