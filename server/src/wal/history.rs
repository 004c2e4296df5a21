//! A log's epoch history, as the log keeps it and the replication handshake reads it
//! (`replica::handshake`).

/// A log's epoch history: `(epoch, first offset written under it)` ascending, and the
/// log's end (next offset).
#[derive(Clone, Copy, Debug)]
pub struct History<'a> {
    pub epochs: &'a [(u32, u64)],
    pub end: u64,
}

impl History<'_> {
    /// First offset written under an epoch greater than `epoch`, or the log end.
    pub fn end_of_epoch(&self, epoch: u32) -> u64 {
        self.epochs.iter().find(|(e, _)| *e > epoch).map(|(_, o)| *o).unwrap_or(self.end)
    }

    /// The largest epoch in this history not above `epoch` (0 if none).
    pub fn epoch_at_or_below(&self, epoch: u32) -> u32 {
        self.epochs.iter().rev().find(|(e, _)| *e <= epoch).map(|(e, _)| *e).unwrap_or(0)
    }

    /// Epoch of the last record (0 when empty).
    pub fn last_epoch(&self) -> u32 {
        self.epochs.last().map(|e| e.0).unwrap_or(0)
    }
}
