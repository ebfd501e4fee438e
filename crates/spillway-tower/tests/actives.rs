//! Dubbo `actives` awaited on tokio's paused clock: timeouts, FIFO order and cancellation.

use spillway::dubbo::{ActiveKey, ActiveLimiter};
use spillway::BlockKind;
use spillway_tower::{acquire_active, TokioClock};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(3_600);

fn key(name: &str) -> ActiveKey {
    ActiveLimiter::new_with_clock(TokioClock::new())
        .key(name)
        .unwrap()
}

/// Lets spawned tasks run until they block (paused time does not move while tasks can run).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiter_times_out_on_the_timer_and_says_how_long_it_waited() {
    let key = key("s.m");
    let _held = acquire_active(&key, 1, LONG).await.unwrap();
    let start = Instant::now();
    let err = acquire_active(&key, 1, Duration::from_millis(1_500))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(1_500));
    assert_eq!(err.kind(), BlockKind::Actives);
    assert_eq!(err.waited(), Some(Duration::from_millis(1_500)));
    assert_eq!((err.observed(), err.threshold()), (1.0, 1.0));
    assert_eq!(
        key.state().waiters,
        0,
        "the timed-out waiter left the queue"
    );
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_arrival_order_as_slots_free() {
    let key = key("s.m");
    let held = acquire_active(&key, 1, LONG).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let tasks: Vec<JoinHandle<()>> = (0..4)
        .map(|i| {
            let (key, order) = (key.clone(), order.clone());
            let task = tokio::spawn(async move {
                let permit = acquire_active(&key, 1, LONG).await.unwrap();
                order.lock().unwrap().push((i, start.elapsed()));
                tokio::time::sleep(Duration::from_millis(100)).await; // the call
                drop(permit);
            });
            task
        })
        .collect();
    settle().await;
    assert_eq!(key.state().waiters, 4);
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(held);
    for task in tasks {
        task.await.unwrap();
    }
    let ms = |ms| Duration::from_millis(ms);
    assert_eq!(
        *order.lock().unwrap(),
        [(0, ms(50)), (1, ms(150)), (2, ms(250)), (3, ms(350))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_frees_its_place_and_loses_no_grant() {
    let key = key("s.m");
    let held = acquire_active(&key, 1, LONG).await.unwrap();
    let cancelled = {
        let key = key.clone();
        tokio::spawn(async move { acquire_active(&key, 1, LONG).await.map(drop) })
    };
    settle().await;
    let served = {
        let key = key.clone();
        tokio::spawn(async move {
            let _permit = acquire_active(&key, 1, LONG).await.unwrap();
            Instant::now()
        })
    };
    settle().await;
    assert_eq!(key.state().waiters, 2);
    cancelled.abort(); // the older waiter goes away
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert_eq!(key.state().waiters, 1);
    let released_at = Instant::now();
    drop(held);
    assert_eq!(served.await.unwrap(), released_at);
    assert_eq!((key.state().in_flight, key.state().waiters), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_grant_to_a_waiter_dropped_before_it_runs_goes_to_the_next() {
    let key = key("s.m");
    let held = acquire_active(&key, 1, LONG).await.unwrap();
    let first = {
        let key = key.clone();
        tokio::spawn(async move { acquire_active(&key, 1, LONG).await.map(drop) })
    };
    settle().await;
    let second = {
        let key = key.clone();
        tokio::spawn(async move { acquire_active(&key, 1, LONG).await.is_ok() })
    };
    settle().await;
    drop(held); // granted to `first`, which has not run yet...
    first.abort(); // ...and is cancelled: its slot passes on
    assert!(first.await.unwrap_err().is_cancelled());
    assert!(second.await.unwrap());
    assert_eq!((key.state().in_flight, key.state().waiters), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_short_timeout_in_the_middle_leaves_the_others_in_order() {
    let key = key("s.m");
    let held = acquire_active(&key, 1, LONG).await.unwrap();
    let spawn = |timeout: Duration| {
        let key = key.clone();
        tokio::spawn(async move {
            acquire_active(&key, 1, timeout)
                .await
                .map(|_permit| Instant::now())
        })
    };
    let start = Instant::now();
    let a = spawn(LONG);
    settle().await;
    let impatient = spawn(Duration::from_millis(10));
    settle().await;
    let c = spawn(LONG);
    settle().await;
    let err = impatient.await.unwrap().unwrap_err();
    assert_eq!(err.waited(), Some(Duration::from_millis(10)));
    assert_eq!(start.elapsed(), Duration::from_millis(10));
    assert_eq!(key.state().waiters, 2);
    drop(held);
    let (a, c) = (a.await.unwrap().unwrap(), c.await.unwrap().unwrap());
    assert!(a <= c);
    assert_eq!(key.state().in_flight, 0);
}
