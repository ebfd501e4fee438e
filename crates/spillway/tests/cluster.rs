//! Cluster rules in the decision pipeline, with a shared limit of this process's own (a budget of
//! passes): refusals that name the rule, all or nothing with the flow rules before them and the
//! breakers after them, reloads, and invalid rules.

use spillway::breaker::{BreakerRule, BreakerStrategy};
use spillway::cluster::{ClusterRule, SharedLimit, SharedRefusal};
use spillway::flow::FlowRule;
use spillway::{BlockKind, ManualClock, Spillway};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Passes this process holds; a refusal says how many it held, against `of`.
#[derive(Debug)]
struct Budget {
    left: AtomicI64,
    of: f64,
}

impl Budget {
    fn new(left: i64, of: f64) -> Arc<Self> {
        Arc::new(Self {
            left: AtomicI64::new(left),
            of,
        })
    }

    fn left(&self) -> i64 {
        self.left.load(Ordering::SeqCst)
    }
}

impl SharedLimit for Budget {
    fn try_take(&self, count: u32) -> Result<(), SharedRefusal> {
        let count = i64::from(count);
        let before = self.left.fetch_sub(count, Ordering::SeqCst);
        if before >= count {
            return Ok(());
        }
        self.left.fetch_add(count, Ordering::SeqCst);
        Err(SharedRefusal::new(before as f64, self.of).with_retry_after(Duration::from_millis(250)))
    }

    fn give_back(&self, count: u32) {
        self.left.fetch_add(i64::from(count), Ordering::SeqCst);
    }
}

/// A concurrency budget: passes held until the entry ends.
#[derive(Debug)]
struct Places(Arc<Budget>);

impl SharedLimit for Places {
    fn try_take(&self, count: u32) -> Result<(), SharedRefusal> {
        self.0.try_take(count)
    }

    fn give_back(&self, count: u32) {
        self.0.give_back(count);
    }

    fn held_until_exit(&self) -> bool {
        true
    }
}

fn spillway() -> Spillway {
    Spillway::new_with_clock(ManualClock::starting_at_millis(1_000_000))
}

#[test]
fn a_shared_limit_refuses_with_its_rule_its_reading_and_a_retry_hint() {
    let spillway = spillway();
    let budget = Budget::new(3, 100.0);
    spillway
        .load_cluster_rules(vec![ClusterRule::new("fleet", "api", budget.clone())])
        .unwrap();
    let admitted: Vec<_> = (0..3)
        .map(|_| spillway.entry("api").enter().unwrap())
        .collect();
    let err = spillway.entry("api").count(2).enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Cluster);
    assert_eq!(err.kind().as_str(), "cluster");
    assert_eq!(err.rule_id(), Some("fleet"));
    assert_eq!((err.observed(), err.threshold()), (0.0, 100.0));
    assert_eq!(err.retry_after(), Some(Duration::from_millis(250)));
    // Passes are used, not held: an exit gives nothing back.
    drop(admitted);
    assert_eq!(budget.left(), 0);
    let stats = spillway.resource("api").unwrap().stats();
    // A refusal of 2 counts 2 blocks, as Sentinel counts them.
    assert_eq!((stats.total_pass, stats.total_block), (3, 2));
    // Other resources are not limited.
    assert!(spillway.entry("other").enter().is_ok());
}

#[test]
fn every_cluster_rule_of_a_resource_passes_or_none_keeps_what_it_took() {
    let spillway = spillway();
    let (wide, narrow) = (Budget::new(10, 10.0), Budget::new(1, 1.0));
    spillway
        .load_cluster_rules(vec![
            ClusterRule::new("wide", "api", wide.clone()),
            ClusterRule::new("narrow", "api", narrow.clone()),
        ])
        .unwrap();
    let _first = spillway.entry("api").enter().unwrap();
    let err = spillway.entry("api").enter().unwrap_err();
    assert_eq!(err.rule_id(), Some("narrow"));
    // The wide rule's pass for the refused entry came back.
    assert_eq!((wide.left(), narrow.left()), (9, 0));
}

#[test]
fn a_flow_refusal_comes_first_and_a_breaker_refusal_gives_the_passes_back() {
    let spillway = spillway();
    let budget = Budget::new(100, 100.0);
    spillway
        .load_cluster_rules(vec![ClusterRule::new("fleet", "api", budget.clone())])
        .unwrap();
    spillway
        .load_flow_rules(vec![FlowRule::qps("local", "api", 2.0)])
        .unwrap();
    let _two: Vec<_> = (0..2)
        .map(|_| spillway.entry("api").enter().unwrap())
        .collect();
    // The local flow rule refuses before the cluster rule is asked.
    let err = spillway.entry("api").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Flow);
    assert_eq!(budget.left(), 98);

    // A breaker, open: the cluster rule took a pass, the breaker refused, the pass came back.
    spillway.load_flow_rules(Vec::new()).unwrap();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "errors",
            "api",
            BreakerStrategy::ErrorRatio { threshold: 0.5 },
            Duration::from_secs(10),
        )])
        .unwrap();
    for _ in 0..5 {
        spillway.entry("api").enter().unwrap().mark_error();
    }
    assert_eq!(budget.left(), 93);
    let err = spillway.entry("api").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Breaker);
    assert_eq!(budget.left(), 93);
}

