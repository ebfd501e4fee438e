//! The breakers' metrics: each rule's state.

use super::{gauges, rule_labels};
use prometheus_client::encoding::DescriptorEncoder;
use spillway::breaker::BreakerState;
use std::fmt;

/// Writes every breaker's state.
pub(crate) fn encode(
    encoder: &mut DescriptorEncoder<'_>,
    spillway: &spillway::Spillway,
) -> Result<(), fmt::Error> {
    let breakers: Vec<_> = spillway
        .breaker_rules()
        .into_iter()
        .map(|rule| {
            let value = match spillway.breaker_state(&rule.id) {
                Some(BreakerState::Closed) | None => 0.0,
                Some(BreakerState::Open) => 1.0,
                Some(BreakerState::HalfOpen) => 2.0,
            };
            (rule_labels(&rule.id, &rule.resource), value)
        })
        .collect();
    gauges(
        encoder,
        "spillway_breaker_state",
        "Circuit breaker state: 0 closed, 1 open, 2 half-open",
        breakers,
    )
}
