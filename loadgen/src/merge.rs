//! Exact merging of latency histograms across processes.
//!
//! Every histogram in the load generator has the same bounds ([`crate::run::new_hist`]:
//! 1 µs .. 120 s, 3 significant digits), so a serialized (V2) histogram decodes into
//! identical buckets and `add` sums counts bucket by bucket: the merged histogram is the
//! one a single process would have recorded from all the values, not an average of
//! percentiles.

use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;

use crate::run::new_hist;

pub fn to_bytes(h: &Histogram<u64>) -> Vec<u8> {
    let mut buf = Vec::new();
    V2Serializer::new().serialize(h, &mut buf).expect("serialize to Vec");
    buf
}

pub fn to_hex(h: &Histogram<u64>) -> String {
    to_bytes(h).iter().map(|b| format!("{b:02x}")).collect()
}

pub fn from_bytes(b: &[u8]) -> Result<Histogram<u64>, String> {
    Deserializer::new().deserialize(&mut &b[..]).map_err(|e| format!("bad V2 histogram: {e:?}"))
}

pub fn from_hex(s: &str) -> Result<Histogram<u64>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd-length histogram hex".into());
    }
    let bytes: Result<Vec<u8>, _> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16)).collect();
    from_bytes(&bytes.map_err(|_| "bad hex digit in histogram".to_string())?)
}

/// Adds every serialized histogram (hex V2) into one with the load generator's bounds.
pub fn merge_hex<'a>(parts: impl IntoIterator<Item = &'a str>) -> Result<Histogram<u64>, String> {
    let mut all = new_hist();
    for p in parts {
        let h = from_hex(p)?;
        all.add(&h).map_err(|e| format!("histogram bounds differ: {e:?}"))?;
    }
    Ok(all)
}
