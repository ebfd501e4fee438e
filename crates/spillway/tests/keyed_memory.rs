//! A per-key rule's memory, measured with a counting allocator: what it holds is what
//! `heap_bytes` says, a million distinct keys add nothing to it, and checking a borrowed key
//! (through the limiter or the entry path) allocates nothing. Run with `--nocapture` for the
//! numbers.

mod support;

use spillway::keyed::{fingerprint, KeyedLimiter, KeyedRule, DEFAULT_CAPACITY};
use spillway::{ManualClock, Spillway};
use support::counting::{own_allocations, own_live, Counting};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One test, counting its own thread's allocations (the harness's threads allocate too).
#[test]
fn a_rule_holds_a_fixed_amount_whatever_the_keys_and_checks_allocate_nothing() {
    let before = own_live();
    let limiter = KeyedLimiter::new(&KeyedRule::qps("per-key", "api", 100.0));
    assert_eq!(
        (own_live() - before) as usize,
        limiter.heap_bytes(),
        "heap_bytes is what it holds"
    );
    // The thread's first check takes its stripe of the counters (a thread-local, made once).
    limiter.check(fingerprint(&u64::MAX), 1, 0);
    let held = (own_live() - before) as usize;
    let allocations = own_allocations();
    for key in 0..1_000_000u64 {
        limiter.check(fingerprint(&key), 1, key * 1_000);
    }
    assert_eq!(own_allocations(), allocations, "no allocation per check");
    assert_eq!(
        (own_live() - before) as usize,
        held,
        "a million keys add nothing"
    );
    println!(
        "a QPS rule of capacity {DEFAULT_CAPACITY}: {held} bytes ({:.2} MiB), after 1,000,000 keys too",
        held as f64 / (1 << 20) as f64
    );

    // Through the entry path, with borrowed keys of every position.
    let spillway = Spillway::new_with_clock(ManualClock::new());
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("per-user", "api", 1e9),
            KeyedRule::in_flight("api", 1_000_000_000)
                .with_id("per-ip")
                .with_param(1),
        ])
        .unwrap();
    let users: Vec<String> = (0..1_000).map(|n| format!("user-{n}")).collect();
    // The resource's first entry registers it.
    drop(spillway.entry("api").key("warm").enter().unwrap());
    let allocations = own_allocations();
    for (n, user) in users.iter().enumerate() {
        let ip = [10u8, 0, (n / 256) as u8, n as u8];
        let entry = spillway
            .entry("api")
            .key(user.as_str())
            .key_at(1, &ip)
            .enter();
        assert!(entry.is_ok());
    }
    assert_eq!(own_allocations(), allocations, "entries allocate nothing");
}
