//! The resident memory a keyed limiter holds after a million distinct keys: spillway's at its
//! default capacity (fixed by the capacity), spillway's with every key exact, governor's.
//! One limiter per process, so that each measure is its own: `keyed_memory <which> <keys>`,
//! printing `which keys rss_before_kib rss_after_kib`.

use governor::{Quota, RateLimiter};
use spillway::keyed::{fingerprint, KeyedLimiter, KeyedRule, DEFAULT_CAPACITY};
use spillway::{Clock, SystemClock};
use std::num::NonZeroU32;

/// Resident set size, KiB (`/proc/self/statm`'s second field, in pages).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args
        .next()
        .expect("spillway_default | spillway_exact | governor");
    let keys: u64 = args.next().map_or(1_000_000, |n| n.parse().unwrap());
    let clock = SystemClock::new();
    let before = rss_kib();
    let kept: Box<dyn std::any::Any> = match which.as_str() {
        "spillway_default" | "spillway_exact" => {
            let capacity = if which == "spillway_default" {
                DEFAULT_CAPACITY
            } else {
                keys as usize
            };
            let limiter = KeyedLimiter::new(&KeyedRule::qps("m", "m", 1e9).with_capacity(capacity));
            for key in 0..keys {
                limiter.check(fingerprint(&key), 1, clock.now_nanos());
            }
            Box::new(limiter)
        }
        "governor" => {
            let limiter =
                RateLimiter::keyed(Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap()));
            for key in 0..keys {
                let _ = limiter.check_key(&key);
            }
            Box::new(limiter)
        }
        other => panic!("unknown limiter {other}"),
    };
    let after = rss_kib();
    println!("{which} {keys} {before} {after}");
    drop(kept);
}
