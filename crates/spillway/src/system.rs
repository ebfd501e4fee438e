//! System adaptive protection: Sentinel's system rule with its BBR check, container-aware
//! probes, and a sturdier minimum-RT estimate.
//!
//! A [`SystemRule`] guards the whole service rather than one resource: it checks every inbound
//! entry (see [`TrafficType::Inbound`](crate::TrafficType::Inbound)) against the global inbound
//! node and the machine's state before any flow rule. Its load and CPU thresholds do not cap
//! traffic at a number; they switch on the BBR check, which admits as many calls in flight as
//! the service has shown it can carry, `max_success_qps x min_rt`, and refuses the rest, so a
//! struggling service sheds exactly the queue and recovers as soon as its RT does.
//!
//! - [`SystemRules`]: a merged, validated set; usable on its own against any
//!   [`ResourceNode`](crate::stats::ResourceNode) and [`SystemProbe`].
//! - [`SystemProbe`]: where load and CPU usage come from: [`LinuxProbe`] (host or container,
//!   sampled once a second) or [`ManualProbe`] (tests).
//!
//! Load them with [`Spillway::load_system_rules`](crate::Spillway::load_system_rules).
//!
//! The BBR check is kept exactly as Sentinel has it. Its limit is measured on the traffic it
//! admits, so once it shrinks nothing makes it grow, and its minimum RT is the fastest single
//! call: after a slowdown it can hold a service at a fraction of its capacity. A BBR that
//! probes upward and measures the RT robustly is [`adaptive::Bbr`](crate::adaptive::Bbr), as an
//! adaptive rule on all inbound traffic; the overload lab measures both (`docs/overload.md`).
//!
//! # Deviations from Sentinel
//!
//! - Response times are microseconds, not milliseconds: the BBR limit of a service whose calls
//!   take 200 µs is `max_success_qps x 0.0002`, where Sentinel's 1 ms floor would allow five
//!   times too many. `avg_rt` is compared in microseconds.
//! - `max_concurrency` is exact (checked and counted in one step, last), where Sentinel's
//!   read-then-admit check lets `max + 1` and more through.
//! - [`MinRtEstimate::BucketAverage`] is offered next to Sentinel's exact minimum, and
//!   [`CpuStrategy::Bbr`] next to Sentinel's outright CPU block.
//! - In a container with a CPU quota, [`LinuxProbe`] measures CPU against the quota and reports
//!   a load for the container rather than the host's load1.

mod cgroup;
mod check;
mod linux;
mod probe;
mod rule;
mod validate;

pub use check::{bbr_limit, SystemBlock, SystemCheck, SystemRules};
pub use linux::{LinuxProbe, LinuxProbeBuilder, LoadSignal};
pub use probe::{ManualProbe, SystemProbe};
pub use rule::{CpuStrategy, MinRtEstimate, SystemRule};
pub use validate::{validate_system_rules, SystemRuleError, MAX_MIN_RT_WINDOW};

#[cfg(all(test, not(spillway_loom)))]
mod tests;
