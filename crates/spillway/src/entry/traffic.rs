/// Which way a call crosses the service boundary.
///
/// Inbound entries (requests this service serves) also count in the global inbound node that
/// system protection reads; outbound entries (calls this service makes) do not. The default is
/// outbound, as in Sentinel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrafficType {
    /// A request served by this service.
    Inbound,
    /// A call made by this service.
    #[default]
    Outbound,
}
