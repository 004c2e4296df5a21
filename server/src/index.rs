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

    /// An index that counts stream versions without keeping where events are (a tool
    /// that needs only versions: the trim's index snapshot, `inspect`).
    pub fn versions_only(max_producers: usize) -> LogIndex {
        LogIndex { producers: Producers::new(max_producers), streams: Streams::versions_only() }
    }

    /// Feeds one record's extensions. A stream version out of line is an error (see
    /// `Streams::note`) and feeds nothing of the record.
    pub fn note(&mut self, offset: u64, ext: Ext<'_>) -> Result<(), String> {
        if let Some(s) = ext.stream {
            self.streams.note(s.name, s.version, offset)?;
        }
        if let Some(p) = ext.producer {
            self.producers.note(p, offset);
        }
        Ok(())
    }

    /// Feeds every record of a verified run (a batch from the boot scan, or one checked
    /// with `check_run`), up to the first error.
    pub fn note_run(&mut self, records: &[u8]) -> Result<(), String> {
        let mut at = 0;
        while at < records.len() {
            let (offset, ext, n) = record::peek(&records[at..]).expect("records were verified");
            self.note(offset, ext)?;
            at += n;
        }
        Ok(())
    }

    /// Whether feeding `records` (verified) would keep every stream's versions in line:
    /// each event's version the next of its stream. Without changing anything, so that a
    /// follower can refuse a whole batch (`note_run` would stop half-way).
    pub fn check_run(&self, records: &[u8]) -> Result<(), String> {
        let mut next: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        let mut at = 0;
        while at < records.len() {
            let (offset, ext, n) = record::peek(&records[at..]).map_err(|e| e.to_string())?;
            if let Some(s) = ext.stream {
                let want = next.entry(s.name).or_insert_with(|| self.streams.current(s.name).map_or(0, |v| v + 1));
                if s.version != *want {
                    return Err(crate::streams::out_of_line(offset, s.version, s.name, *want));
                }
                *want += 1;
            }
            at += n;
        }
        Ok(())
    }

    /// Offsets from `from` on were handed out again.
    pub fn forget_from(&mut self, from: u64) {
        self.producers.forget_from(from);
        self.streams.forget_from(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_client::record::{encode_ex, StreamPos};

    fn run(first: u64, events: &[(&str, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, (name, version)) in events.iter().enumerate() {
            let ext = Ext { producer: None, stream: Some(StreamPos { name, version: *version }) };
            encode_ex(first + i as u64, 1, ext, b"x", &mut out);
        }
        out
    }

    #[test]
    fn check_run_accepts_next_versions_and_refuses_others() {
        let mut t = LogIndex::new(10);
        let a = run(0, &[("a", 0), ("b", 0), ("a", 1)]);
        assert_eq!(t.check_run(&a), Ok(()));
        t.note_run(&a).unwrap();
        assert_eq!(t.check_run(&run(3, &[("a", 2), ("a", 3), ("c", 0)])), Ok(()));
        let e = t.check_run(&run(3, &[("a", 2), ("a", 2)])).unwrap_err();
        assert!(e.contains("record 4 is version 2 of stream \"a\", whose next version here is 3"), "{e}");
        assert!(t.check_run(&run(3, &[("b", 5)])).is_err());
        assert!(t.check_run(&run(3, &[("d", 1)])).is_err(), "a new stream starts at 0");
        // Nothing was noted by the checks.
        assert_eq!(t.streams.current("a"), Some(1));
    }
}
