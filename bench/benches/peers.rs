//! spillway and its peers, same machine, same run, 1 and 2 threads.
//!
//! Group `admit/{N}t`: the cost of letting one call through when no limit is reached, with the
//! release where the peer has one. Each peer is configured so that it never refuses (a huge rate
//! or permit count), so what is measured is the bookkeeping of an admitted call:
//!
//! - `shared_atomic`: one `fetch_add` on one shared `AtomicU64`, the floor everything is held to;
//! - `spillway_entry_exit`: `resource.entry().enter()` and drop (pass, RT, completion and
//!   concurrency statistics, system clock); `spillway_entry_exit_coarse_clock`: the same on an
//!   instance reading `CoarseClock` (RT in 1 ms ticks);
//! - `sentinel_core_entry_exit`: sentinel-core (the Rust port of Sentinel) `EntryBuilder::build`
//!   and `exit`, no rules loaded;
//! - `governor_check`: governor's direct (GCRA) limiter `check`;
//! - `leaky_bucket_try_acquire`: leaky-bucket's `try_acquire(1)`;
//! - `ratelimit_try_wait`: ratelimit's `try_wait`;
//! - `tokio_semaphore_try_acquire`: tokio `Semaphore::try_acquire` and drop of the permit.
//!
//! Group `qps_rule/{N}t`: see [`qps_rule`]. Group `rate_limiter/{N}t`: see [`rate_limiter`].
//! Group `dubbo/{N}t`: see [`dubbo`]. Group `layer/1t`: see [`layer`].

use criterion::{criterion_group, criterion_main, Criterion};
use governor::{Quota, RateLimiter};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// The same harness as spillway's own benches: N threads meeting on a spinning counter, timed from
// the first one's start to the last one's end.
#[path = "../../crates/spillway/benches/support.rs"]
mod support;
use support::run_parallel;

fn admit(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    sentinel_core::init_default().expect("sentinel-core init");

    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("admit/{threads}t"));

        let shared = AtomicU64::new(0);
        group.bench_function("shared_atomic", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    shared.fetch_add(1, Ordering::Relaxed);
                })
            })
        });

        let spillway = spillway::Spillway::new();
        let resource = spillway.resource("bench").unwrap();
        group.bench_function("spillway_entry_exit", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(resource.entry().enter())))
            })
        });

        let coarse = spillway::Spillway::new_with_clock(spillway::CoarseClock::new());
        let coarse_resource = coarse.resource("bench").unwrap();
        group.bench_function("spillway_entry_exit_coarse_clock", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    drop(black_box(coarse_resource.entry().enter()))
                })
            })
        });

        group.bench_function("sentinel_core_entry_exit", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    let entry = sentinel_core::api::EntryBuilder::new("bench".to_string())
                        .build()
                        .expect("no rules: always passes");
                    entry.exit();
                })
            })
        });

        let governor = RateLimiter::direct(Quota::per_second(NonZeroU32::MAX));
        group.bench_function("governor_check", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    black_box(governor.check().is_ok());
                })
            })
        });

        let leaky = leaky_bucket::RateLimiter::builder()
            .max(usize::MAX / 2)
            .initial(usize::MAX / 2)
            .refill(usize::MAX / 4)
            .interval(Duration::from_millis(1))
            .build();
        group.bench_function("leaky_bucket_try_acquire", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    black_box(leaky.try_acquire(1));
                })
            })
        });

        let ratelimit = ratelimit::Ratelimiter::builder(1_000_000, Duration::from_micros(1))
            .max_tokens(u64::MAX / 2)
            .initial_available(u64::MAX / 2)
            .build()
            .unwrap();
        group.bench_function("ratelimit_try_wait", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    black_box(ratelimit.try_wait().is_ok());
                })
            })
        });

        let semaphore = tokio::sync::Semaphore::new(tokio::sync::Semaphore::MAX_PERMITS);
        group.bench_function("tokio_semaphore_try_acquire", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(semaphore.try_acquire())))
            })
        });

        group.finish();
    }
}

