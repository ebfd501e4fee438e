//! The dashboard's feed: once a second, every resource's counts of the second go into the
//! history, and the second is sent, as JSON, to every live stream.

use crate::history::{History, Sample};
use crate::proxy::Proxy;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

pub use crate::config::{DEFAULT_RESOURCES, DEFAULT_WINDOW};

/// Seconds a slow stream may fall behind before it skips ahead.
const STREAM_BACKLOG: usize = 16;

/// The history and the streams of one admin API.
#[derive(Debug)]
pub struct Feed {
    history: Mutex<History>,
    seconds: broadcast::Sender<Arc<str>>,
}

impl Feed {
    /// A feed keeping `window` seconds for at most `resources` resources.
    pub fn new(window: usize, resources: usize) -> Self {
        Self {
            history: Mutex::new(History::new(window, resources)),
            seconds: broadcast::channel(STREAM_BACKLOG).0,
        }
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes second `second` (Unix seconds) of `proxy`'s resources into the history and sends
    /// it to the streams; returns what was sent.
    pub fn tick(&self, proxy: &Proxy, second: u64) -> Arc<str> {
        let in_flight: HashMap<Arc<str>, i64> = proxy
            .spillway()
            .snapshot()
            .resources
            .into_iter()
            .map(|resource| (resource.name, resource.stats.concurrency))
            .collect();
        let mut history = self.history();
        let samples: Vec<(Arc<str>, Sample)> = proxy
            .metrics()
            .seconds()
            .into_iter()
            .map(|(resource, counts)| {
                let flying = in_flight.get(&resource).copied().unwrap_or(0);
                let flying = u32::try_from(flying.max(0)).unwrap_or(u32::MAX);
                let sample = counts.take(flying, |id| history.rule_number(id));
                (resource, sample)
            })
            .collect();
        history.record(second, &samples);
        let resources: Map<String, Value> = samples
            .iter()
            .map(|(resource, sample)| (resource.to_string(), sample_json(&history, sample)))
            .collect();
        let total = history.totals(second).last().copied().unwrap_or_default();
        let event = json!({
            "second": second,
            "totals": sample_json(&history, &total),
            "resources": resources,
        });
        let event: Arc<str> = Arc::from(event.to_string());
        // No stream listening is not an error.
        let _ = self.seconds.send(event.clone());
        event
    }

    /// Ticks once a second, on the second, for good (run it in a task of its own).
    /// Seconds are numbered from the Unix time at the start, counted on tokio's clock, so that
    /// consecutive ticks are consecutive seconds.
    pub async fn run(self: Arc<Self>, proxy: Proxy) {
        // Wall time, for the seconds' labels only.
        let base = crate::unix_time::unix_seconds_now() as u64;
        let start = tokio::time::Instant::now();
        let mut every =
            tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            // The second that just ended.
            let second = base + start.elapsed().as_secs() - 1;
            self.tick(&proxy, second);
        }
    }

    /// A new stream of the seconds to come.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.seconds.subscribe()
    }

    /// The history up to its newest second: the totals, and the resources with a history and
    /// their traffic over the window; with `resource`, that resource's samples too.
    pub fn history_json(&self, resource: Option<&str>) -> Value {
        let history = self.history();
        let second = history.last_second().unwrap_or(0);
        let series = |samples: Vec<Sample>| -> Vec<Value> {
            samples.iter().map(|s| sample_json(&history, s)).collect()
        };
        let mut resources: Vec<(String, u64)> = history
            .resources()
            .map(|name| {
                let traffic = history
                    .series(name, second)
                    .map_or(0, |s| s.iter().map(Sample::traffic).sum());
                (name.to_owned(), traffic)
            })
            .collect();
        resources.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut body = json!({
            "second": second,
            "window": history.window(),
            "cap": history.cap(),
            "evictions": history.evictions(),
            "totals": series(history.totals(second)),
            "resources": resources
                .iter()
                .map(|(name, traffic)| json!({"resource": name, "traffic": traffic}))
                .collect::<Vec<_>>(),
        });
        if let Some(resource) = resource {
            body["series"] = history
                .series(resource, second)
                .map_or(Value::Null, |samples| Value::from(series(samples)));
        }
        body
    }
}

/// A sample as JSON: counts, response times in milliseconds, and blocks by rule id.
fn sample_json(history: &History, sample: &Sample) -> Value {
    let mut blocks = Map::new();
    for rule in sample.blocks.iter().filter(|rule| rule.count > 0) {
        if let Some(id) = history.rule_name(rule.rule) {
            blocks.insert(id.to_owned(), rule.count.into());
        }
    }
    json!({
        "pass": sample.pass,
        "block": sample.block,
        "success": sample.success,
        "error": sample.error,
        "rt_avg_ms": f64::from(sample.rt_avg_micros) / 1e3,
        "rt_p99_ms": f64::from(sample.rt_p99_micros) / 1e3,
        "in_flight": sample.in_flight,
        "blocks": blocks,
    })
}
