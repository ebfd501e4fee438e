//! Checks of `[cluster]` and `[[cluster_rule]]`: the core's and the crate's own, naming the
//! field at fault.

use crate::config::{ClusterConfig, ClusterKind, ClusterMode, ClusterRuleConfig};

/// Checks cluster rules with the core's and the crate's own checks: the first rule at fault,
/// its field and why (as the core's validators answer, for the file's checker).
pub(crate) fn validate_rules(
    rules: &[ClusterRuleConfig],
) -> Result<(), (usize, &'static str, String)> {
    let ids: Vec<(&str, &str)> = rules
        .iter()
        .map(|rule| (rule.id.as_str(), rule.resource.as_str()))
        .collect();
    spillway::cluster::validate_cluster_rule_ids(&ids)
        .map_err(|err| (err.index(), err.field(), err.problem().to_owned()))?;
    for (index, rule) in rules.iter().enumerate() {
        validate_rule(rule).map_err(|(field, problem)| (index, field, problem))?;
    }
    Ok(())
}

/// One rule's own fields, by its kind.
fn validate_rule(rule: &ClusterRuleConfig) -> Result<(), (&'static str, String)> {
    // The id names the limit in Redis.
    spillway_redis::check_name(&rule.id).map_err(|err| ("id", err.to_string()))?;
    if rule.max_batch == 0 {
        return Err(("max_batch", "must be at least 1".to_owned()));
    }
    let only_for = |field: &'static str, kind: &str| {
        Err((
            field,
            format!(
                "is for kind = \"{kind}\" rules, not kind = \"{}\"",
                rule.kind.as_str()
            ),
        ))
    };
    if rule.kind != ClusterKind::Qps {
        if rule.interval.is_some() {
            return only_for("interval", "qps");
        }
        if rule.buckets.is_some() {
            return only_for("buckets", "qps");
        }
    }
    if rule.kind != ClusterKind::Bucket && rule.burst.is_some() {
        return only_for("burst", "bucket");
    }
    if rule.kind == ClusterKind::Concurrency && rule.mode == ClusterMode::Strict {
        return Err((
            "mode",
            "a concurrency rule is leased only: leased, the fleet never has more in flight than its limit already; `strict` is for qps and bucket rules".to_owned(),
        ));
    }
    match rule.kind {
        ClusterKind::Qps => {
            spillway_redis::check_settings(rule.limit, rule.interval(), rule.buckets())?;
        }
        ClusterKind::Bucket => {
            spillway_redis::check_bucket(rule.limit, rule.burst()).map_err(
                |(field, problem)| (if field == "rate" { "limit" } else { field }, problem),
            )?;
        }
        ClusterKind::Concurrency => {
            if !(rule.limit >= 0.0 && rule.limit.fract() == 0.0 && rule.limit <= u32::MAX as f64) {
                return Err((
                    "limit",
                    format!(
                        "a concurrency limit is a whole number of requests in flight, not {}",
                        rule.limit
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Checks `[cluster]`: the field at fault and why.
pub(crate) fn validate_section(cluster: &ClusterConfig) -> Result<(), (&'static str, String)> {
    match (&cluster.redis, cluster.nodes.is_empty()) {
        (Some(_), false) => {
            return Err((
                "nodes",
                "give either `redis` (one Redis) or `nodes` (a Redis Cluster), not both".to_owned(),
            ))
        }
        (None, true) => {
            return Err((
                "redis",
                "is required: the URL of the Redis the cluster rules share (or `nodes`, a Redis Cluster's)"
                    .to_owned(),
            ))
        }
        _ => {}
    }
    if let Some(url) = &cluster.redis {
        if let Err(err) = spillway_redis::redis::Client::open(url.as_str()) {
            return Err(("redis", format!("is not a Redis URL: {err}")));
        }
    }
    for node in &cluster.nodes {
        if let Err(err) = spillway_redis::redis::Client::open(node.as_str()) {
            return Err(("nodes", format!("{node:?} is not a Redis URL: {err}")));
        }
    }
    if cluster.call_timeout.is_zero() {
        return Err(("call_timeout", "must be positive".to_owned()));
    }
    if cluster.probe_every.is_zero() {
        return Err(("probe_every", "must be positive".to_owned()));
    }
    if cluster.heartbeat_ttl.as_millis() < 3 {
        return Err(("heartbeat_ttl", "must be at least 3 ms".to_owned()));
    }
    if cluster.assumed_instances == 0 {
        return Err(("assumed_instances", "must be at least 1".to_owned()));
    }
    Ok(())
}