/// Group `qps_rule/{N}t`: one QPS limit loaded, a call that passes it (the limit is far away)
/// and a call it refuses (the limit is exhausted): spillway's entry + exit with a QPS reject rule
/// (with the default clock, and with the coarse clock), governor's `check`, sentinel-core's entry
/// with a reject flow rule.
fn qps_rule(c: &mut Criterion) {
    use sentinel_core::flow;
    use std::sync::Arc;

    sentinel_core::init_default().expect("sentinel-core init");
    flow::load_rules(vec![
        Arc::new(flow::Rule {
            resource: "sentinel-pass".into(),
            threshold: 1e12,
            calculate_strategy: flow::CalculateStrategy::Direct,
            control_strategy: flow::ControlStrategy::Reject,
            ..Default::default()
        }),
        Arc::new(flow::Rule {
            resource: "sentinel-block".into(),
            threshold: 0.0,
            calculate_strategy: flow::CalculateStrategy::Direct,
            control_strategy: flow::ControlStrategy::Reject,
            ..Default::default()
        }),
    ]);
    let spillway = spillway::Spillway::new();
    spillway
        .load_flow_rules(vec![
            spillway::flow::FlowRule::qps("pass", "pass", 1e12),
            spillway::flow::FlowRule::qps("block", "block", 0.0),
        ])
        .unwrap();
    // The same rules on an instance that reads the coarse clock (1 ms ticks).
    let coarse = spillway::Spillway::new_with_clock(spillway::CoarseClock::new());
    coarse
        .load_flow_rules(vec![
            spillway::flow::FlowRule::qps("pass", "pass", 1e12),
            spillway::flow::FlowRule::qps("block", "block", 0.0),
        ])
        .unwrap();
    let governor_pass = RateLimiter::direct(Quota::per_second(NonZeroU32::MAX));
    let governor_block = RateLimiter::direct(Quota::per_hour(NonZeroU32::MIN));
    let _ = governor_block.check();

    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("qps_rule/{threads}t"));
        for outcome in ["pass", "block"] {
            for (instance, suffix) in [(&spillway, ""), (&coarse, "_coarse_clock")] {
                let resource = instance.resource(outcome).unwrap();
                group.bench_function(format!("spillway_{outcome}{suffix}"), |b| {
                    b.iter_custom(|iters| {
                        run_parallel(threads, iters, || drop(black_box(resource.entry().enter())))
                    })
                });
            }
            let governor = if outcome == "pass" {
                &governor_pass
            } else {
                &governor_block
            };
            group.bench_function(format!("governor_{outcome}"), |b| {
                b.iter_custom(|iters| {
                    run_parallel(threads, iters, || {
                        black_box(governor.check().is_ok());
                    })
                })
            });
            let name = format!("sentinel-{outcome}");
            group.bench_function(format!("sentinel_core_{outcome}"), |b| {
                b.iter_custom(|iters| {
                    run_parallel(threads, iters, || {
                        if let Ok(entry) =
                            sentinel_core::api::EntryBuilder::new(name.clone()).build()
                        {
                            entry.exit();
                        }
                    })
                })
            });
        }
        group.finish();
    }
}

/// Group `rate_limiter/{N}t`: a standalone rate limiter asked for one permit without waiting,
/// when it has one (pass; spillway also at an infinite rate) and when it has none (reject):
/// spillway's Guava-style `RateLimiter::try_acquire(1, 0)`, governor's `check`.
fn rate_limiter(c: &mut Criterion) {
    // A finite rate so high that every permit is free: each pass still changes the state (one
    // stored permit fewer) and publishes it, as governor's pass does. An infinite rate changes
    // nothing and publishes nothing.
    let spillway_pass = spillway::RateLimiter::bursty(1e9).unwrap();
    let spillway_infinite = spillway::RateLimiter::bursty(f64::INFINITY).unwrap();
    let spillway_reject = spillway::RateLimiter::bursty(1e-9).unwrap();
    let _ = spillway_reject.try_acquire(1, Duration::ZERO);
    let governor_pass = RateLimiter::direct(Quota::per_second(NonZeroU32::MAX));
    let governor_reject = RateLimiter::direct(Quota::per_hour(NonZeroU32::MIN));
    let _ = governor_reject.check();
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("rate_limiter/{threads}t"));
        let spillway_rows = [
            ("pass", &spillway_pass),
            ("pass_infinite_rate", &spillway_infinite),
            ("reject", &spillway_reject),
        ];
        for (name, limiter) in spillway_rows {
            group.bench_function(format!("spillway_try_acquire_{name}"), |b| {
                b.iter_custom(|iters| {
                    run_parallel(threads, iters, || {
                        black_box(limiter.try_acquire(1, Duration::ZERO));
                    })
                })
            });
        }
        for (name, limiter) in [("pass", &governor_pass), ("reject", &governor_reject)] {
            group.bench_function(format!("governor_check_{name}"), |b| {
                b.iter_custom(|iters| {
                    run_parallel(threads, iters, || {
                        black_box(limiter.check().is_ok());
                    })
                })
            });
        }
        group.finish();
    }
}

