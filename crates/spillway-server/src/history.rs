//! The dashboard's history: a fixed ring of one-second samples per resource, for at most a
//! fixed number of resources (the busiest, when more have traffic), beside a ring of the
//! totals over every resource. Memory is bounded by the window and the cap, whatever the number
//! of resources.

use std::collections::HashMap;
use std::sync::Arc;

/// Rules whose blocks one sample names; the rest of its blocks are counted without a rule.
pub const RULES_PER_SAMPLE: usize = 3;

/// One resource's second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Admitted.
    pub pass: u32,
    /// Refused, by any rule.
    pub block: u32,
    /// Completed without error.
    pub success: u32,
    /// Completed with an error.
    pub error: u32,
    /// Mean response time of the completions, microseconds (0 without any).
    pub rt_avg_micros: u32,
    /// 99th percentile response time of the completions, microseconds (0 without any).
    pub rt_p99_micros: u32,
    /// In flight at the end of the second.
    pub in_flight: u32,
    /// The rules that refused the most this second, with their counts (a rule number of
    /// [`History::rule_name`]; count 0: an unused place). `block` less their sum were refused by
    /// other rules.
    pub blocks: [RuleBlocks; RULES_PER_SAMPLE],
}

/// A rule's blocks in one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleBlocks {
    /// The rule's number in the history's rule table.
    pub rule: u16,
    /// Its blocks.
    pub count: u32,
}

impl Sample {
    /// Requests that reached a decision: admitted plus refused.
    pub fn traffic(&self) -> u64 {
        u64::from(self.pass) + u64::from(self.block)
    }

    /// The sum of `self` and `other`: the mean response times weighted by completions, the p99
    /// the larger one's (an upper bound); the rules' blocks are `self`'s (a sum of resources
    /// names no rules).
    fn add(&mut self, other: &Sample) {
        let (mine, theirs) = (self.completions(), other.completions());
        let weighted =
            u64::from(self.rt_avg_micros) * mine + u64::from(other.rt_avg_micros) * theirs;
        if let Some(mean) = weighted.checked_div(mine + theirs) {
            self.rt_avg_micros = clamp(mean);
        }
        self.rt_p99_micros = self.rt_p99_micros.max(other.rt_p99_micros);
        self.pass = self.pass.saturating_add(other.pass);
        self.block = self.block.saturating_add(other.block);
        self.success = self.success.saturating_add(other.success);
        self.error = self.error.saturating_add(other.error);
        self.in_flight = self.in_flight.saturating_add(other.in_flight);
    }

    fn completions(&self) -> u64 {
        u64::from(self.success) + u64::from(self.error)
    }
}

