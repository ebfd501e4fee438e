//! The reference pipeline: Sentinel's slot chain for flow rules, written from spillway's public
//! standalone controllers and nodes, with none of the entry path's own machinery (no gate, no
//! admission rings, no exact in-flight counters of its own beyond Sentinel's reads).

use spillway::flow::{
    Behavior, Decision, FlowRule, Grade, LimitApp, QpsReject, Slot, Strategy as RuleStrategy,
    Throttle, WarmUp, WarmUpThrottle,
};
use spillway::stats::{NodeConfig, NodeStats, ResourceNode};
use spillway::{Clock, ManualClock};
use std::collections::HashMap;
use std::time::Duration;

pub(crate) const RESOURCE: &str = "r";
pub(crate) const ORIGINS: [&str; 2] = ["a", "b"];
pub(crate) const ENTRANCES: [&str; 2] = ["e1", "e2"];
/// The resource `relate` rules read.
pub(crate) const RELATED: &str = "other";

/// What a pipeline decided for one entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
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
pub(crate) enum NodeKey {
    Resource,
    Origin(usize),
    Entrance(usize),
    /// The node of [`RELATED`].
    Related,
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
            (Grade::Concurrency, _) => Controller::Concurrency,
            (_, Behavior::Reject) => Controller::Reject(QpsReject::new(count)),
            (
                _,
                Behavior::WarmUp {
                    period,
                    cold_factor,
                },
            ) => Controller::WarmUp(WarmUp::new(count, period, cold_factor)),
            (
                _,
                Behavior::Throttle {
                    max_queueing_time,
                    stat_duration,
                },
            ) => {
                let stat = u32::try_from(stat_duration.as_millis()).expect("a validated rule");
                let stat = std::num::NonZeroU32::new(stat).expect("a validated rule");
                Controller::Throttle(Throttle::per(count, stat, max_queueing_time))
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
pub(crate) struct Reference {
    clock: ManualClock,
    rules: Vec<RefRule>,
    nodes: HashMap<NodeKey, ResourceNode>,
    places: HashMap<NodeKey, u64>,
    entries: Vec<RefEntry>,
    /// When each entry into [`RELATED`] in flight started.
    related: Vec<u64>,
}

impl Reference {
    pub(crate) fn new(clock: ManualClock) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(NodeKey::Resource, ResourceNode::new(NodeConfig::default()));
        nodes.insert(NodeKey::Related, ResourceNode::new(NodeConfig::default()));
        Self {
            clock,
            rules: Vec::new(),
            nodes,
            places: HashMap::new(),
            entries: Vec::new(),
            related: Vec::new(),
        }
    }

    /// Loads `rules`, keeping the state of every rule that stays unchanged, in Sentinel's order.
    pub(crate) fn load(&mut self, rules: &[FlowRule]) {
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
            RuleStrategy::Relate { .. } => Some(NodeKey::Related),
            RuleStrategy::Chain { entrance: chained } => {
                let entrance = entrance?;
                (ENTRANCES[entrance] == chained).then_some(NodeKey::Entrance(entrance))
            }
            _ if by_origin => origin.map(NodeKey::Origin),
            _ => Some(NodeKey::Resource),
        }
    }

    pub(crate) fn enter(
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
                // Another resource's concurrency is read, never counted, and so is a shadow
                // rule's.
                Controller::Concurrency if shadowed || key == NodeKey::Related => {
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
                    // Warm-up refusals report the rate allowed (or paced at) now, not the
                    // count.
                    let threshold = match &rule.controller {
                        Controller::WarmUp(warm_up) => warm_up.allowed_qps(),
                        Controller::WarmUpThrottle(throttle) => throttle.allowed_qps(),
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

    pub(crate) fn exit(&mut self, index: usize) {
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

    /// An entry into [`RELATED`], which has no rules: admitted, counted on its node.
    pub(crate) fn enter_related(&mut self) {
        let now = self.clock.now_nanos();
        let node = self.node(NodeKey::Related);
        node.add_pass(now, 1);
        node.increase_concurrency();
        self.related.push(now);
    }

    pub(crate) fn exit_related(&mut self, index: usize) {
        let started = self.related.remove(index);
        let now = self.clock.now_nanos();
        let node = self.node(NodeKey::Related);
        node.add_completion(now, (now - started) / 1_000, 1, false);
        node.decrease_concurrency();
    }

    pub(crate) fn stats(&self, key: NodeKey) -> Option<NodeStats> {
        let now = self.clock.now_nanos();
        self.nodes.get(&key).map(|node| node.stats(now))
    }
}
