//! One place decides what follows an attempt to enter: the call, a wait, or an answer.

use super::admit::{quotas, Refused};
use super::blocked::Blocked;
use super::config::Config;
use super::fields::{admitted_fields, RateLimitFields};
use super::shadow::{ShadowBlock, ShadowRefusal};
use crate::grpc::is_grpc;
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use spillway::{BlockError, BlockKind, OwnedAdmission, OwnedEntry};

/// What follows an attempt to enter.
pub(super) enum Next<R> {
    /// Call the inner service, holding the entry; in shadow mode after a refusal, with no
    /// entry and the refusal.
    Call {
        request: R,
        entry: Option<OwnedEntry>,
        shadowed: Option<Box<BlockError>>,
        /// The rate-limit fields to add to the response, if the layer sends them on admitted
        /// responses.
        fields: Option<Box<HeaderMap>>,
    },
    /// Wait for a queued admission (a pacing rule's turn, a place in an adaptive queue).
    Wait(OwnedAdmission, R),
    /// Wait for the resource's cluster rules to be ready, then enter again.
    Ready(String, R),
    /// Answer at once, without calling.
    Answer(Response<Bytes>),
}

/// Decides what follows `admission` of `request`. `may_wait` says whether a refusal for want
/// of a cluster lease may still wait for a refill and enter again (once per request after its
/// first wait: see `docs/cluster.md`).
pub(super) fn decide<B>(
    config: &Config,
    admission: Result<OwnedAdmission, Refused>,
    request: Request<B>,
    may_wait: bool,
) -> Next<Request<B>> {
    match admission {
        Ok(OwnedAdmission::Ready(entry)) => {
            let (mut request, fields) = if config.admitted == RateLimitFields::None {
                (request, None)
            } else {
                admitted(config, request)
            };
            ShadowRefusal::mark(&entry, request.extensions_mut());
            Next::Call {
                request,
                entry: Some(entry),
                shadowed: None,
                fields,
            }
        }
        Ok(admission) => Next::Wait(admission, request),
        Err(Refused::Missing(missing)) => Next::Answer(missing.response()),
        Err(Refused::Blocked(err)) => refused(config, err, request, may_wait),
    }
}

/// A refusal by a check: once more after a lease's refill, let through in shadow mode, or
/// answered.
fn refused<B>(
    config: &Config,
    err: BlockError,
    request: Request<B>,
    may_wait: bool,
) -> Next<Request<B>> {
    // The pass a refill brought went before this request took it (another took it, or the
    // lease expired in between), and the limit is not known full: after one more refill.
    if may_wait
        && err.kind() == BlockKind::Cluster
        && !config.spillway.cluster_is_ready(err.resource(), 1)
    {
        return Next::Ready(err.resource().to_owned(), request);
    }
    if config.shadow {
        let mut request = request;
        request.extensions_mut().insert(ShadowBlock(err.clone()));
        return Next::Call {
            request,
            entry: None,
            shadowed: Some(Box::new(err)),
            fields: None,
        };
    }
    let (parts, _body) = request.into_parts();
    let mut response = (config.blocked)(&err, &parts, &config.spillway);
    response.extensions_mut().insert(Blocked(err));
    Next::Answer(response)
}

/// The rate-limit fields of the response to `request`, just admitted, when the layer sends
/// them on admitted responses: none for a gRPC call, nor when its entry meets no quota. The
/// request's resource and keys are read again, as the admission read them (the cost of the
/// option: its extractors run twice).
#[inline(never)]
fn admitted<B>(config: &Config, request: Request<B>) -> (Request<B>, Option<Box<HeaderMap>>) {
    if is_grpc(request.headers()) {
        return (request, None);
    }
    let (parts, body) = request.into_parts();
    let quotas = quotas(config, config.reads_request().then_some(&parts));
    let fields = admitted_fields(&quotas, config.admitted);
    let fields = (!fields.is_empty()).then(|| Box::new(fields));
    (Request::from_parts(parts, body), fields)
}
