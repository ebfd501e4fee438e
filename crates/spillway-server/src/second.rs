//! One resource's counts of the current second, for the dashboard's history: what the proxy
//! decided and how long the answers took, kept with atomic adds on the request path and taken
//! (and zeroed) once a second by the sampler.

use crate::history::{RuleBlocks, Sample, RULES_PER_SAMPLE};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Response-time buckets: a quarter of an octave each (about 19% wide), from 1 µs to about
/// 2^26 µs (67 s); slower answers count in the last.
const RT_BUCKETS: usize = 26 * 4 + 1;

/// Rules per resource whose blocks are told apart; blocks by further rules count without one.
const RULE_SLOTS: usize = 8;

/// The current second's counts of one resource.
#[derive(Debug)]
pub(crate) struct SecondCounts {
    pass: AtomicU32,
    block: AtomicU32,
    success: AtomicU32,
    error: AtomicU32,
    rt_sum_micros: AtomicU64,
    rt: [AtomicU32; RT_BUCKETS],
    /// The rules that refused this resource's requests (each set once), with this second's
    /// blocks.
    rules: [RuleSlot; RULE_SLOTS],
}

#[derive(Debug, Default)]
struct RuleSlot {
    id: OnceLock<Box<str>>,
    count: AtomicU32,
}

impl Default for SecondCounts {
    fn default() -> Self {
        Self {
            pass: AtomicU32::new(0),
            block: AtomicU32::new(0),
            success: AtomicU32::new(0),
            error: AtomicU32::new(0),
            rt_sum_micros: AtomicU64::new(0),
            rt: std::array::from_fn(|_| AtomicU32::new(0)),
            rules: Default::default(),
        }
    }
}

/// The bucket of a response time.
fn rt_bucket(micros: u64) -> usize {
    if micros <= 1 {
        return 0;
    }
    // log2 in quarter octaves: the integer part from the leading zeros, the quarter from the
    // next two bits below the leading one.
    let octave = 63 - micros.leading_zeros() as usize;
    let quarter = if octave >= 2 {
        ((micros >> (octave - 2)) & 3) as usize
    } else {
        ((micros << (2 - octave)) & 3) as usize
    };
    (octave * 4 + quarter).min(RT_BUCKETS - 1)
}

/// The upper edge of a bucket (the lower edge of the next), microseconds.
fn rt_upper(bucket: usize) -> u64 {
    let (octave, quarter) = (bucket / 4, bucket % 4);
    // (4 + quarter + 1) / 4 * 2^octave, rounded up to a whole microsecond.
    ((4 + quarter as u64 + 1) << octave).div_ceil(4)
}

impl SecondCounts {
    /// An admission.
    pub(crate) fn pass(&self) {
        self.pass.fetch_add(1, Ordering::Relaxed);
    }