fn clamp(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// A fixed ring of the last `window` seconds' samples.
#[derive(Debug, Clone)]
pub struct Ring {
    samples: Box<[Sample]>,
    /// The second of the newest sample (`None`: empty).
    last: Option<u64>,
    /// The traffic of the samples held (kept as they are written).
    held_traffic: u64,
}

impl Ring {
    /// An empty ring of `window` seconds (at least one).
    pub fn new(window: usize) -> Self {
        Self {
            samples: vec![Sample::default(); window.max(1)].into_boxed_slice(),
            last: None,
            held_traffic: 0,
        }
    }

    /// Records `sample` as second `second`'s. Seconds skipped since the last record read as
    /// empty; a second not after the last one adds to the sample it already has.
    pub fn record(&mut self, second: u64, sample: &Sample) {
        let window = self.samples.len() as u64;
        match self.last {
            Some(last) if second <= last => {
                if last - second < window {
                    self.samples[(second % window) as usize].add(sample);
                    self.held_traffic += sample.traffic();
                }
                return;
            }
            Some(last) => {
                // Empty the slots of the seconds skipped (at most the whole ring).
                for skipped in (last + 1..second).rev().take(self.samples.len()) {
                    self.put(skipped, Sample::default());
                }
            }
            None => {}
        }
        self.put(second, *sample);
        self.last = Some(second);
    }

    /// Writes second `second`'s slot, keeping the traffic held.
    fn put(&mut self, second: u64, sample: Sample) {
        let slot = &mut self.samples[(second % self.samples.len() as u64) as usize];
        self.held_traffic = self.held_traffic - slot.traffic() + sample.traffic();
        *slot = sample;
    }

    /// The samples of the `window` seconds up to and including `now`, oldest first: seconds
    /// before the first record, skipped, or older than the ring read as empty.
    pub fn series(&self, now: u64) -> Vec<Sample> {
        let window = self.samples.len() as u64;
        (0..window)
            .map(|back| {
                let second = now.checked_sub(window - 1 - back);
                match (second, self.last) {
                    (Some(second), Some(last)) if second <= last && last - second < window => {
                        self.samples[(second % window) as usize]
                    }
                    _ => Sample::default(),
                }
            })
            .collect()
    }

    /// Requests decided (admitted plus refused) over the ring's seconds up to `now`.
    pub fn traffic(&self, now: u64) -> u64 {
        match self.last {
            // What the ring holds is the window up to its last second.
            Some(last) if last == now => self.held_traffic,
            _ => self.series(now).iter().map(Sample::traffic).sum(),
        }
    }

    /// Its seconds.
    pub fn window(&self) -> usize {
        self.samples.len()
    }
}

/// The history of every resource the dashboard shows.
#[derive(Debug)]
pub struct History {
    window: usize,
    cap: usize,
    rings: HashMap<Arc<str>, Ring>,
    /// Every resource's samples summed, each second.
    total: Ring,
    /// Rule ids by number, for [`Sample::blocks`].
    rules: Vec<Arc<str>>,
    rule_numbers: HashMap<Arc<str>, u16>,
    /// Resources whose ring was given to a busier one.
    evictions: u64,
    /// The newest second recorded.
    last: Option<u64>,
}

impl History {
    /// Rings of `window` seconds for at most `cap` resources.
    pub fn new(window: usize, cap: usize) -> Self {
        Self {
            window: window.max(1),
            cap,
            rings: HashMap::new(),
            total: Ring::new(window),
            rules: Vec::new(),
            rule_numbers: HashMap::new(),
            evictions: 0,
            last: None,
        }
    }

    /// The number of rule `id` in the rule table (added if new; the table holds at most
    /// 65,535 ids, after which every new id shares the last number).
    pub fn rule_number(&mut self, id: &str) -> u16 {
        if let Some(&number) = self.rule_numbers.get(id) {
            return number;
        }
        let Ok(number) = u16::try_from(self.rules.len()) else {
            return u16::MAX;
        };
        if number == u16::MAX {
            return u16::MAX;
        }
        let id: Arc<str> = Arc::from(id);
        self.rules.push(id.clone());
        self.rule_numbers.insert(id, number);
        number
    }

    /// The id of rule `number`.
    pub fn rule_name(&self, number: u16) -> Option<&str> {
        self.rules.get(usize::from(number)).map(|id| &**id)
    }

    /// Records second `second` of every resource that had one (`samples`): into the totals,
    /// and into each resource's ring. A resource without a ring gets one while fewer than the
    /// cap have one; past the cap, the busiest newcomers (by this second's traffic) take the
    /// rings of the quietest resources (by their whole window's traffic) while they are busier.
    pub fn record(&mut self, second: u64, samples: &[(Arc<str>, Sample)]) {
        self.last = Some(self.last.map_or(second, |last| last.max(second)));
        let mut total = Sample::default();
        let mut newcomers = Vec::new();
        for (resource, sample) in samples {
            total.add(sample);
            match self.rings.get_mut(resource) {
                Some(ring) => ring.record(second, sample),
                None if sample.traffic() > 0 || sample.in_flight > 0 => {
                    newcomers.push((resource, sample));
                }
                None => {}
            }
        }
        self.total.record(second, &total);
        if newcomers.is_empty() {
            return;
        }
        newcomers.sort_by_key(|(_, sample)| std::cmp::Reverse(sample.traffic()));
        let mut newcomers = newcomers.into_iter();
        // Free rings first.
        while self.rings.len() < self.cap {
            let Some((resource, sample)) = newcomers.next() else {
                return;
            };
            self.start(resource.clone(), second, sample);
        }
        let rest: Vec<_> = newcomers.collect();
        if rest.is_empty() || self.cap == 0 {
            return;
        }
        // The quietest tracked resources, quietest first, as many as there are newcomers.
        let mut quiet: Vec<(u64, Arc<str>)> = self
            .rings
            .iter()
            .map(|(resource, ring)| (ring.traffic(second), resource.clone()))
            .collect();
        quiet.sort_unstable_by_key(|(traffic, _)| *traffic);
        for ((resource, sample), (quiet_traffic, quiet_resource)) in rest.into_iter().zip(quiet) {
            if sample.traffic() <= quiet_traffic {
                break;
            }
            self.rings.remove(&quiet_resource);
            self.evictions += 1;
            self.start(resource.clone(), second, sample);
        }
    }

    fn start(&mut self, resource: Arc<str>, second: u64, sample: &Sample) {
        let mut ring = Ring::new(self.window);
        ring.record(second, sample);
        self.rings.insert(resource, ring);
    }

    /// `resource`'s samples over the window up to `now`, oldest first; None if it has no ring.
    pub fn series(&self, resource: &str, now: u64) -> Option<Vec<Sample>> {
        self.rings.get(resource).map(|ring| ring.series(now))
    }

    /// Every resource's samples summed, over the window up to `now`.
    pub fn totals(&self, now: u64) -> Vec<Sample> {
        self.total.series(now)
    }

    /// The resources with a ring.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.rings.keys().map(|resource| &**resource)
    }

    /// The newest second recorded.
    pub fn last_second(&self) -> Option<u64> {
        self.last
    }

    /// Resources whose ring went to a busier one, since the start.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Its seconds.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The most resources with a ring.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The bytes its rings and tables hold on the heap, by their sizes (the names counted at
    /// their length): what the cap bounds.
    pub fn heap_bytes(&self) -> usize {
        let ring = self.window * std::mem::size_of::<Sample>();
        let entry = std::mem::size_of::<(Arc<str>, Ring)>() + 1;
        let names: usize = self.rings.keys().map(|name| name.len() + 16).sum();
        let rules: usize = self.rules.iter().map(|id| id.len() + 16 + 2 * 24).sum();
        // A hash map's table holds at least its capacity of entries.
        ring * (self.rings.len() + 1) + entry * self.rings.capacity() + names + rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(pass: u32) -> Sample {
        Sample {
            pass,
            ..Sample::default()
        }
    }

    #[test]
    fn a_ring_keeps_the_last_window_of_seconds_and_empties_skipped_ones() {
        let mut ring = Ring::new(4);
        assert_eq!(ring.series(100), vec![Sample::default(); 4]);
        ring.record(100, &passes(1));
        ring.record(101, &passes(2));
        // 102 and 103 skipped.
        ring.record(104, &passes(5));
        let pass = |series: Vec<Sample>| series.iter().map(|s| s.pass).collect::<Vec<_>>();
        assert_eq!(pass(ring.series(104)), [2, 0, 0, 5]);
        // Read later: the seconds since read as empty.
        assert_eq!(pass(ring.series(106)), [0, 5, 0, 0]);
        // A skip longer than the ring empties it all.
        ring.record(200, &passes(7));
        assert_eq!(pass(ring.series(200)), [0, 0, 0, 7]);
        // A late sample for a second still in the ring adds to it; an older one is dropped.
        ring.record(199, &passes(3));
        ring.record(150, &passes(9));
        assert_eq!(pass(ring.series(200)), [0, 0, 3, 7]);
        assert_eq!(ring.traffic(200), 10);
    }

    #[test]
    fn response_times_add_weighted_by_completions() {
        let mut a = Sample {
            success: 3,
            rt_avg_micros: 100,
            rt_p99_micros: 150,
            ..Sample::default()
        };
        let b = Sample {
            success: 1,
            error: 0,
            rt_avg_micros: 500,
            rt_p99_micros: 500,
            ..Sample::default()
        };
        a.add(&b);
        assert_eq!((a.success, a.rt_avg_micros, a.rt_p99_micros), (4, 200, 500));
        // Nothing completed: the averages stay.
        a.add(&Sample::default());
        assert_eq!(a.rt_avg_micros, 200);
    }

    #[test]
    fn past_the_cap_the_busiest_take_the_quietest_rings() {
        let mut history = History::new(10, 2);
        let name = |n: &str| Arc::<str>::from(n);
        history.record(1, &[(name("a"), passes(5)), (name("b"), passes(1))]);
        // Full: c (3 this second) is busier than b's whole window (1), not than a's (5).
        history.record(2, &[(name("c"), passes(3)), (name("d"), passes(0))]);
        let mut tracked: Vec<_> = history.resources().collect();
        tracked.sort_unstable();
        assert_eq!(tracked, ["a", "c"]);
        assert_eq!(history.evictions(), 1);
        // A newcomer no busier than the quietest tracked window waits.
        history.record(3, &[(name("e"), passes(3))]);
        assert!(history.series("e", 3).is_none());
        // Totals count every resource, tracked or not.
        let totals: Vec<u32> = history.totals(3).iter().map(|s| s.pass).collect();
        assert_eq!(&totals[7..], [6, 3, 3]);
        // c's history starts when it got its ring.
        let c: Vec<u32> = history
            .series("c", 3)
            .unwrap()
            .iter()
            .map(|s| s.pass)
            .collect();
        assert_eq!(&c[7..], [0, 3, 0]);
    }

    #[test]
    fn a_resource_with_no_traffic_gets_no_ring() {
        let mut history = History::new(10, 5);
        history.record(1, &[(Arc::from("idle"), Sample::default())]);
        assert_eq!(history.resources().count(), 0);
        let busy = Sample {
            in_flight: 2,
            ..Sample::default()
        };
        history.record(2, &[(Arc::from("long"), busy)]);
        assert_eq!(history.resources().count(), 1);
    }

    #[test]
    fn rule_numbers_are_stable_and_bounded() {
        let mut history = History::new(10, 5);
        let a = history.rule_number("orders-qps");
        let b = history.rule_number("orders-breaker");
        assert_eq!((a, b), (0, 1));
        assert_eq!(history.rule_number("orders-qps"), 0);
        assert_eq!(history.rule_name(1), Some("orders-breaker"));
        assert_eq!(history.rule_name(2), None);
    }

    #[test]
    fn memory_is_bounded_by_the_cap_whatever_the_resources() {
        let mut history = History::new(300, 100);
        for second in 0..300u64 {
            let samples: Vec<_> = (0..1_000u32)
                .map(|n| (Arc::<str>::from(format!("resource-{n}")), passes(n + 1)))
                .collect();
            history.record(second, &samples);
        }
        assert_eq!(history.resources().count(), 100);
        let bytes = history.heap_bytes();
        // 100 rings of 300 samples, and the totals.
        let rings = 101 * 300 * std::mem::size_of::<Sample>();
        assert!(bytes >= rings && bytes < rings * 2, "{bytes} bytes");
    }
}
