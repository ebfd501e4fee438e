//! The entry path against the standalone controllers: random flow rule sets (every behaviour and
//! grade, by origin, `other`, chain and relate, in shadow mode or not), random entries (origins,
//! entrances, batches, prioritized), exits, clock moves and reloads go through a [`Spillway`] and
//! through a reference pipeline written here from the public controllers ([`QpsReject`],
//! [`WarmUp`], [`Throttle`], [`WarmUpThrottle`]) and public [`ResourceNode`]s, in Sentinel's
//! slot order, on one manual clock. Both must make the same decisions, with the same waits and
//! the same refusing rule, and leave the same statistics on every node.
//!
//! The entry path counts a QPS reject rule's admissions on a ring of its own, checks the rules a
//! gate holds on a short path and keeps concurrency places on exact counters; the reference
//! reads the nodes, as Sentinel does. On one thread, entering a queued entry at once, these
//! agree: this test is the proof.

mod support;

use proptest::prelude::*;
use spillway::flow::{Behavior, FlowRule, LimitApp, Strategy as RuleStrategy};
use spillway::{Admission, Entry, ManualClock, Spillway};
use std::time::Duration;

#[path = "pipeline_equivalence/reference.rs"]
mod reference;

use reference::{NodeKey, Outcome, Reference, ENTRANCES, ORIGINS, RELATED, RESOURCE};

/// A rule as generated: which controller, for whom, on which node.
#[derive(Debug, Clone)]
struct RuleSpec {
    id: u8,
    kind: u8,
    count: u8,
    limit_app: u8,
    /// 0 direct, 1 chain (entrance `e1`), 2 relate (resource `other`).
    strategy: u8,
    shadow: bool,
}

impl RuleSpec {
    fn rule(&self) -> FlowRule {
        let id = format!("rule-{}", self.id);
        let count = f64::from(self.count);
        let rule = match self.kind {
            0 => FlowRule::qps(id, RESOURCE, count),
            1 => FlowRule::qps(id, RESOURCE, count).with_behavior(Behavior::WarmUp {
                period: Duration::from_secs(2),
                cold_factor: 3,
            }),
            // Per second or per 500 ms: both of Sentinel's pacings, by the count.
            2 => FlowRule::qps(id, RESOURCE, count).with_behavior(Behavior::Throttle {
                max_queueing_time: Duration::from_millis(400),
                stat_duration: Duration::from_millis(if self.count % 2 == 0 { 500 } else { 1_000 }),
            }),
            3 => FlowRule::qps(id, RESOURCE, count).with_behavior(Behavior::WarmUpThrottle {
                period: Duration::from_secs(2),
                cold_factor: 3,
                max_queueing_time: Duration::from_millis(400),
            }),
            _ => FlowRule::in_flight(RESOURCE, u32::from(self.count)).with_id(id),
        };
        let limit_app = match self.limit_app {
            0 => LimitApp::Default,
            1 => LimitApp::Other,
            _ => LimitApp::Origin(ORIGINS[0].to_owned()),
        };
        let rule = rule.with_limit_app(limit_app).with_shadow(self.shadow);
        match self.strategy {
            1 => rule.with_strategy(RuleStrategy::Chain {
                entrance: ENTRANCES[0].to_owned(),
            }),
            2 => rule.with_strategy(RuleStrategy::Relate {
                ref_resource: RELATED.to_owned(),
            }),
            _ => rule,
        }
    }
}

fn rule_spec() -> impl proptest::strategy::Strategy<Value = RuleSpec> {
    (
        0u8..4,
        0u8..5,
        1u8..6,
        0u8..3,
        0u8..3,
        prop::bool::weighted(0.25),
    )
        .prop_map(|(id, kind, count, limit_app, strategy, shadow)| RuleSpec {
            id,
            kind,
            count,
            limit_app,
            strategy,
            shadow,
        })
}

/// Rule sets with distinct ids.
fn rule_set() -> impl proptest::strategy::Strategy<Value = Vec<RuleSpec>> {
    prop::collection::vec(rule_spec(), 0..4).prop_map(|mut specs| {
        specs.sort_by_key(|spec| spec.id);
        specs.dedup_by_key(|spec| spec.id);
        specs
    })
}

#[derive(Debug, Clone)]
enum Op {
    Enter {
        origin: Option<usize>,
        entrance: Option<usize>,
        count: u32,
        prioritized: bool,
    },
    Exit(usize),
    /// An entry into the resource `relate` rules read, which has no rules of its own.
    EnterRelated,
    ExitRelated(usize),
    Advance(u64),
    Reload(Vec<RuleSpec>),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        8 => (
            prop::option::of(0usize..2),
            prop::option::of(0usize..2),
            1u32..3,
            prop::bool::weighted(0.2),
        )
            .prop_map(|(origin, entrance, count, prioritized)| Op::Enter {
                origin,
                entrance,
                count,
                prioritized,
            }),
        3 => (0usize..8).prop_map(Op::Exit),
        2 => Just(Op::EnterRelated),
        1 => (0usize..4).prop_map(Op::ExitRelated),
        4 => prop_oneof![0u64..50, 50u64..700].prop_map(Op::Advance),
        1 => rule_set().prop_map(Op::Reload),
    ]
}

