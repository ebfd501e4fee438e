//! Samples an adaptive limiter holds without its lock (those its algorithm says cannot move the
//! limit) change nothing: on a manual clock, the limit after every release, the samples counted
//! and the algorithm's estimates are those of the same algorithm fed every sample as it
//! completes, for each algorithm that holds some (AIMD on every sample and windowed, Gradient2
//! and Vegas windowed, Envoy's gradient) and one that holds none.

use spillway::adaptive::{
    AdaptiveLimiter, Aimd, AimdConfig, EnvoyGradient, EnvoyGradientConfig, Gradient2,
    Gradient2Config, LimitAlgorithm, Outcome, Sample, Sampling, Ticket, Vegas, VegasConfig,
    WindowPolicy,
};
use spillway::ManualClock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// A small deterministic generator (xorshift).
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A duration from 1 to about 60 ms, mostly short, sometimes long (a tail).
    fn service(&mut self) -> u64 {
        let base = 1 + self.next() % 8;
        let tail = if self.next() % 10 == 0 { 7 } else { 1 };
        base * tail * MS + self.next() % MS
    }
}

/// Runs 20 s of calls arriving every 0 to 2 ms (queueing past the limit, some dropped) through
/// a limiter built by `make`, beside a second algorithm from `make` fed each sample as it
/// completes; asserts they agree after every release. Returns how many calls ended, and the
/// most samples the limiter held at once.
fn agree(name: &str, make: impl Fn() -> Box<dyn LimitAlgorithm>) -> (u64, u64) {
    let clock = ManualClock::new();
    let fed = Arc::new(AtomicU64::new(0));
    let limiter = AdaptiveLimiter::with_clock(Counted(make(), fed.clone()), clock.clone());
    let mut most_held = 0;
    let mut reference = make();
    let mut reference_limit = reference.initial_limit().max(1);
    let mut draws = Draws(0x9e37_79b9_7f4a_7c15);
    // Calls in flight: (end, ticket, dropped).
    let mut calls: Vec<(u64, Ticket, bool)> = Vec::new();
    let mut now = 0;
    let mut next_arrival = 0;
    let mut ended = 0;
    let mut refused = 0;
    while now < 20_000 * MS {
        let next_end = calls.iter().map(|(end, ..)| *end).min();
        if next_end.is_some_and(|end| end <= next_arrival) {
            // The first call to end ends now.
            let end = next_end.expect("a call");
            let index = calls
                .iter()
                .position(|(at, ..)| *at == end)
                .expect("that call");
            let (_, ticket, dropped) = calls.swap_remove(index);
            now = end;
            clock.set_nanos(now);
            let sample = Sample {
                started_nanos: ticket.started_nanos(),
                rtt: Duration::from_nanos(now - ticket.started_nanos()),
                in_flight: ticket.in_flight(),
                dropped,
            };
            let outcome = if dropped {
                Outcome::Dropped
            } else {
                Outcome::Success
            };
            limiter.release(ticket, outcome);
            if let Some(update) = reference.on_sample(&sample, now, reference_limit) {
                reference_limit = update.limit.max(1);
            }
            ended += 1;
            most_held = most_held.max(ended - fed.load(Ordering::Relaxed));
            assert_eq!(
                limiter.limit(),
                reference_limit,
                "{name}: the limit after call {ended} ended at {now} ns"
            );
        } else {
            now = next_arrival;
            clock.set_nanos(now);
            match limiter.admit() {
                Ok(ticket) => {
                    let dropped = draws.next() % 50 == 0;
                    // Calls take longer the more are in flight: latency rises with the load.
                    let took = draws.service() * (1 + u64::from(ticket.in_flight()) / 8);
                    calls.push((now + took, ticket, dropped));
                }
                Err(_) => refused += 1,
            }
            next_arrival = now + draws.next() % (2 * MS);
        }
    }
    let state = limiter.state();
    assert_eq!(state.samples, ended, "{name}: every sample fed");
    assert_eq!(state.limit, reference_limit, "{name}");
    assert_eq!(
        state.estimates,
        reference.estimates(),
        "{name}: the estimates"
    );
    assert!(state.updates > 0, "{name}: the limit moved");
    assert!(refused > 0, "{name}: the limit bound");
    for (_, ticket, _) in calls {
        limiter.release(ticket, Outcome::Ignore);
    }
    (ended, most_held)
}

/// A boxed algorithm as a `LimitAlgorithm`, counting the samples it is fed.
#[derive(Debug)]
struct Counted(Box<dyn LimitAlgorithm>, Arc<AtomicU64>);

impl LimitAlgorithm for Counted {
    fn initial_limit(&self) -> u32 {
        self.0.initial_limit()
    }

    fn on_sample(
        &mut self,
        sample: &Sample,
        now_nanos: u64,
        limit: u32,
    ) -> Option<spillway::adaptive::LimitUpdate> {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.on_sample(sample, now_nanos, limit)
    }

    fn estimates(&self) -> spillway::adaptive::RttEstimates {
        self.0.estimates()
    }

