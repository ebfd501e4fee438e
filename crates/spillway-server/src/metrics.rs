//! `GET /metrics`: Prometheus text format, from the proxy's counters and spillway's live state.

use crate::conn::ListenerCounts;
use crate::second::SecondCounts;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod classes;
mod label_value;
mod live;

pub(crate) use classes::ClassMetrics;
pub(crate) use label_value::LabelValue;

use live::Live;

/// What happened to a request, for `spillway_requests_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) resource: LabelValue,
    /// `pass` then `success` or `error`; or `block`; or, for a request admitted only because a
    /// rule (or the listener) is in shadow mode, `shadow_block` then `success` or `error`.
    pub(crate) outcome: &'static str,
    /// For a block, the check that refused (`flow`, `system`, `breaker`, `tps`, ...); else
    /// empty.
    pub(crate) reason: &'static str,
}

/// A kind of rule, as a label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub(crate) kind: LabelValue,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabel {
    pub(crate) resource: LabelValue,
}

/// What a kind's metrics are read from at each scrape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sources<'a> {
    pub(crate) spillway: &'a spillway::Spillway,
    /// The cluster rules, leased and strict.
    pub(crate) cluster: &'a crate::cluster::ClusterLimits,
}

/// One kind of rule's metrics, read at each scrape: the rules it has loaded
/// (`spillway_rules{kind}`) and its own series. Each kind of the server's list gives its own
/// ([`Metrics::set_kinds`]), so that this module names none.
pub(crate) trait KindMetrics: Sync {
    /// Its `kind` label.
    fn label(&self) -> &'static str;

    /// How many of its rules are loaded.
    fn loaded(&self, from: Sources<'_>) -> usize;

    /// Writes its own series (none unless it has some).
    ///
    /// # Errors
    ///
    /// If the text cannot be written.
    fn encode(&self, _encoder: &mut DescriptorEncoder<'_>, _from: Sources<'_>) -> fmt::Result {
        Ok(())
    }
}

impl fmt::Debug for dyn KindMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The kinds whose metrics a scrape reads, given once the kinds' list is known.
pub(crate) type KindsMetrics = Arc<std::sync::OnceLock<Vec<&'static dyn KindMetrics>>>;

/// The proxy's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    /// Every kind of rule's metrics.
    kinds: KindsMetrics,
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) latency: Family<ResourceLabel, Histogram>,
    /// Rules in force whose resource no route produces, by kind (set at each scrape by
    /// [`set_unused_rules`](Self::set_unused_rules), from what `/api/status` lists).
    unused_rules: Family<KindLabel, Gauge>,
    /// Each resource's current second, for the dashboard's history, in first-use order.
    seconds: Mutex<Vec<(Arc<str>, Arc<SecondCounts>)>>,
    /// What became of the requests of each criticality.
    pub(crate) classes: ClassMetrics,
}

fn latency_histogram() -> Histogram {
    // 250 µs to about 33 s, doubling.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 18))
}

