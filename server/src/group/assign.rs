//! Who owns which bucket in a new generation: balanced (counts differ by at most one)
//! and sticky (a bucket keeps its owner while that keeps the balance), computed only by
//! the node that opens the generation; the `Gen` event records the result, so a fold
//! never recomputes it.

use std::collections::BTreeMap;

use super::Bucket;

/// `buckets` ascending; `members` sorted and distinct; `prev`: the last generation's
/// owners. Returns every member with its buckets (ascending), in `members`' order.
pub fn assign(buckets: &[Bucket], members: &[String], prev: &BTreeMap<Bucket, String>) -> Vec<(String, Vec<Bucket>)> {
    assert!(members.windows(2).all(|w| w[0] < w[1]), "members sorted and distinct");
    assert!(buckets.windows(2).all(|w| w[0] < w[1]), "buckets ascending and distinct");
    if members.is_empty() {
        return Vec::new();
    }
    let base = buckets.len() / members.len();
    let mut extra = buckets.len() % members.len(); // how many may hold base + 1
    let mut owned: BTreeMap<&str, Vec<Bucket>> = members.iter().map(|m| (m.as_str(), Vec::new())).collect();
    let mut free = Vec::new();
    for &b in buckets {
        let keep = prev
            .get(&b)
            .and_then(|m| owned.get_mut(m.as_str()))
            .filter(|held| held.len() < base || (held.len() == base && extra > 0));
        match keep {
            Some(held) => {
                if held.len() == base {
                    extra -= 1;
                }
                held.push(b);
            }
            None => free.push(b),
        }
    }
    for b in free {
        // The member holding the fewest, the first in order on a tie.
        let (_, held) = owned.iter_mut().min_by_key(|(_, held)| held.len()).expect("members is not empty");
        held.push(b);
    }
    let out: Vec<(String, Vec<Bucket>)> = members
        .iter()
        .map(|m| {
            let mut held = owned.remove(m.as_str()).expect("every member has an entry");
            held.sort_unstable();
            (m.clone(), held)
        })
        .collect();
    let (lo, hi) = out.iter().fold((usize::MAX, 0), |(lo, hi), (_, h)| (lo.min(h.len()), hi.max(h.len())));
    assert!(hi - lo <= 1, "assignment unbalanced: {lo}..{hi} buckets per member");
    assert_eq!(out.iter().map(|(_, h)| h.len()).sum::<usize>(), buckets.len(), "every bucket owned once");
    out
}
