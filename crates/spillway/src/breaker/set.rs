//! A loaded set of breaker rules: one breaker per rule, grouped by resource.

use super::circuit::{BreakerBlock, CircuitBreaker, Listeners};
use super::{validate_breaker_rules, BreakerRule, BreakerRuleError};
use std::collections::HashMap;
use std::sync::Arc;

/// The breakers of one resource, in rule order.
#[derive(Debug)]
pub(crate) struct ResourceBreakers {
    pub(crate) breakers: Vec<Arc<CircuitBreaker>>,
}

impl ResourceBreakers {
    /// Sentinel's `DegradeSlot` entry: every breaker must let the call pass; if one refuses, the
    /// probe places the earlier ones gave are given back (all or nothing). `Ok(true)` if the
    /// call is a probe of any breaker.
    pub(crate) fn try_pass(&self, now: u64) -> Result<bool, BreakerBlock> {
        let mut probe = false;
        for (index, breaker) in self.breakers.iter().enumerate() {
            match breaker.try_pass(now) {
                Ok(is_probe) => probe |= is_probe,
                Err(block) => {
                    if probe {
                        for earlier in &self.breakers[..index] {
                            earlier.release(now);
                        }
                    }
                    return Err(block);
                }
            }
        }
        Ok(probe)
    }

    /// Every breaker counts the completion of a call admitted at `admitted_at`, ended at
    /// `now`, with its RT (`None`: its caller paced it, and a slow-call breaker takes it as no
    /// verdict, giving back its probe place).
    pub(crate) fn on_complete(
        &self,
        admitted_at: u64,
        now: u64,
        rt_micros: Option<u64>,
        error: bool,
    ) {
        for breaker in &self.breakers {
            match rt_micros {
                Some(rt_micros) => breaker.on_complete(admitted_at, now, rt_micros, error),
                None if breaker.counts_time() => breaker.release(admitted_at),
                None => breaker.on_complete(admitted_at, now, 0, error),
            }
        }
    }

    /// Whether any of the breakers is half-open now.
    pub(crate) fn any_half_open(&self) -> bool {
        self.breakers
            .iter()
            .any(|breaker| breaker.state() == super::BreakerState::HalfOpen)
    }

    /// A call admitted at `admitted_at` answered at `now` (see
    /// [`CircuitBreaker::on_answer`](super::CircuitBreaker::on_answer)): each half-open breaker
    /// that can tell its probe's verdict now decides it; a call its caller `paced` so far is
    /// no verdict for a slow-call breaker, and gives its probe place back at once (as at its
    /// end): held to its end, a client that paced its upload, then read slowly, would keep the
    /// place until `probe_timeout`, whose running out reopens the breaker.
    pub(crate) fn on_answer(
        &self,
        admitted_at: u64,
        now: u64,
        rt_micros: u64,
        error: bool,
        paced: bool,
    ) {
        for breaker in &self.breakers {
            if paced && breaker.counts_time() {
                breaker.release(admitted_at);
            } else {
                breaker.on_answer(admitted_at, now, rt_micros, error);
            }
        }
    }

    /// A queued call admitted at `from` starts at `to`: its probe places follow it.
    pub(crate) fn rebase(&self, from: u64, to: u64) {
        for breaker in &self.breakers {
            breaker.rebase(from, to);
        }
    }

    /// A call admitted at `admitted_at` never ran: probe places go back.
    pub(crate) fn release(&self, admitted_at: u64) {
        for breaker in &self.breakers {
            breaker.release(admitted_at);
        }
    }
}

/// The rules as loaded, and their breakers per resource.
#[derive(Debug, Default)]
pub(crate) struct BreakerRuleSet {
    pub(crate) loaded: Vec<BreakerRule>,
    pub(crate) by_resource: HashMap<String, Arc<ResourceBreakers>>,
}

impl BreakerRuleSet {
    /// Validates `rules` and builds their breakers, keeping the breaker (and so its state and
    /// statistics) of every rule that `previous` holds unchanged.
    pub(crate) fn build(
        rules: Vec<BreakerRule>,
        previous: &BreakerRuleSet,
        listeners: &Arc<Listeners>,
    ) -> Result<Self, BreakerRuleError> {
        validate_breaker_rules(&rules)?;
        let kept: HashMap<&str, &Arc<CircuitBreaker>> = previous
            .by_resource
            .values()
            .flat_map(|r| &r.breakers)
            .map(|breaker| (breaker.rule().id.as_str(), breaker))
            .collect();
        let mut grouped: HashMap<String, Vec<Arc<CircuitBreaker>>> = HashMap::new();
        for rule in &rules {
            let breaker = match kept.get(rule.id.as_str()) {
                Some(old) if old.rule() == rule => Arc::clone(old),
                _ => Arc::new(CircuitBreaker::with_listeners(
                    rule.clone(),
                    Arc::clone(listeners),
                )),
            };
            grouped
                .entry(rule.resource.clone())
                .or_default()
                .push(breaker);
        }
        Ok(Self {
            loaded: rules,
            by_resource: grouped
                .into_iter()
                .map(|(resource, breakers)| (resource, Arc::new(ResourceBreakers { breakers })))
                .collect(),
        })
    }
}