    fn quiet(&self, limit: u32) -> spillway::adaptive::Quiet {
        self.0.quiet(limit)
    }
}

fn windowed() -> Sampling {
    Sampling::Window(WindowPolicy {
        min_time: Duration::from_millis(50),
        max_time: Duration::from_millis(200),
        min_samples: 5,
        min_rtt: Duration::from_micros(100),
    })
}

/// An algorithm to compare, boxed.
type Algorithm = Box<dyn LimitAlgorithm>;

/// AIMD between 2 and 60, starting at 20; a call past 40 ms counts as dropped.
fn aimd(sampling: Sampling) -> Algorithm {
    let config = AimdConfig {
        initial_limit: 20,
        min_limit: 2,
        max_limit: 60,
        timeout: Duration::from_millis(40),
        sampling,
        ..AimdConfig::default()
    };
    Box::new(Aimd::new(config).unwrap())
}

/// Gradient2 between 2 and 60, starting at 20.
fn gradient2(sampling: Sampling) -> Algorithm {
    let config = Gradient2Config {
        initial_limit: 20,
        min_limit: 2,
        max_limit: 60,
        sampling,
        ..Gradient2Config::default()
    };
    Box::new(Gradient2::new(config).unwrap())
}

#[test]
fn aimd_on_every_sample_moves_as_if_fed_each_at_once() {
    let (ended, held) = agree("aimd", || aimd(Sampling::EverySample));
    assert!(ended > 5_000, "{ended}");
    assert!(held > 1, "samples were held: at most {held} at once");
}

#[test]
fn windowed_algorithms_move_as_if_fed_each_at_once() {
    let vegas = || -> Algorithm {
        let config = VegasConfig {
            initial_limit: 20,
            max_limit: 60,
            sampling: windowed(),
            ..VegasConfig::default()
        };
        Box::new(Vegas::with_seed(config, 3).unwrap())
    };
    let cases: [(&str, &dyn Fn() -> Algorithm); 3] = [
        ("aimd windowed", &|| aimd(windowed())),
        ("gradient2 windowed", &|| gradient2(windowed())),
        ("vegas windowed", &vegas),
    ];
    for (name, make) in cases {
        let (_, held) = agree(name, make);
        assert!(
            held > 1,
            "{name}: samples were held: at most {held} at once"
        );
    }
}

#[test]
fn envoy_s_gradient_moves_as_if_fed_each_at_once() {
    let (_, held) = agree("envoy", || {
        let config = EnvoyGradientConfig {
            min_rtt_interval: Duration::from_secs(5),
            max_limit: 60,
            ..EnvoyGradientConfig::default()
        };
        Box::new(EnvoyGradient::with_seed(config, 7).unwrap())
    });
    assert!(held > 1, "samples were held: at most {held} at once");
}

#[test]
fn an_algorithm_that_holds_nothing_moves_as_before() {
    let (_, held) = agree("gradient2", || gradient2(Sampling::EverySample));
    assert_eq!(held, 0, "feeds every sample at once");
}

/// Panics on the sample of the call that started at `.0`, and says every sample is quiet.
#[derive(Debug)]
struct PanicsOn(u64, Arc<AtomicU64>);

impl LimitAlgorithm for PanicsOn {
    fn initial_limit(&self) -> u32 {
        10
    }

    fn on_sample(
        &mut self,
        sample: &Sample,
        _: u64,
        _: u32,
    ) -> Option<spillway::adaptive::LimitUpdate> {
        assert_ne!(sample.started_nanos, self.0, "the algorithm's bug");
        self.1.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn estimates(&self) -> spillway::adaptive::RttEstimates {
        spillway::adaptive::RttEstimates::default()
    }

    fn quiet(&self, _: u32) -> spillway::adaptive::Quiet {
        spillway::adaptive::Quiet::until(u64::MAX)
    }
}

/// An algorithm that panics on a held sample panics once: the limiter keeps using it (as it
/// does after a panic on a sample fed at once), and the samples held after that one are fed
/// once, at the next read.
#[test]
fn a_held_sample_an_algorithm_panics_on_is_not_fed_again() {
    let clock = ManualClock::new();
    let fed = Arc::new(AtomicU64::new(0));
    let limiter = AdaptiveLimiter::with_clock(PanicsOn(5 * MS, fed.clone()), clock.clone());
    // The first is fed at once (nothing is quiet before the algorithm is first asked).
    let tickets: Vec<Ticket> = (0..4)
        .map(|call| {
            clock.set_nanos(call * 5 * MS);
            limiter.admit().expect("a limit of 10")
        })
        .collect();
    clock.set_nanos(30 * MS);
    for ticket in tickets {
        limiter.release(ticket, Outcome::Success);
    }
    assert_eq!(fed.load(Ordering::Relaxed), 1, "three held");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| limiter.state()));
    assert!(panicked.is_err(), "the held sample of the call at 5 ms");
    let state = limiter.state();
    assert_eq!(fed.load(Ordering::Relaxed), 3, "the others, once each");
    assert_eq!(state.samples, 4);
    assert_eq!(limiter.state().samples, 4);
}
