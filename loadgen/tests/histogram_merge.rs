//! The cross-process merge is exact: values split over two processes' serialized (V2)
//! histograms and merged by the sweep's code give the same histogram, bucket for
//! bucket, as one histogram that recorded every value.

use corelog_loadgen::merge;
use corelog_loadgen::result::RunResult;
use corelog_loadgen::run::{new_hist, HIST_MAX_US};

/// A deterministic spread of latencies from 1 µs to the clamp (xorshift, log-uniform).
fn values(n: usize, mut seed: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let exp = (seed % 1000) as f64 / 1000.0 * (HIST_MAX_US as f64).log10();
            (10f64.powf(exp) as u64).clamp(1, HIST_MAX_US)
        })
        .collect()
}

const QUANTILES: [f64; 12] = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 0.99999, 1.0];

#[test]
fn merged_histograms_equal_one_histogram_of_all_values() {
    let all_values = values(200_000, 0x9E37_79B9_7F4A_7C15);
    let mut whole = new_hist();
    let mut a = new_hist();
    let mut b = new_hist();
    for (i, v) in all_values.iter().enumerate() {
        whole.record(*v).unwrap();
        // Uneven split, and b gets the extremes only from one side.
        if i % 3 == 0 || *v > 50_000_000 {
            a.record(*v).unwrap();
        } else {
            b.record(*v).unwrap();
        }
    }
    // Through the same path as the sweep: serialized to hex V2, parsed back, added.
    let merged = merge::merge_hex([merge::to_hex(&a).as_str(), merge::to_hex(&b).as_str()]).unwrap();
    assert_eq!(merged.len(), whole.len());
    assert_eq!(merged.len(), all_values.len() as u64);
    assert_eq!(merged.min(), whole.min());
    assert_eq!(merged.max(), whole.max());
    assert_eq!(merged.mean(), whole.mean());
    assert_eq!(merged.stdev(), whole.stdev());
    for q in QUANTILES {
        assert_eq!(merged.value_at_quantile(q), whole.value_at_quantile(q), "quantile {q}");
    }
    // Every bucket's count, not only the quantiles we happen to print.
    let got: Vec<(u64, u64)> = merged.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
    let want: Vec<(u64, u64)> = whole.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
    assert_eq!(got, want);
    // And the merged histogram serializes to the very same bytes.
    assert_eq!(merge::to_bytes(&merged), merge::to_bytes(&whole));
}

#[test]
fn merge_of_run_results_via_json() {
    // Two children's JSON results, as the sweep reads them from disk.
    let mut parts = Vec::new();
    let mut whole = new_hist();
    for (k, seed) in [(0, 1u64), (1, 2u64), (2, 3u64)] {
        let mut h = new_hist();
        for v in values(10_000 + k * 1234, seed) {
            h.record(v).unwrap();
            whole.record(v).unwrap();
        }
        let out = corelog_loadgen::run::Outcome { hist: Some(h), acked: 1, ..Default::default() };
        let json = RunResult::of(100, None, &out, 0.0).to_json();
        parts.push(RunResult::from_json(&json).unwrap());
    }
    let merged = merge::merge_hex(parts.iter().map(|r| r.histogram_v2_hex.as_str())).unwrap();
    assert_eq!(merge::to_bytes(&merged), merge::to_bytes(&whole));
    for q in QUANTILES {
        assert_eq!(merged.value_at_quantile(q), whole.value_at_quantile(q), "quantile {q}");
    }
}

#[test]
fn rejects_garbage() {
    assert!(merge::from_hex("zz").is_err());
    assert!(merge::from_hex("abc").is_err());
    assert!(merge::merge_hex(["00112233"]).is_err());
}