/// Group `dubbo/{N}t`: Dubbo's limits on one key, never reached: spillway's `executes` and
/// `actives` acquire + release (through pre-resolved keys) and TPS check (by name and through a
/// pre-resolved key), next to
/// tokio's `Semaphore::try_acquire` + release.
fn dubbo(c: &mut Criterion) {
    use spillway::dubbo::{ActiveLimiter, ExecuteLimiter, TpsConfig, TpsLimiter};
    let executes = ExecuteLimiter::new();
    let create = executes.key("OrderService.create").unwrap();
    let actives = ActiveLimiter::new();
    let query = actives.key("OrderService.query").unwrap();
    let tps = TpsLimiter::new();
    let tps_config = TpsConfig::new(u32::MAX, Duration::from_secs(3_600));
    let tps_key = tps.key("OrderService.key", tps_config).unwrap();
    let semaphore = tokio::sync::Semaphore::new(tokio::sync::Semaphore::MAX_PERMITS);
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("dubbo/{threads}t"));
        group.bench_function("spillway_executes_acquire_release", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    drop(black_box(create.try_acquire(1_000_000)));
                })
            })
        });
        group.bench_function("spillway_actives_acquire_release", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    drop(black_box(query.try_acquire(1_000_000)));
                })
            })
        });
        group.bench_function("spillway_tps_check", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    black_box(tps.try_acquire("OrderService", tps_config).is_ok());
                })
            })
        });
        group.bench_function("spillway_tps_key_check", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    black_box(tps_key.try_acquire().is_ok());
                })
            })
        });
        group.bench_function("tokio_semaphore_try_acquire", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(semaphore.try_acquire())))
            })
        });
        group.finish();
    }
}

/// Group `adaptive/{N}t`: an adaptive concurrency limit admitting and releasing one call (its
/// sample reaching the algorithm), never at the limit: spillway's `AdaptiveLimiter` with
/// Envoy's gradient controller and with AIMD, next to governor's `check` and tokio's
/// `Semaphore::try_acquire` + release (what a user would pick instead: a rate limit, or a fixed
/// concurrency limit).
fn adaptive(c: &mut Criterion) {
    use spillway::adaptive::{
        AdaptiveLimiter, Aimd, AimdConfig, EnvoyGradient, EnvoyGradientConfig,
    };
    let envoy = AdaptiveLimiter::new(
        EnvoyGradient::new(EnvoyGradientConfig {
            min_concurrency: 1_000,
            max_limit: 1_000,
            ..EnvoyGradientConfig::default()
        })
        .unwrap(),
    );
    let aimd = AdaptiveLimiter::new(
        Aimd::new(AimdConfig {
            initial_limit: 1_000,
            min_limit: 1_000,
            max_limit: 1_000,
            ..AimdConfig::default()
        })
        .unwrap(),
    );
    let governor = RateLimiter::direct(Quota::per_second(NonZeroU32::MAX));
    let semaphore = tokio::sync::Semaphore::new(tokio::sync::Semaphore::MAX_PERMITS);
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("adaptive/{threads}t"));
        group.bench_function("spillway_envoy_gradient_acquire_release", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(envoy.try_acquire())))
            })
        });
        group.bench_function("spillway_aimd_acquire_release", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(aimd.try_acquire())))
            })
        });
        group.bench_function("governor_check", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || {
                    black_box(governor.check().is_ok());
                })
            })
        });
        group.bench_function("tokio_semaphore_try_acquire", |b| {
            b.iter_custom(|iters| {
                run_parallel(threads, iters, || drop(black_box(semaphore.try_acquire())))
            })
        });
        group.finish();
    }
}

