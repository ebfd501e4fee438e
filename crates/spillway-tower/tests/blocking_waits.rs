//! A blocking wait inside a tokio runtime is warned of, once, through `tracing`; outside a
//! runtime, or a wait of nothing, is not. The core calls the hook from its clocks' blocking
//! waits (a zero wait: nothing here sleeps).

use spillway::{Clock, SystemClock};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The hook is one per process: the tests that set or read it take turns.
static HOOK: Mutex<()> = Mutex::new(());

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[test]
fn a_blocking_wait_inside_a_runtime_is_warned_of_once() {
    let _turn = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    // Making a layer sets the hook the core's clocks call.
    let _layer = spillway_tower::SpillwayLayer::new(spillway::Spillway::new());
    assert!(spillway::blocking_wait_hook().is_some());

    // Outside a runtime nothing is said.
    assert!(!spillway_tower::warn_if_in_runtime(Duration::from_millis(
        100
    )));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A zero wait is no wait, even through a real clock's sleep.
        SystemClock::new().sleep(Duration::ZERO);
        assert!(captured.text().is_empty());
        assert!(spillway_tower::warn_if_in_runtime(Duration::from_millis(
            100
        )));
        // Once per process.
        assert!(!spillway_tower::warn_if_in_runtime(Duration::from_millis(
            100
        )));
    });
    let text = captured.text();
    assert!(text.contains("WARN"), "{text}");
    assert!(
        text.contains("a blocking spillway wait runs on a thread inside a tokio runtime"),
        "{text}"
    );
    assert!(text.contains("wait=100ms"), "{text}");
}

#[test]
fn the_core_s_real_clocks_call_the_hook_before_they_wait() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let _turn = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    static SEEN: AtomicU64 = AtomicU64::new(0);
    spillway::set_blocking_wait_hook(Some(|wait: Duration| {
        if wait == Duration::ZERO {
            SEEN.fetch_add(1, Ordering::Relaxed);
        }
    }));
    SystemClock::new().sleep(Duration::ZERO);
    assert_eq!(SEEN.load(Ordering::Relaxed), 1, "sleep");
    spillway::CoarseClock::new().park_timeout(Duration::ZERO);
    assert_eq!(SEEN.load(Ordering::Relaxed), 2, "park_timeout");
    spillway::set_blocking_wait_hook(None);
}