#[test]
fn reloads_replace_the_rules_for_resources_old_and_new() {
    let spillway = spillway();
    let _ = spillway.entry("old").enter().unwrap();
    let empty = Budget::new(0, 1.0);
    spillway
        .load_cluster_rules(vec![
            ClusterRule::new("a", "old", empty.clone()),
            ClusterRule::new("b", "new", empty.clone()),
        ])
        .unwrap();
    assert_eq!(
        spillway.entry("old").enter().unwrap_err().rule_id(),
        Some("a")
    );
    assert_eq!(
        spillway.entry("new").enter().unwrap_err().rule_id(),
        Some("b")
    );
    assert_eq!(spillway.cluster_rules().len(), 2);
    // A bad set changes nothing.
    let bad = vec![ClusterRule::new("", "old", empty.clone())];
    assert!(spillway.load_cluster_rules(bad).is_err());
    assert_eq!(spillway.cluster_rules().len(), 2);
    spillway.load_cluster_rules(Vec::new()).unwrap();
    assert!(spillway.entry("old").enter().is_ok());
    assert!(spillway.entry("new").enter().is_ok());
}

#[test]
fn invalid_cluster_rules_are_refused_naming_the_rule_and_field() {
    let budget: Arc<dyn SharedLimit> = Budget::new(1, 1.0);
    let rule = |id: &str, resource: &str| ClusterRule::new(id, resource, budget.clone());
    let cases = [
        (vec![rule("", "api")], 0, "id"),
        (vec![rule("a", "api"), rule("a", "other")], 1, "id"),
        (vec![rule("a", "")], 0, "resource"),
        (
            (0..9)
                .map(|n| rule(&format!("r{n}"), "api"))
                .collect::<Vec<_>>(),
            8,
            "resource",
        ),
    ];
    for (rules, index, field) in cases {
        let err = spillway().load_cluster_rules(rules).unwrap_err();
        assert_eq!(
            (err.kind(), err.index(), err.field()),
            ("cluster", index, field),
            "{err}"
        );
    }
}

#[test]
fn a_concurrency_limit_gets_its_passes_back_when_the_entry_ends() {
    let spillway = spillway();
    let places = Budget::new(2, 2.0);
    let rate = Budget::new(100, 100.0);
    spillway
        .load_cluster_rules(vec![
            ClusterRule::new("fleet-rate", "db", rate.clone()),
            ClusterRule::new("fleet-places", "db", Arc::new(Places(places.clone()))),
        ])
        .unwrap();
    let a = spillway.entry("db").enter().unwrap();
    let b = spillway.entry("db").enter_owned().unwrap();
    let err = spillway.entry("db").enter().unwrap_err();
    assert_eq!(err.rule_id(), Some("fleet-places"));
    assert_eq!((places.left(), rate.left()), (0, 98));
    // An ended entry gives its place back (a borrowed guard and an owned one), not its rate.
    drop(a);
    assert_eq!((places.left(), rate.left()), (1, 98));
    b.exit();
    assert_eq!((places.left(), rate.left()), (2, 98));
    // Counted by two: two places, held until the end.
    let two = spillway.entry("db").count(2).enter().unwrap();
    assert_eq!(places.left(), 0);
    assert!(spillway.entry("db").enter().is_err());
    drop(two);
    assert_eq!((places.left(), rate.left()), (2, 96));
}

#[test]
fn a_concurrency_limits_place_goes_back_when_a_breaker_refuses() {
    let spillway = spillway();
    let places = Budget::new(1, 1.0);
    spillway
        .load_cluster_rules(vec![ClusterRule::new(
            "fleet-places",
            "db",
            Arc::new(Places(places.clone())),
        )])
        .unwrap();
    spillway
        .load_breaker_rules(vec![BreakerRule::new(
            "db-errors",
            "db",
            BreakerStrategy::ErrorRatio { threshold: 0.5 },
            Duration::from_secs(10),
        )])
        .unwrap();
    // Errors open the breaker; the next entry takes the place, is refused by the breaker, and
    // gives the place back.
    for _ in 0..5 {
        spillway.entry("db").enter().unwrap().mark_error();
    }
    assert_eq!(places.left(), 1);
    let err = spillway.entry("db").enter().unwrap_err();
    assert_eq!(err.kind(), BlockKind::Breaker);
    assert_eq!(places.left(), 1);
}
