//! The refusal's `RateLimit-Policy` and `RateLimit` fields, parsed as the RFC 9651 Structured
//! Field Lists draft-ietf-httpapi-ratelimit-headers-10 makes them, for each kind of refusal.

use http::Response;
use spillway::adaptive::{AdaptiveAlgorithm, AdaptiveRule, AimdConfig};
use spillway::flow::{Behavior, FlowRule, Strategy};
use spillway::keyed::KeyedRule;
use spillway::{BlockError, ManualClock, Spillway};
use spillway_tower::too_many_requests;
use std::time::Duration;

/// One member of a field's List: its name (a String) and its parameters.
#[derive(Debug)]
struct Member {
    name: String,
    params: sfv::Parameters,
}

impl Member {
    fn integer(&self, key: &str) -> Option<i64> {
        self.params.get(key).map(|value| {
            i64::from(
                value
                    .as_integer()
                    .unwrap_or_else(|| panic!("{key} is an Integer: {value:?}")),
            )
        })
    }

    fn string(&self, key: &str) -> Option<String> {
        self.params.get(key).map(|value| {
            value
                .as_string()
                .unwrap_or_else(|| panic!("{key} is a String: {value:?}"))
                .as_str()
                .to_owned()
        })
    }
}

/// The field `name` of `response` parsed as a List of Items named by Strings, or `None` when
/// absent.
fn list<B>(response: &Response<B>, name: &str) -> Option<Vec<Member>> {
    let value = response.headers().get(name)?;
    let list: sfv::List = sfv::Parser::new(value.as_bytes())
        .parse()
        .unwrap_or_else(|err| panic!("{name}: {value:?} is not a Structured List: {err}"));
    assert!(!list.is_empty(), "{name} is an empty list");
    Some(
        list.into_iter()
            .map(|entry| match entry {
                sfv::ListEntry::Item(item) => Member {
                    name: item
                        .bare_item
                        .as_string()
                        .unwrap_or_else(|| panic!("{name}: a policy's name is a String"))
                        .as_str()
                        .to_owned(),
                    params: item.params,
                },
                sfv::ListEntry::InnerList(_) => panic!("{name}: an inner list"),
            })
            .collect(),
    )
}

/// What a refusal's fields say, checked against the draft's rules on the way.
#[derive(Debug, PartialEq)]
struct Fields {
    policy: String,
    q: i64,
    qu: Option<String>,
    w: Option<i64>,
    r: i64,
    t: Option<i64>,
    retry_after: Option<i64>,
}

/// The fields of the 429 for `err`, or `None` if it has none; panics where the draft is broken.
fn fields(err: &BlockError, spillway: &Spillway) -> (Option<Fields>, Option<i64>) {
    let response = too_many_requests(err, spillway);
    assert_eq!(response.status(), 429);
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().parse::<i64>().unwrap());
    let (policies, states) = (
        list(&response, "ratelimit-policy"),
        list(&response, "ratelimit"),
    );
    let (Some(policies), Some(states)) = (policies, states) else {
        assert!(
            response.headers().get("ratelimit-policy").is_none()
                && response.headers().get("ratelimit").is_none(),
            "both fields or neither"
        );
        return (None, retry_after);
    };
    assert_eq!((policies.len(), states.len()), (1, 1));
    let (policy, state) = (&policies[0], &states[0]);
    // RateLimit names a policy that RateLimit-Policy gives.
    assert_eq!(state.name, policy.name);
    let q = policy.integer("q").expect("q is required");
    let r = state.integer("r").expect("r is required");
    let w = policy.integer("w");
    let t = state.integer("t");
    let qu = policy.string("qu");
    assert!(q >= 0 && r >= 0 && r <= q.max(0));
    assert!(w.is_none_or(|w| w >= 1), "a window is at least 1 s");
    assert!(
        qu.as_deref()
            .is_none_or(|qu| ["content-bytes", "concurrent-requests"].contains(&qu)),
        "a registered unit other than the default: {qu:?}"
    );
    if qu.as_deref() == Some("concurrent-requests") {
        assert_eq!(w, None, "calls in flight have no window");
    }
    if let (Some(t), Some(retry)) = (t, retry_after) {
        assert!(retry >= t, "Retry-After never earlier than t");
    }
    assert!(
        t.is_none() || retry_after.is_some(),
        "no t without Retry-After"
    );
    let fields = Fields {
        policy: policy.name.clone(),
        q,
        qu,
        w,
        r,
        t,
        retry_after,
    };
    (Some(fields), retry_after)
}

