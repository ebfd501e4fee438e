//! The loopback lab against the real proxy and upstream, briefly.

use spillway_lab::arrivals::Spacing;
use spillway_lab::{Scenario, Strategy};
use spillway_server::lab::loopback::{run_point, LoopbackParams};
use std::time::Duration;

fn brief() -> LoopbackParams {
    LoopbackParams {
        warm_up: Duration::from_millis(200),
        measure: Duration::from_secs(1),
        ..LoopbackParams::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_ends_once_and_overload_is_refused() {
    let params = brief();
    let run = run_point(
        &params,
        Strategy::StaticConcurrency,
        Scenario::Sweep { load: 3.0 },
    )
    .await
    .unwrap();
    eprintln!("{run:?}");
    let c = &run.counts;
    assert_eq!(c.retries, c.attempts - c.requests);
    // 3x a 400/s upstream for 1 s: about 1200 requests, sent at fixed spacing.
    assert!((1150..=1250).contains(&c.requests), "{c:?}");
    // Every attempt ended once: answered, refused, timed out, or failed.
    assert_eq!(
        c.answered + c.refused + c.timed_out + c.failed,
        c.attempts,
        "{c:?}"
    );
    assert_eq!(c.admitted, c.attempts - c.refused, "{c:?}");
    // The concurrency rule refuses: three times the capacity cannot all be admitted.
    assert!(c.refused > 0, "{c:?}");
    assert_eq!(c.skipped, 0, "{c:?}");
}

/// Poisson arrivals through the real proxy: about as many requests in the measured second as
/// evenly spaced ones (a Poisson count of mean 1,200 lies within 1,060 to 1,340 but about once
/// in 10,000), and every attempt ending once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_arrivals_reach_the_proxy_and_every_attempt_ends_once() {
    let params = LoopbackParams {
        spacing: Spacing::Poisson,
        ..brief()
    };
    let run = run_point(
        &params,
        Strategy::EnvoyGradient,
        Scenario::Sweep { load: 3.0 },
    )
    .await
    .unwrap();
    let c = &run.counts;
    eprintln!("{c:?}");
    assert!((1060..=1340).contains(&c.requests), "{c:?}");
    assert_eq!(c.retries, c.attempts - c.requests);
    assert_eq!(
        c.answered + c.refused + c.timed_out + c.failed,
        c.attempts,
        "{c:?}"
    );
    assert_eq!(c.admitted, c.attempts - c.refused, "{c:?}");
    assert_eq!(c.skipped, 0, "{c:?}");
}

/// The capacity of a random service is its workers over the distribution's mean plus the
/// timer's overhead, not what its draws happened to be: two seeds give the same capacity within
/// 5% (their first 2.5 s of draws, about 220 on one worker, have means 7% apart about one time
/// in three), below the nominal rate (the timer only ever adds), and not far below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_service_s_capacity_does_not_follow_its_draws() {
    use spillway_lab::ServiceTime;
    use spillway_server::lab::loopback::measure_capacity;
    use spillway_server::upstream::UpstreamShape;
    let shape = |seed| UpstreamShape {
        workers: 1,
        service: ServiceTime::Exponential {
            mean: Duration::from_millis(10),
        },
        seed,
        flaky: false,
    };
    let (one, two) = (
        measure_capacity(shape(1)).await.unwrap(),
        measure_capacity(shape(2)).await.unwrap(),
    );
    assert!((one - two).abs() / one < 0.05, "{one} {two}");
    // 100 a second nominal; tokio's timer adds about a millisecond to a sleep (a busy machine
    // more, but not 5 ms on average over 2.5 s).
    for capacity in [one, two] {
        assert!((66.0..100.0).contains(&capacity), "{one} {two}");
    }
}

/// A request whose client leaves is still worked on to its end, as the simulated service does:
/// on one worker, a request sent after the first one's client gave up waits for the first's
/// 400 ms of work (the upstream used to drop it with the client's connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_whose_client_left_still_holds_its_worker() {
    use spillway_lab::ServiceTime;
    use spillway_server::upstream::{Upstream, UpstreamShape, WORK_HEADER};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    let upstream = Upstream::start(UpstreamShape {
        workers: 1,
        service: ServiceTime::Fixed {
            time: Duration::from_millis(1),
        },
        seed: 1,
        flaky: false,
    })
    .await
    .unwrap();
    let request = |work: Duration| {
        format!(
            "GET / HTTP/1.1\r\nhost: lab\r\n{WORK_HEADER}: {}\r\nconnection: close\r\n\r\n",
            work.as_nanos()
        )
    };
    let start = tokio::time::Instant::now();
    let mut leaving = TcpStream::connect(upstream.addr()).await.unwrap();
    leaving
        .write_all(request(Duration::from_millis(400)).as_bytes())
        .await
        .unwrap();
    // Once the first one's work has started, give up on it.
    tokio::time::timeout(Duration::from_secs(10), async {
        while upstream.busy_workers() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the work starts within 10 s");
    drop(leaving);
    let mut next = TcpStream::connect(upstream.addr()).await.unwrap();
    next.write_all(request(Duration::from_millis(1)).as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), next.read_to_string(&mut answer))
        .await
        .expect("answered within 10 s")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "the worker was free after {:?}",
        start.elapsed()
    );
}