impl Metrics {
    pub(crate) fn new(
        spillway: spillway::Spillway,
        proxy: ListenerCounts,
        admin: ListenerCounts,
        reloads: std::sync::Arc<std::sync::Mutex<crate::config_state::ConfigState>>,
        cluster: std::sync::Arc<crate::cluster::ClusterLimits>,
        access_log: std::sync::Arc<crate::access_log::Counts>,
    ) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<ResourceLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "spillway_requests",
            "Requests through the proxy by resource, outcome and block reason",
            requests.clone(),
        );
        registry.register(
            "spillway_response_seconds",
            "Time from a request's arrival to its response head, by resource",
            latency.clone(),
        );
        let unused_rules = Family::<KindLabel, Gauge>::default();
        registry.register(
            "spillway_unused_rules",
            "Rules in force whose resource no route produces (they never apply), by kind",
            unused_rules.clone(),
        );
        let classes = ClassMetrics::new(&mut registry);
        let kinds = KindsMetrics::default();
        registry.register_collector(Box::new(Live {
            spillway,
            cluster,
            kinds: Arc::clone(&kinds),
        }));
        registry.register_collector(Box::new(Listeners { proxy, admin }));
        registry.register_collector(Box::new(Reloads { state: reloads }));
        registry.register_collector(Box::new(AccessLogLines { counts: access_log }));
        Self {
            registry,
            kinds,
            requests,
            latency,
            unused_rules,
            seconds: Mutex::default(),
            classes,
        }
    }

    /// Sets the count of unused rules of each kind in `counts` (a kind with none at 0).
    pub(crate) fn set_unused_rules<'a>(&self, counts: impl IntoIterator<Item = (&'a str, usize)>) {
        for (kind, count) in counts {
            let label = KindLabel { kind: kind.into() };
            self.unused_rules
                .get_or_create(&label)
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Reads `kinds`' metrics at each scrape (the first list given is kept).
    pub(crate) fn set_kinds(&self, kinds: Vec<&'static dyn KindMetrics>) {
        let _ = self.kinds.set(kinds);
    }

    /// The series of `resource` that every request touches (its passes, successes, errors and
    /// response times), looked up once: counting through them is an atomic add, with no label
    /// to hash or allocate.
    pub(crate) fn resource(&self, resource: &str) -> ResourceMetrics {
        let counter = |outcome| {
            self.requests
                .get_or_create(&RequestLabels {
                    resource: resource.into(),
                    outcome,
                    reason: "",
                })
                .clone()
        };
        let second = {
            let mut seconds = self.seconds.lock().unwrap_or_else(|e| e.into_inner());
            match seconds.iter().find(|(name, _)| &**name == resource) {
                Some((_, second)) => second.clone(),
                None => {
                    let second = Arc::new(SecondCounts::default());
                    seconds.push((Arc::from(resource), second.clone()));
                    second
                }
            }
        };
        ResourceMetrics {
            pass: counter("pass"),
            success: counter("success"),
            error: counter("error"),
            latency: self
                .latency
                .get_or_create(&ResourceLabel {
                    resource: resource.into(),
                })
                .clone(),
            second,
        }
    }

    /// Each resource's current second, in first-use order.
    pub(crate) fn seconds(&self) -> Vec<(Arc<str>, Arc<SecondCounts>)> {
        self.seconds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts a request's outcome.
    pub(crate) fn count(&self, resource: &str, outcome: &'static str, reason: &'static str) {
        self.requests
            .get_or_create(&RequestLabels {
                resource: resource.into(),
                outcome,
                reason,
            })
            .inc();
    }

    /// The text exposition.
    pub(crate) fn render(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// One resource's series in [`Metrics`] that every request touches, shared with the families
/// (a handle, not a copy): see [`Metrics::resource`].
#[derive(Debug, Clone)]
pub(crate) struct ResourceMetrics {
    /// `outcome="pass"`.
    pass: Counter,
    /// `outcome="success"`.
    success: Counter,
    /// `outcome="error"`.
    error: Counter,
    latency: Histogram,
    /// The current second's counts, for the dashboard's history.
    second: Arc<SecondCounts>,
}

impl ResourceMetrics {
    /// An admission.
    pub(crate) fn passed(&self) {
        self.pass.inc();
        self.second.pass();
    }

    /// A completion, an error or not.
    pub(crate) fn completed(&self, error: bool) {
        if error { &self.error } else { &self.success }.inc();
        self.second.complete(error);
    }

    /// A refusal by `err` (its block counted by [`Metrics::count`] with its reason).
    pub(crate) fn blocked(&self, err: &spillway::BlockError) {
        self.second.block(err.rule_id());
    }

    /// Records the time to a response head.
    pub(crate) fn observe(&self, elapsed: Duration) {
        self.latency.observe(elapsed.as_secs_f64());
        self.second.answered(elapsed);
    }
}

/// Labels of one series: `(name, value)` pairs.
pub(crate) type Labels<'a> = Vec<(&'a str, LabelValue)>;

/// A rule's series labels: its id and its resource.
pub(crate) fn rule_labels(id: &str, resource: &str) -> Labels<'static> {
    vec![("rule", id.into()), ("resource", resource.into())]
}

/// Writes one counter family: a series per row.
pub(crate) fn counters<'a>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels<'a>, u64)>,
) -> Result<(), fmt::Error> {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (labels, value) in rows {
        prometheus_client::metrics::counter::ConstCounter::new(value)
            .encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes one metric without labels, of `kind`, with `value` (a counter's is whole).
fn single(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: prometheus_client::metrics::MetricType,
    value: f64,
) -> Result<(), fmt::Error> {
    let family = encoder.encode_descriptor(name, help, None, kind)?;
    match kind {
        prometheus_client::metrics::MetricType::Counter => {
            prometheus_client::metrics::counter::ConstCounter::new(value as u64).encode(family)
        }
        _ => ConstGauge::new(value).encode(family),
    }
}

/// Writes one gauge family: a series per row.
pub(crate) fn gauges<'a>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels<'a>, f64)>,
) -> Result<(), fmt::Error> {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (labels, value) in rows {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The listeners' counters, read at each scrape: their troubles (accept errors, connections
/// closed for a slow request head, request bodies that stalled, ..., see
/// [`crate::troubles::TROUBLES`]), their connections and cap, requests running on, upstream
/// connections, and the admin API's refusals.
#[derive(Debug)]
struct Listeners {
    proxy: ListenerCounts,
    admin: ListenerCounts,
}

impl Collector for Listeners {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let listeners = [("proxy", &self.proxy), ("admin", &self.admin)];
        for trouble in &crate::troubles::TROUBLES {
            let rows = listeners.map(|(listener, counts)| {
                let labels = vec![("listener", (*listener).into())];
                (labels, (trouble.read)(counts))
            });
            counters(&mut encoder, trouble.metric, trouble.help, rows)?;
        }
        for (name, help, read) in [
            (
                "spillway_connections",
                "Open connections, by listener",
                (|state: &crate::conn::Occupancy| state.open) as fn(&_) -> usize,
            ),
            (
                "spillway_max_connections",
                "The most connections a listener holds open at once (0: no cap)",
                |state| state.max,
            ),
        ] {
            let rows = listeners.iter().filter_map(|(listener, counts)| {
                let state = counts.accepts()?;
                Some((vec![("listener", (*listener).into())], read(&state) as f64))
            });
            gauges(&mut encoder, name, help, rows)?;
        }
        let running_on = listeners.map(|(listener, counts)| {
            (
                vec![("listener", (*listener).into())],
                counts.running_on() as f64,
            )
        });
        gauges(
            &mut encoder,
            "spillway_running_on",
            "Requests running on to the upstream's answer after their client left \
             (listener.finish_when_client_leaves), each holding a place counted in \
             spillway_connections, by listener",
            running_on,
        )?;
        let upstream = [
            (
                "spillway_upstream_refusals",
                "Requests answered 503 because as many upstream connections were open as the \
                 open-file limit leaves room for",
                prometheus_client::metrics::MetricType::Counter,
                self.proxy.upstream_refusals() as f64,
            ),
            (
                "spillway_upstream_connections",
                "Open upstream connections, all upstreams",
                prometheus_client::metrics::MetricType::Gauge,
                crate::descriptors::upstream_open() as f64,
            ),
            (
                "spillway_max_upstream_connections",
                "The most upstream connections open at once, all upstreams (0: no cap)",
                prometheus_client::metrics::MetricType::Gauge,
                crate::descriptors::upstream_cap() as f64,
            ),
        ];
        for (name, help, kind, value) in upstream {
            single(&mut encoder, name, help, kind, value)?;
        }
        if let Some(admin) = self.admin.accepts() {
            use prometheus_client::metrics::MetricType::{Counter, Gauge};
            let (evictions, full, streams) = self.admin.admin_refusals();
            let admin = [
                (
                    "spillway_admin_pending_connections",
                    "Admin connections open that have not shown the token yet",
                    Gauge,
                    admin.pending as f64,
                ),
                (
                    "spillway_admin_streams",
                    "Live streams (/api/stream) open",
                    Gauge,
                    admin.streams as f64,
                ),
                (
                    "spillway_admin_evictions",
                    "Admin connections closed to make room for a newcomer before they showed \
                     the token",
                    Counter,
                    evictions as f64,
                ),
                (
                    "spillway_admin_full_refusals",
                    "Admin connections answered 503 because every place was held by one that \
                     showed the token",
                    Counter,
                    full as f64,
                ),
                (
                    "spillway_admin_stream_refusals",
                    "Live streams answered 503 past admin.max_streams",
                    Counter,
                    streams as f64,
                ),
            ];
            for (name, help, kind, value) in admin {
                single(&mut encoder, name, help, kind, value)?;
            }
        }
        if let Some(loads) = self.proxy.worker_loads() {
            let rows = loads
                .into_iter()
                .enumerate()
                .map(|(worker, open)| (vec![("worker", worker.to_string().into())], open as f64));
            gauges(
                &mut encoder,
                "spillway_worker_connections",
                "Open proxy connections served by each worker thread",
                rows,
            )?;
        }
        Ok(())
    }
}

/// The access log's lines, read at each scrape.
#[derive(Debug)]
struct AccessLogLines {
    counts: std::sync::Arc<crate::access_log::Counts>,
}

impl Collector for AccessLogLines {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let rows = (self.counts.read().into_iter())
            .map(|(result, count)| (vec![("result", (*result).into())], count));
        counters(
            &mut encoder,
            "spillway_access_log_lines",
            "Access log lines by result: written, dropped (the writer was behind), failed (a \
             write error)",
            rows,
        )
    }
}

/// The configuration file's reloads, read at each scrape.
#[derive(Debug)]
struct Reloads {
    state: std::sync::Arc<std::sync::Mutex<crate::config_state::ConfigState>>,
}

impl Collector for Reloads {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let totals = [
            (
                "spillway_config_reloads",
                "Reloads of the configuration file applied",
                state.reloads,
            ),
            (
                "spillway_config_reload_failures",
                "Reloads refused: a bad file (nothing changed), or a file gone",
                state.failures,
            ),
        ];
        for (name, help, value) in totals {
            let kind = prometheus_client::metrics::MetricType::Counter;
            single(&mut encoder, name, help, kind, value as f64)?;
        }
        let readings = [
            (
                "spillway_config_last_reload_timestamp_seconds",
                "When the last good reload was applied (Unix time; 0: none since start)",
                state.last_reload_unix_seconds.unwrap_or(0.0),
            ),
            (
                "spillway_config_restart_needed",
                "1 if a reload changed settings that only a restart applies",
                f64::from(u8::from(state.restart_needed)),
            ),
        ];
        for (name, help, value) in readings {
            let kind = prometheus_client::metrics::MetricType::Gauge;
            single(&mut encoder, name, help, kind, value)?;
        }
        Ok(())
    }
}