fn manual() -> (Spillway, ManualClock) {
    let clock = ManualClock::new();
    (Spillway::new_with_clock(clock.clone()), clock)
}

#[test]
fn a_qps_rule_advertises_its_count_per_second_and_when_to_retry() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("search", "search", 2.7)])
        .unwrap();
    for _ in 0..2 {
        drop(spillway.entry("search").enter().unwrap());
    }
    let err = spillway.entry("search").enter().unwrap_err();
    let (fields, _) = fields(&err, &spillway);
    assert_eq!(
        fields,
        Some(Fields {
            policy: "search".into(),
            q: 2,
            qu: None,
            w: Some(1),
            r: 0,
            t: Some(1),
            retry_after: Some(1),
        })
    );
}

#[test]
fn a_cold_warm_up_rule_advertises_what_it_allows_now() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("warm", "search", 10.0)
            .with_behavior(Behavior::warm_up(Duration::from_secs(10)))])
        .unwrap();
    let mut passed = 0;
    let err = loop {
        match spillway.entry("search").enter() {
            Ok(_entry) => passed += 1,
            Err(err) => break err,
        }
    };
    assert_eq!(passed, 3);
    let (fields, _) = fields(&err, &spillway);
    let fields = fields.unwrap();
    assert_eq!((fields.q, fields.w, fields.r), (3, Some(1), 0));
    // The body's numbers are rounded.
    let body = too_many_requests(&err, &spillway).into_body();
    let body = std::str::from_utf8(&body).unwrap();
    assert!(
        body.contains("observed 3 against threshold 3.33,"),
        "{body}"
    );
}

#[test]
fn limits_of_calls_in_flight_give_a_unit_and_no_time_to_retry() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::in_flight("upload", 1).with_id("one-upload")])
        .unwrap();
    spillway
        .load_keyed_rules(vec![
            KeyedRule::in_flight("export", 1).with_id("one-per-user")
        ])
        .unwrap();
    spillway
        .load_adaptive_rules(vec![AdaptiveRule::resource(
            "adaptive",
            "report",
            AdaptiveAlgorithm::Aimd(AimdConfig {
                initial_limit: 2,
                min_limit: 2,
                max_limit: 2,
                ..AimdConfig::default()
            }),
        )])
        .unwrap();
    let _upload = spillway.entry("upload").enter().unwrap();
    let _export = spillway.entry("export").key("bob").enter().unwrap();
    let _reports = [
        spillway.entry("report").enter().unwrap(),
        spillway.entry("report").enter().unwrap(),
    ];
    for (resource, key, policy, q) in [
        ("upload", None, "one-upload", 1),
        ("export", Some("bob"), "one-per-user", 1),
        ("report", None, "adaptive", 2),
    ] {
        let entry = spillway.entry(resource);
        let entry = match key {
            Some(key) => entry.key(key),
            None => entry,
        };
        let err = entry.enter().unwrap_err();
        let (fields, retry_after) = fields(&err, &spillway);
        assert_eq!(
            retry_after, None,
            "{resource}: a place frees when a call ends"
        );
        assert_eq!(
            fields,
            Some(Fields {
                policy: policy.into(),
                q,
                qu: Some("concurrent-requests".into()),
                w: None,
                r: 0,
                t: None,
                retry_after: None,
            }),
            "{resource}"
        );
    }
}

#[test]
fn a_per_key_qps_rule_advertises_its_count_per_window() {
    let (spillway, _clock) = manual();
    spillway
        .load_keyed_rules(vec![
            KeyedRule::qps("per-user", "api", 5.0).with_duration(Duration::from_secs(60))
        ])
        .unwrap();
    let err = loop {
        if let Err(err) = spillway.entry("api").key("alice").enter() {
            break err;
        }
    };
    let (fields, _) = fields(&err, &spillway);
    let fields = fields.unwrap();
    assert_eq!(
        (fields.policy.as_str(), fields.q, fields.w, fields.qu),
        ("per-user", 5, Some(60), None)
    );
    assert_eq!(fields.retry_after, Some(60));
}

