//! What a rule in shadow mode would have done, handed to the service and to outer layers.

/// The flow rule in shadow mode that would have refused a request, which spillway admitted
/// anyway (see [`FlowRule::with_shadow`](spillway::flow::FlowRule::with_shadow)).
///
/// The layer inserts it into the request's extensions, for the inner service (to log it, say),
/// and into the response's, for the layers outside (a metrics or access-log layer). Requests no
/// shadow rule would have refused carry none.
///
/// # Examples
///
/// ```
/// use axum::routing::get;
/// use axum::Router;
/// use spillway::flow::FlowRule;
/// use spillway_tower::protect::ShadowRefusal;
/// use spillway_tower::{SpillwayLayer, TokioClock};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spillway = spillway::Spillway::new_with_clock(TokioClock::new());
/// // Try a limit of 1 a second on live traffic before enforcing it.
/// spillway.load_flow_rules(vec![FlowRule::qps("try-1", "hello", 1.0).with_shadow(true)])?;
/// let app = Router::new()
///     .route("/hello", get(|| async { "hi" }))
///     .layer(SpillwayLayer::new(spillway.clone()).fixed_resource("hello"));
///
/// let request = || http::Request::get("/hello").body(axum::body::Body::empty()).unwrap();
/// let first = app.clone().oneshot(request()).await?;
/// assert_eq!(first.extensions().get::<ShadowRefusal>(), None);
/// let second = app.clone().oneshot(request()).await?;
/// assert_eq!(second.status(), 200); // admitted
/// assert_eq!(
///     second.extensions().get::<ShadowRefusal>(),
///     Some(&ShadowRefusal { rule: "try-1" }),
/// );
/// assert_eq!(spillway.flow_rule_stats("try-1").unwrap().shadow_refusals, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowRefusal {
    /// The rule's id.
    pub rule: &'static str,
}

impl ShadowRefusal {
    /// The shadow refusal an entry carries, if any.
    pub(super) fn of(entry: &spillway::OwnedEntry) -> Option<Self> {
        entry.shadow_rule().map(|rule| Self { rule })
    }

    /// Inserts the entry's shadow refusal, if any, into `extensions`.
    #[inline]
    pub(super) fn mark(entry: &spillway::OwnedEntry, extensions: &mut http::Extensions) {
        if let Some(refusal) = Self::of(entry) {
            extensions.insert(refusal);
        }
    }
}

/// The refusal a request met in a layer in shadow mode
/// ([`SpillwayLayer::shadow`](super::SpillwayLayer::shadow)), which let it go on without an
/// entry: in the request's extensions, for the inner service, and in the response's, for the
/// layers outside. Requests that met none carry none.
#[derive(Debug, Clone)]
pub struct ShadowBlock(pub spillway::BlockError);
