//! `spillway lab --long-run`: the long run alone, for each strategy on one service: from a cold
//! start, 0.5x, 0.7x and 0.9x of capacity for 60 s each (crossing a minRTT re-measurement),
//! and the attempts refused there, in each 10 s. Below capacity a protection should refuse
//! nothing, at start-up or later. Simulated; with `--loopback`, through the real proxy on
//! loopback beside its simulated twin (the same strategy and arrivals at the capacity
//! measured), about 3 minutes a strategy.

use super::loopback::{on_measured_service, run_point, LoopbackParams};
use super::one_service::OneService;
use serde::Serialize;
use spillway_lab::{simulate, LabError, LabParams, RunResult, Scenario, Strategy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What one strategy refused in the long run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusals {
    /// Attempts sent.
    pub attempts: u64,
    /// Attempts refused.
    pub refused: u64,
    /// Attempts refused in each 10 s, from the start.
    pub refused_by_10s: Vec<u64>,
    /// Attempts whose client gave up waiting (admitted or queued, not answered within its
    /// timeout): what a service that lets requests wait too long costs instead of refusals.
    pub timed_out: u64,
}

impl Refusals {
    fn of(run: &RunResult) -> Self {
        Self {
            attempts: run.counts.attempts,
            refused: run.counts.refused,
            refused_by_10s: run.refused_by_10s.clone(),
            timed_out: run.counts.timed_out,
        }
    }

    /// `first + after of attempts`, as the tables have it.
    fn text(&self) -> String {
        let first = self.refused_by_10s.first().copied().unwrap_or(0);
        format!(
            "{first} + {} of {}",
            self.refused.saturating_sub(first),
            self.attempts
        )
    }
}

/// The long run of several strategies on one service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LongRunReport {
    /// The service, and where it ran.
    #[serde(flatten)]
    pub on: OneService,
    /// A row per strategy.
    pub rows: Vec<LongRunRow>,
}

/// One strategy's long run: simulated, and through the real proxy when run on loopback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LongRunRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// Through the real proxy on loopback, if run there.
    pub loopback: Option<Refusals>,
    /// Simulated (on loopback: the twin, at the measured capacity).
    pub simulated: Refusals,
}

/// The long run of each of `strategies` on the simulated service of `params`.
///
/// # Errors
///
/// A [`LabError`] if a parameter cannot be simulated.
pub fn simulated(params: &LabParams, strategies: &[Strategy]) -> Result<LongRunReport, LabError> {
    let rows = strategies
        .iter()
        .map(|&strategy| {
            let run = simulate(params, Scenario::LongRun, strategy)?;
            Ok(LongRunRow {
                strategy: strategy.name(),
                loopback: None,
                simulated: Refusals::of(&run),
            })
        })
        .collect::<Result<_, LabError>>()?;
    Ok(LongRunReport {
        on: OneService::of(params, false, params.capacity()),
        rows,
    })
}

/// The long run of each of `strategies` through the real proxy, in front of an upstream of the
/// shape of `params` (its workers and service time) whose capacity is measured first, with the
/// clients of `base`; each beside its simulated twin.
///
/// # Errors
///
/// A strategy the binary cannot express (the static split), a loopback port that cannot be
/// bound, a configuration refused, or a parameter that cannot be simulated.
pub async fn loopback(
    params: &LabParams,
    base: &LoopbackParams,
    strategies: &[Strategy],
) -> Result<LongRunReport, BoxError> {
    let loopback = on_measured_service(params, base, strategies).await?;
    eprintln!(
        "long run on loopback: {:.0} requests/s measured ({:.0} nominal), about {} minutes",
        loopback.capacity(),
        loopback.upstream.capacity(),
        3 * strategies.len()
    );
    let twin = loopback.twin(params);
    let mut rows = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let real = run_point(&loopback, strategy, Scenario::LongRun).await?;
        let simulated = simulate(&twin, Scenario::LongRun, strategy)?;
        let row = LongRunRow {
            strategy: strategy.name(),
            loopback: Some(Refusals::of(&real)),
            simulated: Refusals::of(&simulated),
        };
        eprintln!(
            "long run on loopback: {strategy}: {} refused (simulated {})",
            row.loopback.as_ref().map_or(0, |r| r.refused),
            row.simulated.refused
        );
        rows.push(row);
    }
    Ok(LongRunReport {
        on: OneService::of(params, true, loopback.capacity()),
        rows,
    })
}

impl LongRunReport {
    /// A line on the service and the run, then the [`table`].
    pub fn markdown(&self) -> String {
        format!(
            "Long run, {} 0.5x, 0.7x and 0.9x of capacity for 60 s each from a cold start; \
             attempts refused in the first 10 s + after, of those sent, and in each 10 s (the \
             target: none), and attempts whose client gave up waiting (timed out).\n\n{}",
            self.on.describe(),
            table(&self.rows)
        )
    }
}