#[test]
fn a_rule_on_another_resource_advertises_no_quota_of_this_client() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("while-writes", "read", 0.0)
            .with_strategy(Strategy::Relate {
                ref_resource: "write".into(),
            })])
        .unwrap();
    let err = spillway.entry("read").enter().unwrap_err();
    let (fields, retry_after) = fields(&err, &spillway);
    assert_eq!(fields, None);
    assert_eq!(retry_after, Some(1));
}

#[test]
// A count past any `u32` takes Sentinel's form, now deprecated for concurrency rules.
#[allow(deprecated)]
fn odd_names_and_huge_counts_still_parse() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![
            FlowRule::in_flight("busy", 1).with_id("say \"hi\" \\ é"),
            FlowRule::concurrency("huge", "huge", 1e18),
        ])
        .unwrap();
    let _held = spillway.entry("busy").enter().unwrap();
    let err = spillway.entry("busy").enter().unwrap_err();
    let (odd, _) = fields(&err, &spillway);
    assert_eq!(odd.unwrap().policy, "say \"hi\" \\ _");
    // A count past a Structured Field Integer's 15 digits is advertised as the largest one.
    let huge =
        BlockError::custom(spillway::BlockKind::Flow, "huge", 1e18, 1e18).with_rule_id("huge");
    let (huge, _) = fields(&huge, &spillway);
    assert_eq!(huge.unwrap().q, 999_999_999_999_999);
}

#[test]
fn a_key_with_an_exception_is_refused_at_its_own_quota() {
    let (spillway, _clock) = manual();
    spillway
        .load_keyed_rules(vec![KeyedRule::per_second("api", 2)
            .with_id("per-user")
            .with_exception("partner", 5)])
        .unwrap();
    let mut passed = 0;
    let err = loop {
        match spillway.entry("api").key("partner").enter() {
            Ok(_entry) => passed += 1,
            Err(err) => break err,
        }
    };
    let (fields, _) = fields(&err, &spillway);
    assert_eq!((passed, fields.unwrap().q), (5, 5));
}

#[test]
fn a_cold_pacing_warm_up_advertises_the_rate_it_paces_at_now() {
    let (spillway, _clock) = manual();
    spillway
        .load_flow_rules(vec![FlowRule::qps("paced", "export", 30.0).with_behavior(
            Behavior::WarmUpThrottle {
                period: Duration::from_secs(10),
                cold_factor: 3,
                max_queueing_time: Duration::ZERO,
            },
        )])
        .unwrap();
    let err = loop {
        if let Err(err) = spillway.entry("export").enter() {
            break err;
        }
    };
    let (fields, _) = fields(&err, &spillway);
    // Cold: a third of 30 a second.
    assert_eq!(fields.unwrap().q, 10);
}

/// A policy of an admitted response: name, `q`, `qu`, `w` and the `RateLimit` item's `r`.
type Admitted = (String, i64, Option<String>, Option<i64>, i64);

