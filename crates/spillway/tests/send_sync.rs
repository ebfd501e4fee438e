//! Every public type is `Send` and `Sync` (checked at compile time).

use spillway::stats::{
    Event, NodeConfig, NodeStats, ResourceNode, SlidingWindow, StripedCounter, WindowConfig,
    WindowConfigError, WindowSnapshot,
};
use spillway::*;

fn is_send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    is_send_sync::<ManualClock>();
    is_send_sync::<SystemClock>();
    is_send_sync::<CoarseClock>();
    is_send_sync::<StdClock>();
    is_send_sync::<Box<dyn Clock>>();
    is_send_sync::<Spillway>();
    is_send_sync::<SpillwayBuilder>();
    is_send_sync::<Resource>();
    is_send_sync::<Entry<'static>>();
    is_send_sync::<OwnedEntry>();
    is_send_sync::<EntryBuilder<'static>>();
    is_send_sync::<TrafficType>();
    is_send_sync::<BlockError>();
    is_send_sync::<BlockKind>();
    is_send_sync::<OverflowPolicy>();
    is_send_sync::<Snapshot>();
    is_send_sync::<ResourceSnapshot>();
    is_send_sync::<StripedCounter>();
    is_send_sync::<SlidingWindow>();
    is_send_sync::<WindowConfig>();
    is_send_sync::<WindowConfigError>();
    is_send_sync::<WindowSnapshot>();
    is_send_sync::<Event>();
    is_send_sync::<ResourceNode>();
    is_send_sync::<NodeConfig>();
    is_send_sync::<NodeStats>();
    is_send_sync::<RateLimiter>();
    is_send_sync::<RateLimiterError>();
    is_send_sync::<Reservation<'static>>();
    is_send_sync::<Admission<'static>>();
    is_send_sync::<Pending<'static>>();
    is_send_sync::<OwnedPending>();
    is_send_sync::<OwnedAdmission>();
    is_send_sync::<spillway::flow::FlowRule>();
    is_send_sync::<spillway::flow::FlowRuleError>();
    is_send_sync::<spillway::flow::Throttle>();
    is_send_sync::<spillway::flow::WarmUp>();
    is_send_sync::<spillway::flow::WarmUpThrottle>();
    is_send_sync::<spillway::flow::QpsReject>();
    is_send_sync::<spillway::flow::ConcurrencyLimit>();
    is_send_sync::<spillway::flow::Decision>();
    is_send_sync::<spillway::dubbo::TpsLimiter>();
    is_send_sync::<spillway::dubbo::TpsState>();
    is_send_sync::<spillway::dubbo::TpsKey>();
    is_send_sync::<spillway::dubbo::ExecuteLimiter>();
    is_send_sync::<spillway::dubbo::ExecuteKey>();
    is_send_sync::<spillway::dubbo::ExecutePermit>();
    is_send_sync::<spillway::dubbo::ExecuteKeyPermit<'static>>();
    is_send_sync::<spillway::dubbo::ActiveLimiter>();
    is_send_sync::<spillway::dubbo::ActiveLimiterBuilder>();
    is_send_sync::<spillway::dubbo::ActiveKey>();
    is_send_sync::<spillway::dubbo::ActiveAdmission>();
    is_send_sync::<spillway::dubbo::ActiveWait>();
    is_send_sync::<spillway::dubbo::ActivePermit>();
    is_send_sync::<spillway::dubbo::ActiveState>();
}