/// The rows as a Markdown table: each strategy's attempts refused in the first 10 s + after,
/// of those sent, and in each 10 s; through the real proxy beside the simulation when the rows
/// have both.
pub fn table(rows: &[LongRunRow]) -> String {
    let on_loopback = rows.iter().any(|row| row.loopback.is_some());
    let by_10s = |refusals: &Refusals| {
        refusals
            .refused_by_10s
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = String::new();
    if on_loopback {
        out.push_str(
            "| strategy | loopback: refused (first 10 s + after) | loopback: in each 10 s | \
             loopback: timed out | simulated: refused (first 10 s + after) | simulated: in \
             each 10 s | simulated: timed out |\n|---|---:|---|---:|---:|---|---:|\n",
        );
    } else {
        out.push_str(
            "| strategy | refused (first 10 s + after) | in each 10 s | timed out |\n\
             |---|---:|---|---:|\n",
        );
    }
    for row in rows {
        let simulated = format!(
            "{} | {} | {}",
            row.simulated.text(),
            by_10s(&row.simulated),
            row.simulated.timed_out
        );
        match &row.loopback {
            Some(real) if on_loopback => out.push_str(&format!(
                "| {} | {} | {} | {} | {simulated} |\n",
                row.strategy,
                real.text(),
                by_10s(real),
                real.timed_out
            )),
            _ if on_loopback => {
                out.push_str(&format!("| {} | - | - | - | {simulated} |\n", row.strategy));
            }
            _ => out.push_str(&format!("| {} | {simulated} |\n", row.strategy)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway::adaptive::AdaptiveQueue;

    #[test]
    fn each_strategy_s_row_counts_the_simulated_run_s_refusals() {
        let params = LabParams {
            workers: 4,
            ..LabParams::default()
        };
        let report = simulated(&params, &[Strategy::None, Strategy::EnvoyGradient]).unwrap();
        assert_eq!((report.on.workers, report.on.capacity), (4, 400.0));
        assert!(!report.on.loopback);
        let rows = report.rows;
        assert_eq!(rows[0].strategy, "none");
        assert_eq!(
            rows[0].simulated.refused, 0,
            "no protection refuses nothing"
        );
        assert!(rows[0].simulated.attempts > 0);
        // Three 60 s steps, in 10 s.
        assert_eq!(rows[0].simulated.refused_by_10s.len(), 18);
        let envoy = &rows[1].simulated;
        assert_eq!(envoy.refused_by_10s.iter().sum::<u64>(), envoy.refused);
        let run = simulate(&params, Scenario::LongRun, Strategy::EnvoyGradient).unwrap();
        assert_eq!(envoy.refused, run.counts.refused);
        let table = table(&rows);
        assert!(table.starts_with("| strategy | refused (first 10 s + after) |"));
        let first = envoy.refused_by_10s[0];
        let line = format!(
            "| envoy_gradient | {first} + {} of {} |",
            envoy.refused - first,
            envoy.attempts
        );
        assert!(table.contains(&line), "{table}");
        assert!(
            table.ends_with(&format!(" | {} |\n", envoy.timed_out)),
            "{table}"
        );
    }

    #[test]
    fn a_queue_is_named_and_its_clients_timeouts_counted() {
        let params = LabParams {
            workers: 2,
            adaptive_queue: Some(AdaptiveQueue {
                capacity: 1000,
                order: spillway::adaptive::QueueOrder::Adaptive,
                timeout: std::time::Duration::from_millis(190),
            }),
            ..LabParams::default()
        };
        let report = simulated(&params, &[Strategy::None, Strategy::EnvoyGradient]).unwrap();
        let text = report.markdown();
        assert!(
            text.contains(
                "In these runs the adaptive limits have a queue: 1000 places, 190ms, order \
                 adaptive."
            ),
            "{text}"
        );
        // Unprotected, a 2-worker service at 0.9x keeps its clients waiting past their timeout.
        let none = &report.rows[0].simulated;
        assert!(none.timed_out > 1_000, "{none:?}");
        let run = simulate(&params, Scenario::LongRun, Strategy::None).unwrap();
        assert_eq!(none.timed_out, run.counts.timed_out);
        // The queue reaches the adaptive strategy's runs: it refuses fewer with it.
        let unqueued = LabParams {
            adaptive_queue: None,
            ..params.clone()
        };
        let without = simulated(&unqueued, &[Strategy::EnvoyGradient]).unwrap();
        let (queued, unqueued) = (&report.rows[1].simulated, &without.rows[0].simulated);
        assert!(queued.refused < unqueued.refused, "{queued:?} {unqueued:?}");
    }

    #[test]
    fn a_row_run_on_loopback_shows_both_labs() {
        let refusals = |refused| Refusals {
            attempts: 100,
            refused,
            refused_by_10s: vec![refused, 0],
            timed_out: 7,
        };
        let rows = [LongRunRow {
            strategy: "aimd",
            loopback: Some(refusals(3)),
            simulated: refusals(5),
        }];
        let table = table(&rows);
        assert!(
            table.contains("| aimd | 3 + 0 of 100 | 3 0 | 7 | 5 + 0 of 100 | 5 0 | 7 |"),
            "{table}"
        );
    }
}