/// The IETF fields of an admitted response, parsed: each policy's name, `q`, `qu`, `w` and
/// the `RateLimit` item of the same name's `r`; checked against the draft on the way.
fn admitted<B>(response: &Response<B>) -> Vec<Admitted> {
    let (Some(policies), Some(states)) = (
        list(response, "ratelimit-policy"),
        list(response, "ratelimit"),
    ) else {
        panic!("an admitted response with quotas carries both fields");
    };
    assert_eq!(policies.len(), states.len(), "an item each");
    assert!(response.headers().get("retry-after").is_none());
    policies
        .iter()
        .zip(&states)
        .map(|(policy, state)| {
            assert_eq!(state.name, policy.name, "in the same order");
            assert_eq!(state.integer("t"), None, "no reset time is known");
            let (q, r) = (policy.integer("q").unwrap(), state.integer("r").unwrap());
            assert!(q >= 0 && r >= 0);
            let qu = policy.string("qu");
            let w = policy.integer("w");
            if qu.is_some() {
                assert_eq!(w, None, "calls in flight have no window");
            }
            (policy.name.clone(), q, qu, w, r)
        })
        .collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn admitted_responses_count_down_what_is_left() {
    use spillway_tower::protect::RateLimitFields;
    use spillway_tower::{SpillwayLayer, TokioClock};
    use tower::{service_fn, Layer, ServiceExt};

    let spillway = Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![
            FlowRule::per_second("api", 3),
            FlowRule::in_flight("api", 8).with_id("eight-at-once"),
        ])
        .unwrap();
    spillway
        .load_keyed_rules(vec![KeyedRule::per_second("api", 2)
            .with_id("per-user")
            .with_duration(Duration::from_secs(60))])
        .unwrap();
    let service = SpillwayLayer::new(spillway)
        .fixed_resource("api")
        .key_header(0, "x-user")
        .ratelimit_on_admitted(RateLimitFields::Both)
        .layer(service_fn(|_request: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        }));
    let call = |user: &'static str| {
        let service = service.clone();
        async move {
            let request = http::Request::builder()
                .header("x-user", user)
                .body(String::new())
                .unwrap();
            service.oneshot(request).await.unwrap()
        }
    };
    let first = call("alice").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        admitted(&first),
        [
            ("api".to_owned(), 3, None, Some(1), 2),
            // The call itself is in flight as the fields are read.
            (
                "eight-at-once".to_owned(),
                8,
                Some("concurrent-requests".to_owned()),
                None,
                7
            ),
            ("per-user".to_owned(), 2, None, Some(60), 1),
        ]
    );
    // The legacy fields give the quota of requests with the least left.
    assert_eq!(first.headers()["x-ratelimit-limit"], "2");
    assert_eq!(first.headers()["x-ratelimit-remaining"], "1");
    // The entry is held until the response's body ends.
    drop(first);
    let second = call("alice").await;
    let left: Vec<i64> = admitted(&second).iter().map(|policy| policy.4).collect();
    assert_eq!(left, [1, 7, 0]);
    // Alice's quota is spent; Bob's is his own, and the second's is shared.
    drop(second);
    assert_eq!(call("alice").await.status(), 429);
    let bob = call("bob").await;
    let left: Vec<i64> = admitted(&bob).iter().map(|policy| policy.4).collect();
    assert_eq!(left, [0, 7, 1]);
    // Off by default, though the request meets a quota.
    let spillway = Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![FlowRule::per_second("api", 3)])
        .unwrap();
    let plain = SpillwayLayer::new(spillway)
        .fixed_resource("api")
        .layer(service_fn(|_request: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        }));
    let response = plain
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("ratelimit").is_none());
    assert!(response.headers().get("x-ratelimit-limit").is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn admitted_fields_add_to_the_service_s_own() {
    use spillway_tower::protect::RateLimitFields;
    use spillway_tower::{SpillwayLayer, TokioClock};
    use tower::{service_fn, Layer, ServiceExt};

    let spillway = Spillway::new_with_clock(TokioClock::new());
    spillway
        .load_flow_rules(vec![FlowRule::per_second("api", 5)])
        .unwrap();
    let service = SpillwayLayer::new(spillway)
        .fixed_resource("api")
        .ratelimit_on_admitted(RateLimitFields::Ietf)
        .layer(service_fn(|_request: http::Request<String>| async {
            let mut response = http::Response::new(String::new());
            let headers = response.headers_mut();
            headers.insert(
                "ratelimit-policy",
                r#""upstream";q=100;w=60"#.parse().unwrap(),
            );
            headers.insert("ratelimit", r#""upstream";r=99"#.parse().unwrap());
            Ok::<_, std::convert::Infallible>(response)
        }));
    let response = service
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    // Two lines of each field, read as one list.
    let lines = |name| response.headers().get_all(name).iter().count();
    assert_eq!((lines("ratelimit-policy"), lines("ratelimit")), (2, 2));
    let joined = |name| {
        let values: Vec<_> = response
            .headers()
            .get_all(name)
            .iter()
            .map(|value| value.to_str().unwrap().to_owned())
            .collect();
        values.join(", ")
    };
    let mut combined = http::Response::new(());
    combined.headers_mut().insert(
        "ratelimit-policy",
        joined("ratelimit-policy").parse().unwrap(),
    );
    combined
        .headers_mut()
        .insert("ratelimit", joined("ratelimit").parse().unwrap());
    let names: Vec<(String, i64)> = admitted(&combined)
        .into_iter()
        .map(|policy| (policy.0, policy.4))
        .collect();
    assert_eq!(names, [("upstream".to_owned(), 99), ("api".to_owned(), 4)]);
}
