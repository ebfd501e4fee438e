//! The mark of a call that may run on after its client leaves: sent on to its upstream (see
//! `finishing`), and whether its client has left.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The request was sent on to its upstream.
const FORWARDED: u8 = 1;
/// The client's body has ended (or it had none).
const BODY_ENDED: u8 = 2;
/// The client left (its call runs on).
const CLIENT_GONE: u8 = 4;

/// What the forwarder marks when it sends its request on, and the request's body when it
/// ends: from then on the call runs on if its client leaves.
#[derive(Debug, Clone)]
pub(crate) struct Forwarding(Arc<AtomicU8>);

impl Forwarding {
    /// A new mark for a call that may run on (`run_on`), to give its forwarder; `None` if it
    /// may not.
    pub(super) fn when(run_on: bool) -> Option<Self> {
        run_on.then(|| Self(Arc::new(AtomicU8::new(0))))
    }

    /// The request is being sent to its upstream (an upstream connection may still be
    /// made for it).
    pub(super) fn forwarded(&self) {
        // Relaxed: a flag, read when the call is dropped; the body's end may be marked by the
        // upstream connection's task, on the same worker thread.
        self.0.fetch_or(FORWARDED, Ordering::Relaxed);
    }

    /// The client's body has ended.
    pub(crate) fn body_ended(&self) {
        self.0.fetch_or(BODY_ENDED, Ordering::Relaxed);
    }

    /// Whether the call may run on: forwarded (a body still coming then waits out the body
    /// timeout, see [`ClientBody`](super::client_body::ClientBody)).
    pub(super) fn may_run_on(&self) -> bool {
        self.0.load(Ordering::Relaxed) & FORWARDED != 0
    }

    /// Whether the client's body has ended.
    pub(super) fn body_has_ended(&self) -> bool {
        self.0.load(Ordering::Relaxed) & BODY_ENDED != 0
    }

    /// The client left: its call runs on.
    pub(super) fn client_left(&self) {
        self.0.fetch_or(CLIENT_GONE, Ordering::Release);
    }

    /// Whether the client left.
    pub(super) fn client_gone(&self) -> bool {
        self.0.load(Ordering::Acquire) & CLIENT_GONE != 0
    }
}
