//! `spillway check`: every problem names the file, the line and the field.

use spillway_server::checked::parse;

const UPSTREAM: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n";

fn error(text: &str) -> String {
    parse(text, "spillway.toml").unwrap_err().to_string()
}

#[test]
fn a_good_file_parses() {
    let text = format!(
        "{UPSTREAM}
[listener]
listen = \"127.0.0.1:8080\"
max_connections = 100
at_capacity = \"close\"

[[route]]
resource = \"orders\"
methods = [\"GET\", \"POST\"]
path = \"/orders/{{id}}\"
upstream = \"app\"
executes = 10
actives = {{ max = 5, timeout = \"200ms\" }}
tps = {{ rate = 100, interval = \"1s\" }}

[default]
upstream = \"app\"

[[flow]]
id = \"orders-qps\"
resource = \"orders\"
count = 100

[[system]]
id = \"guard\"
highest_cpu_usage = 0.8
cpu_strategy = \"bbr\"

[[breaker]]
id = \"orders-errors\"
resource = \"orders\"
strategy = {{ type = \"error_ratio\", threshold = 0.5 }}
retry_timeout = \"10s\"

[[adaptive]]
id = \"service\"
algorithm = {{ type = \"envoy_gradient\", min_rtt_interval = \"30s\", remeasure = \"always\", start_limit = 50 }}

[[adaptive]]
id = \"orders-adaptive\"
resource = \"orders\"
algorithm = {{ type = \"gradient2\", min_limit = 1 }}
"
    );
    let config = parse(&text, "spillway.toml").unwrap();
    assert_eq!(config.routes.len(), 1);
    assert_eq!(config.default.unwrap().get_ref().resource, "unmatched");
    assert_eq!(config.adaptive.len(), 2);
    let envoy = &config.adaptive[0].get_ref().algorithm;
    assert!(
        matches!(envoy, spillway::adaptive::AdaptiveAlgorithm::EnvoyGradient(c) if c.remeasure == spillway::adaptive::Remeasure::Always && c.start_limit == 50),
        "{envoy:?}"
    );
}

#[test]
fn syntax_and_type_errors_point_at_the_spot() {
    assert_eq!(
        error("[listener]\nlisten = 8080\n"),
        "spillway.toml:2:10: `listener.listen`: invalid type: integer `8080`, expected socket address"
    );
    let unknown = error("[listener]\nlisen = \"127.0.0.1:1\"\n");
    assert!(
        unknown.starts_with("spillway.toml:2:1: `listener.lisen`: unknown field `lisen`"),
        "{unknown}"
    );
    // A syntax error: nothing past it can be read.
    assert!(
        error("[listener\nlisten = 1\n").starts_with("spillway.toml:1:"),
        "{}",
        error("[listener\nlisten = 1\n")
    );
}

#[test]
fn an_upstream_set_aside_brings_no_second_problem_to_its_routes() {
    let text = "[[upstream]]\nname = \"app\"\nurl = 5\n\n[[route]]\nresource = \"r\"\npath = \"/r\"\nupstream = \"app\"\n";
    let err = parse(text, "spillway.toml").unwrap_err();
    let fields: Vec<_> = err.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, [Some("upstream[0].url")], "{err}");
}

#[test]
fn every_problem_is_listed_at_once_type_errors_and_checks_alike() {
    let text = format!(
        "{UPSTREAM}
[listener]
workers = 0
header_timeout = \"zz\"

[[flow]]
id = \"bad\"
resource = \"a\"
count = -1

[[flow]]
id = \"typed\"
resource = \"a\"
count = \"many\"
grade = 1

[[flow]]
id = \"after\"
resource = \"a\"
count = -2
"
    );
    let err = parse(&text, "spillway.toml").unwrap_err();
    let fields: Vec<_> = err.problems().iter().map(|p| p.field()).collect();
    assert_eq!(
        fields,
        [
            Some("listener.workers"),
            Some("listener.header_timeout"),
            Some("flow[0].count"),
            Some("flow[1].count"),
            Some("flow[1].grade"),
            // Named as in the file, though `flow[1]` was read past.
            Some("flow[2].count"),
        ],
        "{err}"
    );
    // Each as `file:line:col: field: message`.
    let lines: Vec<String> = err.to_string().lines().map(str::to_owned).collect();
    assert!(lines[1].starts_with("spillway.toml:"), "{err}");
    assert!(
        lines[1].contains(": `listener.header_timeout`: invalid value: string \"zz\""),
        "{err}"
    );
    // The blanked count is not checked again as its default.
    assert!(!err.to_string().contains("flow[1].count`: must"), "{err}");
}

#[test]
fn a_bad_rule_names_its_line_and_field() {
    let text = format!(
        "{UPSTREAM}
[[flow]]
id = \"ok\"
resource = \"a\"
count = 1

[[flow]]
id = \"bad\"
resource = \"a\"
count = -1
"
    );
    assert_eq!(
        error(&text),
        "spillway.toml:13:1: `flow[1].count`: must be finite and at least 0, got -1"
    );
    let breaker = format!(
        "{UPSTREAM}
[[breaker]]
id = \"b\"
resource = \"a\"
retry_timeout = \"0s\"
strategy = {{ type = \"error_count\", threshold = 3 }}
"
    );
    assert_eq!(
        error(&breaker),
        "spillway.toml:8:1: `breaker[0].retry_timeout`: must be longer than zero"
    );
    let adaptive = format!(
        "{UPSTREAM}
[[adaptive]]
id = \"service\"
algorithm = {{ type = \"envoy_gradient\", min_concurrency = 0 }}
"
    );
    assert_eq!(
        error(&adaptive),
        "spillway.toml:7:1: `adaptive[0].algorithm.min_concurrency`: must be at least 1, got 0"
    );
    let start = error(&format!(
        "{UPSTREAM}\n[[adaptive]]\nid = \"x\"\nalgorithm = {{ type = \"envoy_gradient\", start_limit = 2000 }}\n"
    ));
    assert_eq!(
        start,
        "spillway.toml:7:1: `adaptive[0].algorithm.start_limit`: must be at most `max_limit` (1000), got 2000"
    );
    let unknown = error(&format!(
        "{UPSTREAM}\n[[adaptive]]\nid = \"x\"\nalgorithm = {{ type = \"fancy\" }}\n"
    ));
    assert!(unknown.contains("unknown variant `fancy`"), "{unknown}");
    let remeasure = error(&format!(
        "{UPSTREAM}\n[[adaptive]]\nid = \"x\"\nalgorithm = {{ type = \"envoy_gradient\", remeasure = \"never\" }}\n"
    ));
    assert!(
        remeasure.contains("unknown variant `never`, expected `when_bound` or `always`"),
        "{remeasure}"
    );
    let queue = |fields: &str| {
        error(&format!(
            "{UPSTREAM}\n[[adaptive]]\nid = \"q\"\nalgorithm = {{ type = \"bbr\" }}\nqueue = {{ {fields} }}\n"
        ))
    };
    assert_eq!(
        queue("capacity = 0"),
        "spillway.toml:8:1: `adaptive[0].queue.capacity`: must be at least 1, got 0"
    );
    assert_eq!(
        queue("timeout = \"2m\""),
        "spillway.toml:8:1: `adaptive[0].queue.timeout`: must be at most 60s, got 120s"
    );
    let order = queue("order = \"random\"");
    assert!(
        order.contains("unknown variant `random`, expected one of `fifo`, `lifo`, `adaptive`"),
        "{order}"
    );
    let bbr = error(&format!(
        "{UPSTREAM}\n[[adaptive]]\nid = \"b\"\nalgorithm = {{ type = \"bbr\", drain_gain = 3 }}\n"
    ));
    assert_eq!(
        bbr,
        "spillway.toml:7:1: `adaptive[0].algorithm.drain_gain`: must be a number from 0.5 to 1, got 3"
    );
}

#[test]
fn routes_must_name_known_upstreams_and_valid_paths() {
    let route = |fields: &str| format!("{UPSTREAM}\n[[route]]\nresource = \"r\"\n{fields}\n");
    assert_eq!(
        error(&route("path = \"/a\"\nupstream = \"nope\"")),
        "spillway.toml:8:1: `route[0].upstream`: no upstream is named `nope`"
    );
    assert_eq!(
        error(&route("path = \"a\"\nupstream = \"app\"")),
        "spillway.toml:7:1: `route[0].path`: `a` must start with /"
    );
    assert_eq!(
        error(&route(
            "path = \"/a\"\nupstream = \"app\"\nmethods = [\"G ET\"]"
        )),
        "spillway.toml:9:1: `route[0].methods`: `G ET` is not an HTTP method"
    );
    let bad_url = "[[upstream]]\nname = \"app\"\nurl = \"ftp://x\"\n";
    assert_eq!(
        error(bad_url),
        "spillway.toml:3:1: `upstream[0].url`: `ftp://x` must start with http:// or https://"
    );
    let ca_on_cleartext = "[[upstream]]\nname = \"app\"\nurl = \"http://x\"\nca = \"ca.pem\"\n";
    assert_eq!(
        error(ca_on_cleartext),
        "spillway.toml:4:1: `upstream[0].ca`: is for https:// upstreams, and `http://x` is not one"
    );
    let bad_protocol = "[[upstream]]\nname = \"app\"\nurl = \"http://x\"\nprotocol = \"h3\"\n";
    assert!(
        error(bad_protocol).contains("unknown variant `h3`"),
        "{}",
        error(bad_protocol)
    );
}

#[test]
fn an_admin_listener_off_loopback_needs_a_token() {
    let text = "[admin]\nlisten = \"0.0.0.0:9090\"\n";
    if std::env::var_os("SPILLWAY_ADMIN_TOKEN").is_none() {
        let err = error(text);
        assert!(err.contains("`admin.listen`"), "{err}");
        assert!(err.contains("is not loopback"), "{err}");
    }
    let with_token = "[admin]\nlisten = \"0.0.0.0:9090\"\ntoken = \"s3cret\"\n";
    assert!(parse(with_token, "spillway.toml").is_ok());
}

#[test]
fn the_dashboard_history_settings_are_checked() {
    for (text, why) in [
        (
            "[admin]\nhistory = \"5s\"\n",
            "`admin.history`: must be whole seconds from 10 s to 1 h",
        ),
        ("[admin]\nhistory = \"2h\"\n", "`admin.history`"),
        ("[admin]\nhistory = \"90500ms\"\n", "`admin.history`"),
        (
            "[admin]\nhistory_resources = 0\n",
            "`admin.history_resources`: must be from 1 to 100000",
        ),
        (
            "[admin]\nhistory_resources = 100001\n",
            "`admin.history_resources`",
        ),
    ] {
        let err = error(text);
        assert!(err.contains(why), "{text}: {err}");
    }
    let good = "[admin]\nhistory = \"15m\"\nhistory_resources = 5000\n";
    let config = spillway_server::checked::parse(good, "spillway.toml").unwrap();
    assert_eq!(config.admin.history, std::time::Duration::from_secs(900));
    assert_eq!(config.admin.history_resources, 5000);
}

#[test]
fn the_worker_count_is_a_number_of_threads_or_auto() {
    use spillway_server::config::Workers;
    let workers = |text: &str| parse(text, "spillway.toml").map(|c| c.listener.workers);
    assert_eq!(workers("").unwrap(), Workers::Auto);
    assert_eq!(
        workers("[listener]\nworkers = \"auto\"\n").unwrap(),
        Workers::Auto
    );
    assert_eq!(
        workers("[listener]\nworkers = 3\n").unwrap(),
        Workers::Count(3)
    );
    assert_eq!(Workers::Count(3).resolve().get(), 3);
    assert_eq!(
        Workers::Auto.resolve(),
        std::thread::available_parallelism().unwrap()
    );
    for (value, found) in [
        ("0", "value: integer `0`"),
        ("1025", "value: integer `1025`"),
        ("-2", "value: integer `-2`"),
        ("\"many\"", "value: string \"many\""),
        ("2.5", "type: floating point `2.5`"),
    ] {
        let err = error(&format!("[listener]\nworkers = {value}\n"));
        assert_eq!(
            err,
            format!(
                "spillway.toml:2:11: `listener.workers`: invalid {found}, expected a number of threads from 1 to 1024, or \"auto\""
            ),
            "{value}"
        );
    }
}

#[test]
fn a_blocked_response_needs_an_error_status() {
    assert_eq!(
        error("[blocked]\nstatus = 200\n"),
        "spillway.toml:2:1: `blocked.status`: must be an error status (400 to 599), got 200"
    );
}

#[test]
fn every_problem_is_reported_in_file_order() {
    let text = "\
[listener]
listen = \"127.0.0.1:8080\"
origin_header = \"bad header\"

[admin]
listen = \"127.0.0.1:8080\"
token = \"  \"

[[upstream]]
name = \"app\"
url = \"ftp://127.0.0.1:3000\"

[[route]]
resource = \"orders\"
methods = [\"get\"]
path = \"/orders\"
upstream = \"nope\"

[[flow]]
id = \"a\"
resource = \"orders\"
count = -1

[[flow]]
id = \"a\"
resource = \"orders\"
count = 5

[[flow]]
id = \"c\"
resource = \"orders\"
count = 5
grade = \"concurrency\"
behavior = { type = \"throttle\", max_queueing_time = \"1s\" }
";
    let err = parse(text, "spillway.toml").unwrap_err();
    let lines: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "spillway.toml:3:1: `listener.origin_header`: `bad header` is not a valid header name",
            "spillway.toml:6:1: `admin.listen`: 127.0.0.1:8080 is the proxy's address too \
             (`listener.listen`): give each its own",
            "spillway.toml:7:1: `admin.token`: must not be blank: remove it to run without a \
             token (loopback only)",
            "spillway.toml:11:1: `upstream[0].url`: `ftp://127.0.0.1:3000` must start with \
             http:// or https://",
            "spillway.toml:15:1: `route[0].methods`: `get` must be upper case: methods are \
             case-sensitive, and clients send `GET`",
            "spillway.toml:17:1: `route[0].upstream`: no upstream is named `nope`",
            "spillway.toml:22:1: `flow[0].count`: must be finite and at least 0, got -1",
            "spillway.toml:34:1: `flow[2].behavior`: must be reject for a concurrency rule \
             (warm-up and throttling pace QPS)",
        ],
        "{err}"
    );
    // Display prints them all, one a line; the accessors describe the first.
    assert_eq!(err.to_string().lines().count(), lines.len());
    assert_eq!(err.field(), Some("listener.origin_header"));
}

#[test]
fn an_admin_error_points_at_the_admin_table_s_line() {
    let text = "[listener]\nlisten = \"127.0.0.1:8080\"\n\n[admin]\nlisten = \"0.0.0.0:9090\"\n";
    assert!(
        error(text).starts_with("spillway.toml:5:1: `admin.listen`: 0.0.0.0:9090 is not loopback"),
        "{}",
        error(text)
    );
}

#[test]
fn a_rule_no_route_produces_is_a_warning_and_the_file_stays_good() {
    let text = format!(
        "{UPSTREAM}\n[[route]]\nresource = \"orders\"\npath = \"/orders\"\nupstream = \"app\"\n\n\
         [[flow]]\nid = \"typo\"\nresource = \"ordres\"\ncount = 5\n\n\
         [[flow]]\nid = \"default\"\nresource = \"unmatched\"\ncount = 5\n"
    );
    let config = parse(&text, "spillway.toml").unwrap();
    let warnings = spillway_server::config::warnings(&config, &text, "spillway.toml");
    assert_eq!(
        warnings,
        [
            "spillway.toml:12:1: `flow[0].resource`: no route produces `ordres`, so this rule \
          never applies"
        ]
    );
}

#[test]
fn criticality_rules_and_a_tenant_that_can_never_match_are_warnings() {
    let text = format!(
        "{UPSTREAM}\n[[route]]\nresource = \"orders\"\npath = \"/orders/{{id}}\"\nupstream = \"app\"\n\n\
         [[route]]\nresource = \"orders\"\npath = \"/order-list\"\nupstream = \"app\"\n\n\
         [criticality]\n\
         [[criticality.rule]]\nclass = \"sheddable\"\nresource = \"ordres\"\n\n\
         [[criticality.rule]]\nclass = \"sheddable\"\nresource = \"orders\"\nkey = \"path:id\"\nvalues = [\"7\"]\n\n\
         [[criticality.rule]]\nclass = \"sheddable\"\nkey = \"path:user\"\nvalues = [\"bot\"]\n\n\
         [[criticality.rule]]\nclass = \"sheddable\"\nkey = \"path:id\"\nvalues = [\"8\"]\n\n\
         [tenant]\nkey = \"path:account\"\n"
    );
    let config = parse(&text, "spillway.toml").unwrap();
    let warnings = spillway_server::config::warnings(&config, &text, "spillway.toml");
    assert_eq!(
        warnings,
        [
            "spillway.toml:18:1: `criticality.rule[0].resource`: no route produces `ordres`, so \
             this rule never applies",
            "spillway.toml:23:1: `criticality.rule[1].key`: reads `{id}` from the path, and the \
             route `/order-list` to `orders` has no such segment: its requests never match this \
             rule",
            "spillway.toml:28:1: `criticality.rule[2].key`: reads `{user}` from the path, and no \
             route's path has such a segment, so this rule never applies",
            "spillway.toml:37:1: `tenant.key`: reads `{account}` from the path, and no route's \
             path has such a segment, so no request has a tenant",
        ]
    );
}

#[test]
fn a_file_with_thousands_of_bad_rules_lists_the_first_hundred_and_says_it_stopped() {
    let mut text = String::new();
    for i in 0..5_000 {
        text.push_str(&format!(
            "[[flow]]\nid = \"r{i}\"\nresource = \"a\"\ncount = -1\n\n"
        ));
    }
    let err = parse(&text, "spillway.toml").unwrap_err();
    let problems = err.problems();
    assert_eq!(problems.len(), spillway_server::config::MAX_PROBLEMS + 1);
    assert_eq!(
        problems[0].to_string(),
        "spillway.toml:4:1: `flow[0].count`: must be finite and at least 0, got -1"
    );
    let last = problems.last().unwrap().to_string();
    assert!(
        last.ends_with("stopped after 100 problems: fix these and check again"),
        "{last}"
    );
}

#[test]
fn thousands_of_rules_no_route_produces_give_a_hundred_warnings_and_a_count() {
    let mut text = String::new();
    for i in 0..5_000 {
        text.push_str(&format!(
            "[[flow]]\nid = \"r{i}\"\nresource = \"nowhere{}\"\ncount = 1\n\n",
            i % 100
        ));
    }
    let config = parse(&text, "spillway.toml").unwrap();
    let warnings = spillway_server::config::warnings(&config, &text, "spillway.toml");
    assert_eq!(warnings.len(), 101);
    assert!(warnings[0].starts_with("spillway.toml:3:1: `flow[0].resource`: no route produces"));
    assert_eq!(warnings[100], "spillway.toml: and 4900 more warnings");
}

#[test]
fn a_throttle_rule_per_a_stat_duration_is_checked_and_read() {
    let rule = |stat_duration: &str| {
        format!(
            "{UPSTREAM}\n[[route]]\nresource = \"upload\"\npath = \"/upload\"\nupstream = \"app\"\n\n\
             [[flow]]\nid = \"pace\"\nresource = \"upload\"\ncount = 3\n\
             behavior = {{ type = \"throttle\", max_queueing_time = \"200ms\", \
             stat_duration = \"{stat_duration}\" }}\n"
        )
    };
    let config = parse(&rule("100ms"), "spillway.toml").unwrap();
    assert_eq!(
        config.flow[0].get_ref().behavior,
        spillway::flow::Behavior::Throttle {
            max_queueing_time: std::time::Duration::from_millis(200),
            stat_duration: std::time::Duration::from_millis(100),
        }
    );
    let text = rule("1500us");
    let err = error(&text);
    assert!(
        err.contains(
            "`flow[0].behavior.stat_duration`: must be a whole number of milliseconds from 1 ms \
             to 4294967295 ms, got 1.5ms"
        ),
        "{err}"
    );
}

#[test]
fn a_stray_field_is_refused_in_every_table_even_a_field_less_variant_s() {
    for (text, field) in [
        (
            "[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = 5\nbehavior = { type = \"reject\", zz = 1 }\n",
            "zz",
        ),
        (
            "[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = 5\nbehavior = { type = \"throttle\", max_queueing_time = \"1s\", zz = 1 }\n",
            "zz",
        ),
        (
            "[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = 5\nstrategy = { type = \"direct\", yy = 2 }\n",
            "yy",
        ),
        (
            "[[system]]\nid = \"s\"\nmax_concurrency = 10\nmin_rt = { type = \"exact\", ww = 3 }\n",
            "ww",
        ),
    ] {
        let err = error(text);
        assert!(err.contains(&format!("unknown field `{field}`")), "{text}: {err}");
    }
    let good =
        "[[flow]]\nid = \"a\"\nresource = \"r\"\ncount = 5\nbehavior = { type = \"reject\" }\n";
    assert!(parse(good, "spillway.toml").is_ok());
}

#[test]
fn the_hostile_client_limits_are_checked() {
    for (text, why) in [
        (
            "[listener]\nmax_header_size = 4096\n",
            "`listener.max_header_size`: must be from 8192 to 1048576 bytes",
        ),
        (
            "[listener]\nmax_header_size = 2000000\n",
            "`listener.max_header_size`",
        ),
        (
            "[listener]\nsend_timeout = \"0s\"\n",
            "`listener.send_timeout`: must be longer than 0",
        ),
        (
            "[listener]\ntunnel_idle_timeout = \"0s\"\n",
            "`listener.tunnel_idle_timeout`: must be longer than 0",
        ),
        (
            "[listener]\ntunnel_idle_timeout = \"10ms\"\n",
            "`listener.tunnel_idle_timeout`: 10ms would close tunnels between two messages",
        ),
        (
            "[listener]\nmax_connections_per_client = -1\n",
            "a number of connections (0: no cap), or \"auto\"",
        ),
        (
            "[listener]\nforwarded_header = \"x-real-ip\"\n",
            "expected `x-forwarded-for` or `forwarded`",
        ),
        (
            "[admin]\nheader_timeout = \"0s\"\n",
            "`admin.header_timeout`",
        ),
        (
            "[admin]\nmax_pending = 0\n",
            "`admin.max_pending`: must be from 1 to 63",
        ),
        ("[admin]\nmax_pending = 64\n", "`admin.max_pending`"),
        (
            "[admin]\nmax_streams = 0\n",
            "`admin.max_streams`: must be from 1 to 1000",
        ),
    ] {
        let err = error(text);
        assert!(err.contains(why), "{text}: {err}");
    }
    let good = "[listener]\nmax_header_size = 16384\nmax_body_size = 1048576\nsend_timeout = \"10s\"\nforwarded_header = \"forwarded\"\n\n[admin]\nheader_timeout = \"2s\"\nmax_pending = 8\nmax_streams = 2\n";
    let config = parse(good, "spillway.toml").unwrap();
    assert_eq!(config.listener.max_header_size, 16_384);
    assert_eq!(config.listener.max_body_size, 1 << 20);
    assert_eq!(
        config.listener.forwarded_header,
        spillway_tower::keys::ForwardedHeader::Forwarded
    );
    assert_eq!((config.admin.max_pending, config.admin.max_streams), (8, 2));
    // The defaults.
    let config = parse("", "spillway.toml").unwrap();
    assert_eq!(config.listener.max_header_size, 64 * 1024);
    assert_eq!(config.listener.max_body_size, 0);
    assert_eq!(
        config.listener.send_timeout,
        std::time::Duration::from_secs(60)
    );
    assert_eq!(
        config.admin.header_timeout,
        std::time::Duration::from_secs(5)
    );
    assert_eq!(
        (config.admin.max_pending, config.admin.max_streams),
        (16, 8)
    );
}

#[test]
fn criticality_tenant_and_deadline_settings_are_checked() {
    let text = format!(
        "{UPSTREAM}
[criticality]
header = \"bad header\"

[[criticality.rule]]
class = \"sheddable\"
values = [\"crawler\"]

[[criticality.rule]]
class = \"sheddable\"

[[criticality.rule]]
class = \"critical_plus\"
key = \"cookie:session\"
values = [\"x\"]

[[criticality.rule]]
class = \"sheddable\"
methods = [\"get\"]

[tenant]
key = \"header:\"

[deadline]
default = \"10s\"
max = \"5s\"

[[route]]
resource = \"r\"
path = \"/\"
upstream = \"app\"
deadline = \"0s\"
"
    );
    let err = parse(&text, "spillway.toml").unwrap_err();
    let lines: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "spillway.toml:6:1: `criticality.header`: `bad header` is not a valid header name",
            "spillway.toml:8:1: `criticality.rule[0].key`: must say where `values` are read",
            "spillway.toml:13:1: `criticality.rule[1].class`: the rule matches every request: \
             give a `resource`, `methods` or a `key`, or set `criticality.default` instead",
            "spillway.toml:17:1: `criticality.rule[2].key`: `cookie:session` is not a key \
             source: `peer_ip`, `header:NAME`, `query:NAME` or `path:NAME`",
            "spillway.toml:22:1: `criticality.rule[3].methods`: `get` must be upper case: \
             methods are case-sensitive, and clients send `GET`",
            "spillway.toml:25:1: `tenant.key`: `header:` names no header",
            "spillway.toml:28:1: `deadline.default`: 10s is longer than `deadline.max` (5s)",
            "spillway.toml:35:1: `route[0].deadline`: must be longer than 0",
        ],
        "{err}"
    );
    let grpc = format!("{UPSTREAM}[deadline]\nheader = \"Grpc-Timeout\"\n");
    assert!(
        error(&grpc).contains("`deadline.header`: `Grpc-Timeout` is a header the proxy"),
        "{}",
        error(&grpc)
    );
    let unknown = format!("{UPSTREAM}[criticality]\ndefault = \"urgent\"\n");
    assert!(
        error(&unknown).contains(
            "unknown variant `urgent`, expected one of `sheddable`, `sheddable_plus`, \
             `critical`, `critical_plus`"
        ),
        "{}",
        error(&unknown)
    );
    let good = format!(
        "{UPSTREAM}
[criticality]
header = \"x-criticality\"
default = \"critical\"
[[criticality.rule]]
class = \"sheddable\"
resource = \"prefetch\"
[tenant]
key = \"header:x-api-key\"
[deadline]
header = \"x-deadline-ms\"
default = \"5s\"
max = \"30s\"
[[route]]
resource = \"prefetch\"
path = \"/prefetch\"
upstream = \"app\"
criticality = \"sheddable\"
deadline = \"1s\"
"
    );
    parse(&good, "spillway.toml").unwrap();
}

#[test]
fn an_access_log_without_a_file_or_with_a_bad_header_name_is_refused_with_its_field() {
    let err = error(&format!(
        "{UPSTREAM}\n[access_log]\npath = \"\"\nheaders = [\"user-agent\", \"bad header\"]\n"
    ));
    assert!(
        err.contains("spillway.toml:6:1: `access_log.path`: names no file"),
        "{err}"
    );
    assert!(
        err.contains(
            "spillway.toml:7:1: `access_log.headers`: `bad header` is not a valid header name"
        ),
        "{err}"
    );
    let names: Vec<String> = (0..33).map(|n| format!("\"x-{n}\"")).collect();
    let err = error(&format!(
        "{UPSTREAM}\n[access_log]\npath = \"a.log\"\nheaders = [{}]\n",
        names.join(", ")
    ));
    assert!(
        err.contains("names 33 headers; at most 32 are kept"),
        "{err}"
    );
}