/// Drives one request through a tower service whose readiness and response are immediate: poll
/// ready, call, poll the response future once, drop the response (and with it the body).
fn one_request<S, B>(service: &mut S) -> http::StatusCode
where
    S: tower::Service<http::Request<()>, Response = http::Response<B>>,
{
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    assert!(service.poll_ready(&mut cx).is_ready());
    let mut future = std::pin::pin!(service.call(http::Request::new(())));
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(response)) => response.status(),
        _ => panic!("the response is immediate"),
    }
}

/// Group `layer/1t`: one request through a tower service that answers at once, with each
/// middleware in front of it, 1 thread:
///
/// - `bare`: the service alone (the floor: request, response and empty body);
/// - `spillway_pass`: spillway's layer, fixed resource, no rules (entry in `call`, held by the
///   body, exit when it drops);
/// - `spillway_block`: the same with a QPS rule of 0: the 429 with `Retry-After` and
///   `RateLimit` headers;
/// - `tower_concurrency_limit_pass`: tower's `ConcurrencyLimit`, never reached;
/// - `tower_governor_pass` / `tower_governor_block`: tower_governor with a global key, never
///   reached / exhausted (its 429).
fn layer(c: &mut Criterion) {
    use spillway_tower::SpillwayLayer;
    use tower::Layer;
    use tower_governor::governor::GovernorConfigBuilder;
    use tower_governor::key_extractor::GlobalKeyExtractor;
    use tower_governor::GovernorLayer;

    let bare = tower::service_fn(|_request: http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::empty()))
    });
    let mut group = c.benchmark_group("layer/1t");
    group.bench_function("bare", |b| {
        let mut service = bare;
        b.iter(|| black_box(one_request(&mut service)))
    });
    let open = spillway::Spillway::new();
    group.bench_function("spillway_pass", |b| {
        let mut service = SpillwayLayer::new(open.clone())
            .fixed_resource("api")
            .layer(bare);
        b.iter(|| black_box(one_request(&mut service)))
    });
    let closed = spillway::Spillway::new();
    closed
        .load_flow_rules(vec![spillway::flow::FlowRule::qps("api-qps", "api", 0.0)])
        .unwrap();
    group.bench_function("spillway_block", |b| {
        let mut service = SpillwayLayer::new(closed.clone())
            .fixed_resource("api")
            .layer(bare);
        assert_eq!(one_request(&mut service), 429);
        b.iter(|| black_box(one_request(&mut service)))
    });
    group.bench_function("tower_concurrency_limit_pass", |b| {
        let mut service = tower::limit::ConcurrencyLimitLayer::new(1 << 30).layer(bare);
        b.iter(|| black_box(one_request(&mut service)))
    });
    group.bench_function("tower_governor_pass", |b| {
        let config = GovernorConfigBuilder::default()
            .per_nanosecond(1)
            .burst_size(u32::MAX)
            .key_extractor(GlobalKeyExtractor)
            .finish()
            .unwrap();
        let mut service = GovernorLayer::new(config).layer(bare);
        b.iter(|| black_box(one_request(&mut service)))
    });
    group.bench_function("tower_governor_block", |b| {
        let config = GovernorConfigBuilder::default()
            .per_second(3_600)
            .burst_size(1)
            .key_extractor(GlobalKeyExtractor)
            .finish()
            .unwrap();
        let mut service = GovernorLayer::new(config).layer(bare);
        one_request(&mut service);
        assert_eq!(one_request(&mut service), 429);
        b.iter(|| black_box(one_request(&mut service)))
    });
    group.finish();
}

criterion_group!(
    benches,
    admit,
    qps_rule,
    rate_limiter,
    dubbo,
    adaptive,
    layer
);
criterion_main!(benches);
