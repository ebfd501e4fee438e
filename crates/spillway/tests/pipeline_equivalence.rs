//! The entry path against the standalone controllers: random flow rule sets (every behaviour and
//! grade, by origin, `other` and chain, in shadow mode or not), random entries (origins,
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
use spillway::flow::{
    Behavior, Decision, FlowRule, LimitApp, QpsReject, Slot, Strategy as RuleStrategy, Throttle,
    WarmUp, WarmUpThrottle,
};
use spillway::stats::{NodeConfig, NodeStats, ResourceNode};
use spillway::{Admission, Clock, Entry, ManualClock, Spillway};
use std::collections::HashMap;
use std::time::Duration;

const RESOURCE: &str = "r";
const ORIGINS: [&str; 2] = ["a", "b"];
const ENTRANCES: [&str; 2] = ["e1", "e2"];

/// A rule as generated: which controller, for whom, on which node.
#[derive(Debug, Clone)]
struct RuleSpec {
    id: u8,
    kind: u8,
    count: u8,
    limit_app: u8,
    chain: bool,
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
            2 => FlowRule::qps(id, RESOURCE, count).with_behavior(Behavior::Throttle {
                max_queueing_time: Duration::from_millis(400),
            }),
            3 => FlowRule::qps(id, RESOURCE, count).with_behavior(Behavior::WarmUpThrottle {
                period: Duration::from_secs(2),
                cold_factor: 3,
                max_queueing_time: Duration::from_millis(400),
            }),
            _ => FlowRule::concurrency(id, RESOURCE, count),
        };
        let limit_app = match self.limit_app {
            0 => LimitApp::Default,
            1 => LimitApp::Other,
            _ => LimitApp::Origin(ORIGINS[0].to_owned()),
        };
        let rule = rule.with_limit_app(limit_app).with_shadow(self.shadow);
        if self.chain {
            rule.with_strategy(RuleStrategy::Chain {
                entrance: ENTRANCES[0].to_owned(),
            })
        } else {
            rule
        }
    }
}

fn rule_spec() -> impl proptest::strategy::Strategy<Value = RuleSpec> {
    (
        0u8..4,
        0u8..5,
        1u8..6,
        0u8..3,
        any::<bool>(),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(id, kind, count, limit_app, chain, shadow)| RuleSpec {
            id,
            kind,
            count,
            limit_app,
            chain,
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
        4 => prop_oneof![0u64..50, 50u64..700].prop_map(Op::Advance),
        1 => rule_set().prop_map(Op::Reload),
    ]
}

/// What a pipeline decided for one entry.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Admitted now or after `wait`, noting the shadow rule that would have refused it.
    Admitted {
        wait: Duration,
        shadow: Option<String>,
    },
    /// Refused by `rule`, which saw `observed` against `threshold`.
    Refused {
        rule: String,
        observed: f64,
        threshold: f64,
    },
}

/// A node of the reference: the resource's, an origin's or an entrance's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NodeKey {
    Resource,
    Origin(usize),
    Entrance(usize),
}

enum Controller {
    Reject(QpsReject),
    WarmUp(WarmUp),
    Throttle(Throttle),
    WarmUpThrottle(WarmUpThrottle),
    Concurrency,
}

struct RefRule {
    rule: FlowRule,
    controller: Controller,
}

impl RefRule {
    fn new(rule: FlowRule) -> Self {
        let count = rule.count;
        let controller = match (rule.grade, rule.behavior) {
            (spillway::flow::Grade::Concurrency, _) => Controller::Concurrency,
            (_, Behavior::Reject) => Controller::Reject(QpsReject::new(count)),
            (
                _,
                Behavior::WarmUp {
                    period,
                    cold_factor,
                },
            ) => Controller::WarmUp(WarmUp::new(count, period, cold_factor)),
            (_, Behavior::Throttle { max_queueing_time }) => {
                Controller::Throttle(Throttle::new(count, max_queueing_time))
            }
            (
                _,
                Behavior::WarmUpThrottle {
                    period,
                    cold_factor,
                    max_queueing_time,
                },
            ) => Controller::WarmUpThrottle(WarmUpThrottle::new(
                count,
                period,
                cold_factor,
                max_queueing_time,
            )),
        };
        Self { rule, controller }
    }
}

/// An admitted entry of the reference.
struct RefEntry {
    nodes: Vec<NodeKey>,
    places: Vec<NodeKey>,
    started: u64,
    count: u32,
}