/// The same through a `Spillway`.
fn enter_spillway<'a>(
    spillway: &'a Spillway,
    origin: Option<usize>,
    entrance: Option<usize>,
    count: u32,
    prioritized: bool,
) -> (Outcome, Option<Entry<'a>>) {
    let mut builder = spillway.entry(RESOURCE).count(count);
    if let Some(origin) = origin {
        builder = builder.origin(ORIGINS[origin]);
    }
    if let Some(entrance) = entrance {
        builder = builder.entrance(ENTRANCES[entrance]);
    }
    if prioritized {
        builder = builder.prioritized();
    }
    let (entry, wait) = match builder.try_enter() {
        Ok(Admission::Ready(entry)) => (entry, Duration::ZERO),
        // Entered at once, on the same clock reading, as the reference does.
        Ok(Admission::Queued(pending)) => {
            let wait = pending.wait();
            (pending.enter(), wait)
        }
        Ok(Admission::Waiting(_)) => unreachable!("no adaptive rule here, so no queue for one"),
        Err(err) => {
            let outcome = Outcome::Refused {
                rule: err.rule_id().unwrap_or("?").to_owned(),
                observed: err.observed(),
                threshold: err.threshold(),
            };
            return (outcome, None);
        }
    };
    let shadow = entry.shadow_rule().map(str::to_owned);
    (Outcome::Admitted { wait, shadow }, Some(entry))
}

fn check_stats(spillway: &Spillway, reference: &Reference, step: usize) {
    let resource = spillway.resource(RESOURCE).unwrap();
    assert_eq!(
        Some(resource.stats()),
        reference.stats(NodeKey::Resource),
        "resource node after step {step}"
    );
    for (index, origin) in ORIGINS.iter().enumerate() {
        assert_eq!(
            resource.origin_stats(origin),
            reference.stats(NodeKey::Origin(index)),
            "origin {origin} after step {step}"
        );
    }
    for (index, entrance) in ENTRANCES.iter().enumerate() {
        assert_eq!(
            resource.entrance_stats(entrance),
            reference.stats(NodeKey::Entrance(index)),
            "entrance {entrance} after step {step}"
        );
    }
    assert_eq!(
        Some(spillway.resource(RELATED).unwrap().stats()),
        reference.stats(NodeKey::Related),
        "related resource after step {step}"
    );
}

fn run(initial: Vec<RuleSpec>, ops: Vec<Op>) {
    let clock = ManualClock::starting_at_millis(support::T0_MS);
    let spillway = Spillway::new_with_clock(clock.clone());
    let mut reference = Reference::new(clock.clone());
    let mut entries: Vec<Entry<'_>> = Vec::new();
    let mut related: Vec<Entry<'_>> = Vec::new();
    let load = |specs: &[RuleSpec], reference: &mut Reference| {
        let rules: Vec<FlowRule> = specs.iter().map(RuleSpec::rule).collect();
        spillway.load_flow_rules(rules.clone()).unwrap();
        reference.load(&rules);
    };
    load(&initial, &mut reference);
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Enter {
                origin,
                entrance,
                count,
                prioritized,
            } => {
                let expected = reference.enter(origin, entrance, count, prioritized);
                let (outcome, entry) =
                    enter_spillway(&spillway, origin, entrance, count, prioritized);
                assert_eq!(outcome, expected, "entry at step {step}");
                entries.extend(entry);
            }
            Op::Exit(index) if index < entries.len() => {
                drop(entries.remove(index));
                reference.exit(index);
            }
            Op::Exit(_) => {}
            Op::EnterRelated => {
                reference.enter_related();
                related.push(spillway.entry(RELATED).enter().unwrap());
            }
            Op::ExitRelated(index) if index < related.len() => {
                drop(related.remove(index));
                reference.exit_related(index);
            }
            Op::ExitRelated(_) => {}
            Op::Advance(millis) => clock.advance_millis(millis),
            Op::Reload(specs) => load(&specs, &mut reference),
        }
        check_stats(&spillway, &reference, step);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_entry_path_decides_as_the_standalone_controllers(
        initial in rule_set(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run(initial, ops);
    }
}

#[test]
fn a_gate_rule_a_chain_rule_a_relate_rule_and_a_throttle_agree_on_a_fixed_trace() {
    let specs = vec![
        RuleSpec {
            id: 0,
            kind: 0,
            count: 3,
            limit_app: 0,
            strategy: 0,
            shadow: false,
        },
        RuleSpec {
            id: 1,
            kind: 2,
            count: 4,
            limit_app: 1,
            strategy: 0,
            shadow: false,
        },
        RuleSpec {
            id: 2,
            kind: 4,
            count: 2,
            limit_app: 0,
            strategy: 1,
            shadow: false,
        },
        RuleSpec {
            id: 3,
            kind: 4,
            count: 2,
            limit_app: 0,
            strategy: 2,
            shadow: false,
        },
    ];
    let mut ops = Vec::new();
    for round in 0..30usize {
        ops.push(Op::Enter {
            origin: (round % 3 != 0).then_some(round % 2),
            entrance: (round % 4 != 0).then_some(round % 2),
            count: 1,
            prioritized: round % 5 == 0,
        });
        if round % 3 == 2 {
            ops.push(Op::Exit(0));
        }
        if round % 7 == 3 {
            ops.push(Op::EnterRelated);
        }
        if round % 7 == 6 {
            ops.push(Op::ExitRelated(0));
        }
        ops.push(Op::Advance(37));
    }
    run(specs, ops);
}
