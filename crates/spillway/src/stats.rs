//! Statistics: striped counters, sliding windows and the per-resource node.
//!
//! - [`StripedCounter`] is the LongAdder of Sentinel (and of Java): one cache-padded atomic per
//!   stripe, a stripe chosen per thread, summed on read.
//! - [`SlidingWindow`] is Sentinel's `LeapArray`: a ring of buckets over an interval, each bucket
//!   holding pass, block, success, error, RT sum, min RT and occupied-pass counts, rolled over
//!   lock-free as time moves on.
//! - [`ResourceNode`] is Sentinel's `StatisticNode`: a second window, a minute window and a
//!   concurrency gauge, with the reads flow and system rules need.

mod accumulator;
mod event;
mod node;
mod ring;
mod short_line;
mod striped;
mod tagged;
mod window;
mod window_config;

#[cfg(all(test, spillway_loom))]
mod tests;

pub use event::Event;
pub use node::{NodeConfig, NodeStats, ResourceNode};
pub(crate) use short_line::ShortLine;
pub use striped::StripedCounter;
pub use window::{Bucket, SlidingWindow, WindowSnapshot};
pub use window_config::{WindowConfig, WindowConfigError, DEFAULT_MAX_RT, MAX_BUCKETS};

pub use striped::default_stripes;