/// Sentinel's slot chain, from the public controllers and nodes.
struct Reference {
    clock: ManualClock,
    rules: Vec<RefRule>,
    nodes: HashMap<NodeKey, ResourceNode>,
    places: HashMap<NodeKey, u64>,
    entries: Vec<RefEntry>,
}

impl Reference {
    fn new(clock: ManualClock) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(NodeKey::Resource, ResourceNode::new(NodeConfig::default()));
        Self {
            clock,
            rules: Vec::new(),
            nodes,
            places: HashMap::new(),
            entries: Vec::new(),
        }
    }

    /// Loads `rules`, keeping the state of every rule that stays unchanged, in Sentinel's order.
    fn load(&mut self, rules: &[FlowRule]) {
        let mut old: Vec<RefRule> = std::mem::take(&mut self.rules);
        let mut loaded: Vec<RefRule> = rules
            .iter()
            .map(
                |rule| match old.iter().position(|kept| kept.rule == *rule) {
                    Some(index) => old.swap_remove(index),
                    None => RefRule::new(rule.clone()),
                },
            )
            .collect();
        loaded.sort_by_key(|r| match r.rule.limit_app {
            LimitApp::Origin(_) => 0,
            LimitApp::Other => 1,
            LimitApp::Default => 2,
        });
        self.rules = loaded;
    }

    fn node(&self, key: NodeKey) -> &ResourceNode {
        &self.nodes[&key]
    }

    /// Sentinel's `selectNodeByRequesterAndStrategy`.
    fn select(
        &self,
        rule: &FlowRule,
        origin: Option<usize>,
        entrance: Option<usize>,
    ) -> Option<NodeKey> {
        let name = origin.map_or("", |o| ORIGINS[o]);
        let by_origin = match &rule.limit_app {
            LimitApp::Origin(named) => {
                if named != name {
                    return None;
                }
                true
            }
            LimitApp::Default => false,
            LimitApp::Other => {
                let named = self
                    .rules
                    .iter()
                    .any(|r| matches!(&r.rule.limit_app, LimitApp::Origin(o) if o == name));
                if name.is_empty() || named {
                    return None;
                }
                true
            }
        };
        match &rule.strategy {
            RuleStrategy::Chain { entrance: chained } => {
                let entrance = entrance?;
                (ENTRANCES[entrance] == chained).then_some(NodeKey::Entrance(entrance))
            }
            _ if by_origin => origin.map(NodeKey::Origin),
            _ => Some(NodeKey::Resource),
        }
    }

    fn enter(
        &mut self,
        origin: Option<usize>,
        entrance: Option<usize>,
        count: u32,
        prioritized: bool,
    ) -> Outcome {
        let now = self.clock.now_nanos();
        let mut nodes = vec![NodeKey::Resource];
        nodes.extend(origin.map(NodeKey::Origin));
        nodes.extend(entrance.map(NodeKey::Entrance));
        for key in &nodes {
            self.nodes
                .entry(*key)
                .or_insert_with(|| ResourceNode::new(NodeConfig::default()));
        }
        let mut places: Vec<NodeKey> = Vec::new();
        let mut slots: Vec<(usize, Slot)> = Vec::new();
        let mut wait = Duration::ZERO;
        let mut occupied = false;
        let mut shadow = None;
        let mut refusal = None;
        for (index, rule) in self.rules.iter().enumerate() {
            let Some(key) = self.select(&rule.rule, origin, entrance) else {
                continue;
            };
            let node = self.node(key);
            let limit = rule.rule.count;
            let shadowed = rule.rule.shadow;
            // (decision, observed) of this rule.
            let (decision, observed) = match &rule.controller {
                Controller::Reject(reject) => {
                    let observed = node.pass_qps(now) as i64 as f64;
                    let decision = if prioritized && !shadowed {
                        reject.check_prioritized(node, now, count, rule.rule.occupy_timeout)
                    } else {
                        reject.check(node, now, count)
                    };
                    (decision, observed)
                }
                Controller::WarmUp(warm_up) => (
                    warm_up.check(node, now, count),
                    node.pass_qps(now) as i64 as f64,
                ),
                Controller::Throttle(throttle) => {
                    let (decision, slot) = throttle.reserve(now, count);
                    slots.extend(slot.map(|slot| (index, slot)));
                    (decision, node.pass_qps(now))
                }
                Controller::WarmUpThrottle(throttle) => {
                    let (decision, slot) = throttle.reserve(node, now, count);
                    slots.extend(slot.map(|slot| (index, slot)));
                    (decision, node.pass_qps(now))
                }
                Controller::Concurrency if shadowed => {
                    let in_flight = node.concurrency().max(0) as u64;
                    let over = in_flight as f64 + f64::from(count) > limit;
                    let decision = if over {
                        Decision::Block
                    } else {
                        Decision::Pass
                    };
                    (decision, in_flight as f64)
                }
                Controller::Concurrency => {
                    let held = places.contains(&key);
                    let taken = self.places.get(&key).copied().unwrap_or(0);
                    let others = if held { taken - 1 } else { taken };
                    if others as f64 + f64::from(count) > limit {
                        (Decision::Block, others as f64)
                    } else {
                        if !held {
                            *self.places.entry(key).or_default() += 1;
                            places.push(key);
                        }
                        (Decision::Pass, 0.0)
                    }
                }
            };
            match decision {
                Decision::Pass => {}
                Decision::Wait(_) if shadowed => {}
                Decision::Wait(rule_wait) => wait = wait.max(rule_wait),
                Decision::Occupied(borrowed) => {
                    wait = borrowed;
                    occupied = true;
                    break;
                }
                Decision::Block if shadowed => {
                    shadow.get_or_insert_with(|| rule.rule.id.clone());
                }
                Decision::Block => {
                    // Warm-up refusals report the rate allowed now, not the count.
                    let threshold = match &rule.controller {
                        Controller::WarmUp(warm_up) => warm_up.allowed_qps(),
                        _ => limit,
                    };
                    refusal = Some(Outcome::Refused {
                        rule: rule.rule.id.clone(),
                        observed,
                        threshold,
                    });
                    break;
                }
            }
        }
        if let Some(refusal) = refusal {
            for key in places {
                *self.places.get_mut(&key).unwrap() -= 1;
            }
            for (index, slot) in slots {
                match &self.rules[index].controller {
                    Controller::Throttle(throttle) => throttle.give_back(slot),
                    Controller::WarmUpThrottle(throttle) => throttle.give_back(slot),
                    _ => unreachable!("only pacing rules take slots"),
                };
            }
            for key in &nodes {
                self.node(*key).add_block(now, u64::from(count));
            }
            return refusal;
        }
        for key in &nodes {
            let node = self.node(*key);
            if !occupied {
                node.add_pass(now, u64::from(count));
            }
            node.increase_concurrency();
        }
        self.entries.push(RefEntry {
            nodes,
            places,
            started: now,
            count,
        });
        Outcome::Admitted { wait, shadow }
    }

    fn exit(&mut self, index: usize) {
        let entry = self.entries.remove(index);
        let now = self.clock.now_nanos();
        let rt_micros = (now - entry.started) / 1_000;
        for key in &entry.nodes {
            let node = self.node(*key);
            node.add_completion(now, rt_micros, u64::from(entry.count), false);
            node.decrease_concurrency();
        }
        for key in entry.places {
            *self.places.get_mut(&key).unwrap() -= 1;
        }
    }

    fn stats(&self, key: NodeKey) -> Option<NodeStats> {
        let now = self.clock.now_nanos();
        self.nodes.get(&key).map(|node| node.stats(now))
    }
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
}

fn run(initial: Vec<RuleSpec>, ops: Vec<Op>) {
    let clock = ManualClock::starting_at_millis(support::T0_MS);
    let spillway = Spillway::new_with_clock(clock.clone());
    let mut reference = Reference::new(clock.clone());
    let mut entries: Vec<Entry<'_>> = Vec::new();
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
fn a_gate_rule_a_chain_rule_and_a_throttle_agree_on_a_fixed_trace() {
    let specs = vec![
        RuleSpec {
            id: 0,
            kind: 0,
            count: 3,
            limit_app: 0,
            chain: false,
            shadow: false,
        },
        RuleSpec {
            id: 1,
            kind: 2,
            count: 4,
            limit_app: 1,
            chain: false,
            shadow: false,
        },
        RuleSpec {
            id: 2,
            kind: 4,
            count: 2,
            limit_app: 0,
            chain: true,
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
        ops.push(Op::Advance(37));
    }
    run(specs, ops);
}
