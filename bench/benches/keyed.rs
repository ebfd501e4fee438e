//! Per-key limits beside governor's keyed limiter, in one run: ns per check at 10,000 and
//! 1,000,000 distinct keys, on 1 and 2 threads, keys visited in a shuffled cycle. Every check
//! reads its clock (spillway's system clock; governor's default quanta clock) and hashes its key.
//! Limits are high, so checks pass: the cost measured is the bookkeeping, not a refusal.
//!
//! spillway at its default capacity (4,096 keys with exact state; the rest in its sketches:
//! fixed memory) and with a capacity as large as the key set (every key exact).
//!
//!   cargo bench --manifest-path bench/Cargo.toml --bench keyed

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::{Quota, RateLimiter};
use spillway::keyed::{fingerprint, KeyedLimiter, KeyedRule, DEFAULT_CAPACITY};
use spillway::{Clock, SystemClock};
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

/// The keys 0..n in a fixed shuffled order (i × 7,919 mod n: a permutation, 7,919 being a prime
/// that divides no power of ten).
fn keys(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 7_919 % n).collect()
}

/// Runs `check` over the keys on `threads` threads for `iters` checks in all.
#[allow(clippy::disallowed_methods)] // the harness times real work
fn timed(threads: usize, iters: u64, keys: &[u64], check: &(dyn Fn(u64) + Sync)) -> Duration {
    let per_thread = iters / threads as u64 + 1;
    let start = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            scope.spawn(move || {
                let offset = thread * keys.len() / threads;
                for i in 0..per_thread as usize {
                    check(keys[(offset + i) % keys.len()]);
                }
            });
        }
    });
    start.elapsed()
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed");
    group.sample_size(20);
    for n in [10_000u64, 1_000_000] {
        let keys = keys(n);
        let clock = SystemClock::new();
        let rule = |capacity| KeyedRule::qps("bench", "bench", 1e9).with_capacity(capacity);
        let bounded = KeyedLimiter::new(&rule(DEFAULT_CAPACITY));
        let exact = KeyedLimiter::new(&rule(n as usize));
        let governor =
            RateLimiter::keyed(Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap()));
        // Every key seen once before measuring.
        for &key in &keys {
            let now = clock.now_nanos();
            bounded.check(fingerprint(&key), 1, now);
            exact.check(fingerprint(&key), 1, now);
            let _ = governor.check_key(&key);
        }
        for threads in [1usize, 2] {
            let label = |name: &str| BenchmarkId::new(format!("{name}/{threads}t"), n);
            group.bench_function(label("spillway_default_capacity"), |b| {
                b.iter_custom(|iters| {
                    timed(threads, iters, &keys, &|key| {
                        bounded.check(fingerprint(&key), 1, clock.now_nanos());
                    })
                })
            });
            group.bench_function(label("spillway_exact_every_key"), |b| {
                b.iter_custom(|iters| {
                    timed(threads, iters, &keys, &|key| {
                        exact.check(fingerprint(&key), 1, clock.now_nanos());
                    })
                })
            });
            group.bench_function(label("governor_keyed"), |b| {
                b.iter_custom(|iters| {
                    timed(threads, iters, &keys, &|key| {
                        let _ = governor.check_key(&key);
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, keyed);
criterion_main!(benches);