    /// A refusal by rule `rule` (or by a limit without an id).
    pub(crate) fn block(&self, rule: Option<&str>) {
        self.block.fetch_add(1, Ordering::Relaxed);
        let Some(rule) = rule else {
            return;
        };
        for slot in &self.rules {
            let id = slot.id.get_or_init(|| rule.into());
            if **id == *rule {
                slot.count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// A completion: an error or not.
    pub(crate) fn complete(&self, error: bool) {
        let outcome = if error { &self.error } else { &self.success };
        outcome.fetch_add(1, Ordering::Relaxed);
    }

    /// An answer's response time.
    pub(crate) fn answered(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.rt_sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.rt[rt_bucket(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts since the last take, zeroed, as a sample with `in_flight`; rule ids numbered
    /// by `number`. A count made while it is taken lands in this second or the next, never in
    /// neither.
    pub(crate) fn take(&self, in_flight: u32, mut number: impl FnMut(&str) -> u16) -> Sample {
        let take = |counter: &AtomicU32| counter.swap(0, Ordering::Relaxed);
        let (success, error) = (take(&self.success), take(&self.error));
        let rt_sum = self.rt_sum_micros.swap(0, Ordering::Relaxed);
        let rt: Vec<u32> = self.rt.iter().map(take).collect();
        let answers: u64 = rt.iter().map(|&n| u64::from(n)).sum();
        let mut blocks: Vec<RuleBlocks> = self
            .rules
            .iter()
            .filter_map(|slot| {
                let id = slot.id.get()?;
                let count = take(&slot.count);
                (count > 0).then(|| RuleBlocks {
                    rule: number(id),
                    count,
                })
            })
            .collect();
        blocks.sort_by_key(|rule| std::cmp::Reverse(rule.count));
        let mut top = [RuleBlocks::default(); RULES_PER_SAMPLE];
        for (place, rule) in top.iter_mut().zip(blocks) {
            *place = rule;
        }
        Sample {
            pass: take(&self.pass),
            block: take(&self.block),
            success,
            error,
            rt_avg_micros: clamp(rt_sum.checked_div(answers).unwrap_or(0)),
            rt_p99_micros: clamp(p99(&rt, answers)),
            in_flight,
            blocks: top,
        }
    }
}

/// The upper edge of the bucket holding the 99th percentile of `completions` answers (0
/// without any).
fn p99(buckets: &[u32], completions: u64) -> u64 {
    if completions == 0 {
        return 0;
    }
    // The rank of the 99th percentile, rounded up: at least 99% are at or below it.
    let rank = (completions * 99).div_ceil(100);
    let mut seen = 0;
    for (bucket, &count) in buckets.iter().enumerate() {
        seen += u64::from(count);
        if seen >= rank {
            return rt_upper(bucket);
        }
    }
    rt_upper(buckets.len() - 1)
}

fn clamp(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_quarter_octaves_and_hold_their_values() {
        for micros in [
            1u64,
            2,
            3,
            5,
            7,
            8,
            100,
            999,
            1_000,
            65_535,
            1 << 20,
            60_000_000,
        ] {
            let bucket = rt_bucket(micros);
            assert!(
                micros < rt_upper(bucket) || bucket == RT_BUCKETS - 1,
                "{micros} above bucket {bucket}"
            );
            if bucket > 0 {
                // A bucket holds its lower edge (the one below's upper edge), not its upper.
                assert!(
                    micros >= rt_upper(bucket - 1),
                    "{micros} in bucket {bucket}"
                );
            }
            // A bucket is at most 25% wider than the one below its edge.
            assert!(rt_upper(bucket) as f64 <= micros.max(1) as f64 * 1.25 + 1.0);
        }
        assert_eq!(rt_bucket(u64::MAX), RT_BUCKETS - 1);
    }

    #[test]
    fn a_take_is_the_second_counted_then_zero() {
        let counts = SecondCounts::default();
        for _ in 0..3 {
            counts.pass();
        }
        for n in 0..100u64 {
            // 99 answers of 1 ms, one of 50 ms: the p99 is about 1 ms.
            let millis = if n == 99 { 50 } else { 1 };
            counts.complete(n == 0);
            counts.answered(Duration::from_millis(millis));
        }
        counts.block(Some("qps"));
        counts.block(Some("qps"));
        counts.block(Some("breaker"));
        counts.block(None);
        let mut names = Vec::new();
        let sample = counts.take(7, |id| {
            names.push(id.to_owned());
            names.len() as u16 - 1
        });
        assert_eq!((sample.pass, sample.block), (3, 4));
        assert_eq!((sample.success, sample.error, sample.in_flight), (99, 1, 7));
        assert_eq!(sample.rt_avg_micros, (99 * 1_000 + 50_000) / 100);
        assert!(
            (1_000..=1_250).contains(&sample.rt_p99_micros),
            "{sample:?}"
        );
        let blocks: Vec<(String, u32)> = sample
            .blocks
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| (names[usize::from(b.rule)].clone(), b.count))
            .collect();
        assert_eq!(blocks, [("qps".to_owned(), 2), ("breaker".to_owned(), 1)]);
        // Zeroed.
        assert_eq!(counts.take(0, |_| 0), Sample::default());
    }

    #[test]
    fn rules_past_the_slots_count_as_blocks_without_a_rule() {
        let counts = SecondCounts::default();
        for n in 0..RULE_SLOTS + 2 {
            counts.block(Some(&format!("rule-{n}")));
        }
        let sample = counts.take(0, |_| 0);
        assert_eq!(sample.block as usize, RULE_SLOTS + 2);
        let named: u32 = sample.blocks.iter().map(|b| b.count).sum();
        assert_eq!(named as usize, RULES_PER_SAMPLE);
    }
}
