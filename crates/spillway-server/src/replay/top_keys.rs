//! The keys a per-key rule refused most, in bounded memory: the Space-Saving algorithm
//! (Metwally, Agrawal and El Abbadi, 2005) with a fixed number of counters.

use serde::Serialize;
use std::collections::HashMap;

/// Counters kept per rule: a key refused more than `1 / COUNTERS` of the rule's refusals is
/// always among them.
pub(crate) const COUNTERS: usize = 256;

/// A key's refusals as counted.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KeyCount {
    /// The key (or its fingerprint, with `--hash-keys`).
    pub key: String,
    /// Refusals counted for it: at least its true count, at most `error` more.
    pub refused: u64,
    /// How many of `refused` may belong to keys it replaced (0: exact).
    pub error: u64,
}

#[derive(Debug, Default)]
pub(crate) struct TopKeys {
    counts: HashMap<String, (u64, u64)>,
}

impl TopKeys {
    /// Counts a refusal of `key`: a key not counted yet takes the place of the least counted
    /// one when all counters are taken, inheriting its count as its error.
    pub(crate) fn add(&mut self, key: &str) {
        if let Some((count, _)) = self.counts.get_mut(key) {
            *count += 1;
            return;
        }
        if self.counts.len() < COUNTERS {
            self.counts.insert(key.to_owned(), (1, 0));
            return;
        }
        let least = self
            .counts
            .iter()
            .min_by_key(|(_, (count, _))| *count)
            .map(|(key, (count, _))| (key.clone(), *count));
        if let Some((least, count)) = least {
            self.counts.remove(&least);
            self.counts.insert(key.to_owned(), (count + 1, count));
        }
    }

    /// The `n` keys counted most, most first (ties by key).
    pub(crate) fn top(&self, n: usize) -> Vec<KeyCount> {
        let mut all: Vec<KeyCount> = (self.counts.iter())
            .map(|(key, (refused, error))| KeyCount {
                key: key.clone(),
                refused: *refused,
                error: *error,
            })
            .collect();
        all.sort_by(|a, b| b.refused.cmp(&a.refused).then_with(|| a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_while_the_keys_fit_and_the_heavy_ones_kept_when_they_do_not() {
        let mut top = TopKeys::default();
        for _ in 0..3 {
            top.add("a");
        }
        top.add("b");
        assert_eq!(
            top.top(5),
            [
                KeyCount {
                    key: "a".into(),
                    refused: 3,
                    error: 0
                },
                KeyCount {
                    key: "b".into(),
                    refused: 1,
                    error: 0
                },
            ]
        );
        // A heavy key among 10,000 single ones stays counted, its error bounded.
        let mut top = TopKeys::default();
        for i in 0..10_000 {
            top.add(&format!("k{i}"));
            if i % 10 == 0 {
                top.add("heavy");
            }
        }
        let first = &top.top(1)[0];
        assert_eq!(first.key, "heavy");
        assert!(first.refused >= 1_000 && first.refused - first.error <= 1_000);
        assert_eq!(top.counts.len(), COUNTERS);
    }
}
