//! What became of the requests of each criticality: admitted (and how long spillway held them
//! first), shed by a limit, or dropped for their deadline. Counted for requests that carry a
//! claim (a `[criticality]`, `[tenant]` or `[deadline]` section, or a route's `criticality` or
//! `deadline`, is configured).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use spillway::Criticality;
use std::time::Duration;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    criticality: &'static str,
    /// `admitted`, `shed` or `deadline`.
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    criticality: &'static str,
}

/// One criticality's series.
#[derive(Debug, Clone)]
struct Class {
    admitted: Counter,
    shed: Counter,
    deadline: Counter,
    wait: Histogram,
    /// The seconds its admitted requests were held, for the status's mean.
    waited: Counter<f64>,
}

/// Each criticality's series, made at start (at 0) so that a dashboard sees every class.
#[derive(Debug)]
pub(crate) struct ClassMetrics {
    classes: [Class; 4],
}

/// One criticality's counts, for `/api/status`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClassCounts {
    pub(crate) admitted: u64,
    pub(crate) shed: u64,
    pub(crate) deadline: u64,
    /// The mean time its admitted requests were held before they were forwarded (`None`:
    /// none admitted yet).
    pub(crate) mean_wait: Option<Duration>,
}

impl ClassMetrics {
    /// The series, registered in `registry`.
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        // 100 µs to about 13 s, doubling: most requests wait for nothing.
        let waits = Family::<ClassLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.000_1, 2.0, 18))) as fn() -> Histogram,
        );
        let waited = Family::<ClassLabel, Counter<f64>>::default();
        registry.register(
            "spillway_criticality_requests",
            "Requests that carry a claim, by criticality and outcome: admitted, shed (refused \
             by a limit) or deadline (refused for their deadline, waiting or before forwarding)",
            outcomes.clone(),
        );
        registry.register(
            "spillway_criticality_wait_seconds",
            "Time from an admitted request's arrival to its forwarding (waits in limits' \
             queues), by criticality",
            waits.clone(),
        );
        let classes = Criticality::ALL.map(|class| {
            let name = class.as_str();
            let outcome = |outcome| {
                let labels = OutcomeLabels {
                    criticality: name,
                    outcome,
                };
                outcomes.get_or_create(&labels).clone()
            };
            let label = ClassLabel { criticality: name };
            Class {
                admitted: outcome("admitted"),
                shed: outcome("shed"),
                deadline: outcome("deadline"),
                wait: waits.get_or_create(&label).clone(),
                waited: waited.get_or_create(&label).clone(),
            }
        });
        Self { classes }
    }

    fn class(&self, class: Criticality) -> &Class {
        &self.classes[class.rank()]
    }

    /// A request of `class` admitted after being held `waited`.
    pub(crate) fn admitted(&self, class: Criticality, waited: Duration) {
        let series = self.class(class);
        series.admitted.inc();
        series.wait.observe(waited.as_secs_f64());
        series.waited.inc_by(waited.as_secs_f64());
    }

    /// A request of `class` refused: for its deadline, or shed by a limit.
    pub(crate) fn refused(&self, class: Criticality, for_deadline: bool) {
        let series = self.class(class);
        if for_deadline {
            &series.deadline
        } else {
            &series.shed
        }
        .inc();
    }

    /// Each criticality's counts, lowest first.
    pub(crate) fn counts(&self) -> [(Criticality, ClassCounts); 4] {
        Criticality::ALL.map(|class| {
            let series = self.class(class);
            let admitted = series.admitted.get();
            let mean = (admitted > 0).then(|| series.waited.get() / admitted as f64);
            (
                class,
                ClassCounts {
                    admitted,
                    shed: series.shed.get(),
                    deadline: series.deadline.get(),
                    mean_wait: mean.and_then(|secs| Duration::try_from_secs_f64(secs).ok()),
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_counts_its_own_and_every_class_is_exposed() {
        let mut registry = Registry::default();
        let metrics = ClassMetrics::new(&mut registry);
        metrics.admitted(Criticality::Sheddable, Duration::from_millis(10));
        metrics.admitted(Criticality::Sheddable, Duration::from_millis(30));
        metrics.refused(Criticality::Sheddable, false);
        metrics.refused(Criticality::CriticalPlus, true);
        let counts = metrics.counts();
        assert_eq!(counts[0].1.admitted, 2);
        assert_eq!(counts[0].1.shed, 1);
        let mean = counts[0].1.mean_wait.unwrap().as_secs_f64();
        assert!((mean - 0.020).abs() < 1e-9, "{mean}");
        assert_eq!(counts[3].1.deadline, 1);
        assert_eq!(counts[2].1.mean_wait, None);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(
            "spillway_criticality_requests_total{criticality=\"sheddable\",outcome=\"shed\"} 1"
        ));
        assert!(text.contains(
            "spillway_criticality_requests_total{criticality=\"critical\",outcome=\"admitted\"} 0"
        ));
        assert!(
            text.contains("spillway_criticality_wait_seconds_count{criticality=\"sheddable\"} 2")
        );
    }
}
