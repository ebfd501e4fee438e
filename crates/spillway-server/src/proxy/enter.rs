//! A request's entry into its route's resource: its cluster rules made ready, its origin and
//! keys read, and the entry made (with a pacing rule's or an adaptive queue's wait).

use super::forward::Peer;
use super::table::{RouteInfo, Table};
use super::{Proxy, ProxyBody};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use spillway::{BlockError, BlockKind, OwnedEntry};

impl Proxy {
    /// Enters `route`'s resource for `request` from `peer`: the entry or the refusal, or the
    /// answer to a request without a key its route's per-key rule requires (400, naming where
    /// the key was expected, never echoing a value).
    pub(super) async fn enter(
        &self,
        route: &RouteInfo,
        request: &Request<Incoming>,
        peer: &Peer,
        table: &Table,
    ) -> Result<Result<OwnedEntry, BlockError>, Response<ProxyBody>> {
        let spillway = &self.inner.spillway;
        // A leased cluster rule whose lease holds no pass (a quiet route, the first request
        // after start) asks for a refill and waits for it, within twice the call timeout, so
        // that a quiet route is not refused for want of a lease.
        spillway.cluster_ready(&route.resource, 1).await;
        let origin = self
            .inner
            .origin_header
            .as_ref()
            .and_then(|name| request.headers().get(name))
            .and_then(|value| value.to_str().ok());
        let mut waited_again = false;
        loop {
            let builder = match crate::keyed::with_keys(
                spillway.entry(&route.resource).inbound(),
                &route.keys,
                request,
                peer.addr().ip(),
                &table.trusted_proxies,
            ) {
                Ok(builder) => builder,
                Err(missing) => {
                    super::metrics_missing_key(&self.inner.metrics, &route.resource);
                    return Err(ProxyBody::text(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "this route limits requests per `{}`, and this request has none\n",
                            missing.source
                        ),
                    ));
                }
            };
            let admission = match origin {
                Some(origin) => builder.origin(origin).try_enter_owned(),
                None => builder.try_enter_owned(),
            };
            match admission {
                // The pass the wait brought went before the entry took it (another request of
                // this process took it, or the lease expired in between), and the limit is
                // not known full: once more, after a refill, as for a quiet route.
                Err(err)
                    if err.kind() == BlockKind::Cluster
                        && !waited_again
                        && !spillway.cluster_is_ready(&route.resource, 1) =>
                {
                    waited_again = true;
                    spillway.cluster_ready(&route.resource, 1).await;
                }
                // A pacing rule's wait, or one in an adaptive limit's queue.
                Ok(admission) => return Ok(spillway_tower::admit_owned(admission).await),
                Err(err) => return Ok(Err(err)),
            }
        }
    }
}
