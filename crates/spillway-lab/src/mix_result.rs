//! What each group of a run's requests that claim something (a class, a tenant) got, as both
//! labs measure it.

use crate::mix::{group_name, Claim, Mix};
use crate::params::LabParams;
use crate::record::{nanos, quantile, AttemptRecord, Outcome};
use crate::scenario::Scenario;
use serde::Serialize;

/// One attempt of a request that claims something, as a lab saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimedAttempt {
    /// The attempt.
    pub record: AttemptRecord,
    /// Its request's number (one per request, whatever its attempts).
    pub request: usize,
    /// What its request claims.
    pub claim: Claim,
}

/// Each group of `mix` (in [`Mix::shares`]' order): over the requests whose first attempt was
/// sent in `scenario`'s measured interval, those answered in time on any attempt, and the
/// latency of their admitted attempts (one unfinished at `end` with its age then). `attempts`
/// in the order they were sent (a request's first before its retries); times in ns from the
/// start of the run.
pub fn group_results(
    mix: Mix,
    params: &LabParams,
    scenario: Scenario,
    attempts: &[ClaimedAttempt],
    end: u64,
) -> Vec<GroupResult> {
    let from = nanos(scenario.measure_from(params));
    let until = nanos(scenario.arrivals_end(params));
    let names: Vec<String> = mix.shares().into_iter().map(|(name, _)| name).collect();
    let mut offered = vec![0_u64; names.len()];
    let mut answered = vec![0_u64; names.len()];
    let mut latencies = vec![Vec::new(); names.len()];
    let requests = attempts.iter().map(|a| a.request + 1).max().unwrap_or(0);
    let (mut counted, mut done) = (vec![false; requests], vec![false; requests]);
    for attempt in attempts {
        let name = group_name(mix, attempt.claim);
        let Some(group) = names.iter().position(|n| *n == name) else {
            continue;
        };
        let (record, request) = (attempt.record, attempt.request);
        if record.first {
            counted[request] = (from..until).contains(&record.sent);
            offered[group] += u64::from(counted[request]);
        }
        if !counted[request] {
            continue;
        }
        if record.outcome == Some(Outcome::Answered) && !done[request] {
            done[request] = true;
            answered[group] += 1;
        }
        if record.admitted {
            latencies[group].push(record.ended.unwrap_or(end).saturating_sub(record.sent));
        }
    }
    let seconds = until.saturating_sub(from) as f64 / 1e9;
    names
        .into_iter()
        .enumerate()
        .map(|(g, name)| {
            latencies[g].sort_unstable();
            GroupResult {
                group: name,
                offered: offered[g],
                offered_load: offered[g] as f64
                    / seconds.max(f64::MIN_POSITIVE)
                    / params.capacity(),
                answered: answered[g],
                served: answered[g] as f64 / offered[g].max(1) as f64,
                goodput: answered[g] as f64 / seconds.max(f64::MIN_POSITIVE) / params.capacity(),
                p99_ms: quantile(&latencies[g], 0.99) as f64 / 1e6,
            }
        })
        .collect()
}

/// What one group of a run's requests (a class, or a tenant) got.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupResult {
    /// Its name: a criticality, or a tenant.
    pub group: String,
    /// Requests it sent (first attempts in the measured interval).
    pub offered: u64,
    /// Those requests a second, as a fraction of the service's capacity.
    pub offered_load: f64,
    /// Of those, the requests answered within their client's timeout, on any attempt.
    pub answered: u64,
    /// `answered / offered`.
    pub served: f64,
    /// Its answered requests a second, as a fraction of the service's capacity.
    pub goodput: f64,
    /// The p99 latency of its admitted attempts, in ms.
    pub p99_ms: f64,
}

/// One run of a scenario whose requests claim something.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixResult {
    /// The run, all groups together.
    pub run: crate::RunResult,
    /// Each group, in [`Mix::shares`]' order.
    pub groups: Vec<GroupResult>,
    /// Attempts whose work started after their client had given up (their deadline passed):
    /// work wasted.
    pub wasted: u64,
    /// The adaptive limit's baseline RTT as the run ends, in ms: what Envoy's controller
    /// measured as its minRTT, which sets where its limit settles (`None`: the strategy has no
    /// adaptive limit, or the loopback lab, which does not read it).
    pub baseline_rtt_ms: Option<f64>,
}
