//! What a replay found: per route and per rule, requests and would-refuse, the peak second,
//! the first and last refusal, and a per-second timeline; as text or as JSON.

use super::source::ReadCounts;
use super::top_keys::{KeyCount, TopKeys};
use crate::calendar::rfc3339;
use serde::Serialize;
use std::collections::BTreeMap;

/// One route's resource in a replay.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RouteReport {
    /// The resource its route (or the default route) produces.
    pub resource: String,
    /// Requests routed to it.
    pub requests: u64,
    /// Of them, refused by a rule (or for want of a per-key rule's key).
    pub would_refuse: u64,
    /// `would_refuse / requests`.
    pub share: f64,
    /// Answered before any rule: `no_route`, `bad_path`, `bad_host`, `bad_header`, `repeated_key`.
    pub answered_early: BTreeMap<String, u64>,
}

/// One rule's refusals in a replay.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleReport {
    /// The rule's id; for a limit without one (`tps`, `executes`, `actives`), its kind.
    pub rule: String,
    /// What kind of check refused (`flow`, `keyed`, `adaptive`, `breaker`, ...).
    pub kind: String,
    /// The resource of the requests it refused.
    pub resource: String,
    /// Requests it would have refused.
    pub would_refuse: u64,
    /// Of the requests to its resource.
    pub share: f64,
    /// Requests it refused in shadow mode (passed, as its `shadow` setting says).
    pub shadow_refusals: u64,
    /// The second with the most refusals (RFC 3339), and how many.
    pub peak_second: Option<String>,
    /// Refusals in that second.
    pub peak_refusals: u64,
    /// When it first and last refused (RFC 3339, the requests' arrival times).
    pub first_refusal: Option<String>,
    /// As `first_refusal`, the last.
    pub last_refusal: Option<String>,
    /// A per-key rule's most refused keys (at most 10), most first.
    pub top_keys: Vec<KeyCount>,
}

/// One step of the replay's timeline: a second, or more for a log that spans long (see
/// [`ReplayReport::timeline_step_s`]).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Second {
    /// Unix seconds: the step's start.
    pub at: u64,
    /// Requests that arrived in it.
    pub requests: u64,
    /// Of them, refused.
    pub would_refuse: u64,
}

/// A replay's whole result.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The configuration replayed.
    pub config: String,
    /// The log files, in the order read.
    pub files: Vec<String>,
    /// Requests replayed.
    pub requests: u64,
    /// Of them, refused.
    pub would_refuse: u64,
    /// The first and last request's arrival (RFC 3339).
    pub first_request: Option<String>,
    /// As `first_request`, the last.
    pub last_request: Option<String>,
    /// Lines read, malformed and late.
    pub read: ReadCounts,
    /// What the replay left out of the configuration, and why.
    pub notes: Vec<String>,
    /// By resource, in name order.
    pub routes: Vec<RouteReport>,
    /// Every rule that refused a request, by rule id.
    pub rules: Vec<RuleReport>,
    /// Each step with a request, in order.
    pub timeline: Vec<Second>,
    /// The timeline's step in seconds: 1, doubled as often as it takes to keep it to
    /// [`MAX_TIMELINE`] steps.
    pub timeline_step_s: u64,
}

/// Most steps a timeline keeps: a longer log's timeline has steps of 2, 4, 8... seconds, so
/// that its memory does not grow with the log's span.
pub const MAX_TIMELINE: usize = 100_000;

/// How far behind the latest refusal a refusal can come (a request refused after waiting in a
/// queue or for an `actives` place, at most a minute): older seconds of a rule's refusals are
/// folded into its peak.
const LATE_REFUSALS_S: u64 = 120;

#[derive(Debug, Default)]
struct RuleTally {
    refused: u64,
    shadow: u64,
    first: Option<u64>,
    last: Option<u64>,
    /// Refusals by second of arrival, of the last [`LATE_REFUSALS_S`] seconds (a refusal after
    /// a wait is counted in the second its request arrived, which may come after later
    /// seconds' refusals); older seconds are folded into `peak`.
    seconds: BTreeMap<u64, u64>,
    peak: Option<(u64, u64)>,
    keys: TopKeys,
}

/// The larger of two (second, refusals), the earlier of equals.
fn larger(a: Option<(u64, u64)>, b: (u64, u64)) -> Option<(u64, u64)> {
    match a {
        Some(a) if a.1 > b.1 || (a.1 == b.1 && a.0 < b.0) => Some(a),
        _ => Some(b),
    }
}

impl RuleTally {
    fn refused_at(&mut self, at: u64) {
        self.refused += 1;
        self.first = Some(self.first.map_or(at, |first| first.min(at)));
        self.last = Some(self.last.map_or(at, |last| last.max(at)));
        let second = at / 1_000_000_000;
        *self.seconds.entry(second).or_default() += 1;
        while let Some(entry) = self.seconds.first_entry() {
            if *entry.key() + LATE_REFUSALS_S >= second {
                break;
            }
            let (old, count) = entry.remove_entry();
            self.peak = larger(self.peak, (old, count));
        }
    }

    /// The second with the most refusals (the earliest of equals), and how many.
    fn peak(&self) -> Option<(u64, u64)> {
        (self.seconds.iter()).fold(self.peak, |peak, (second, count)| {
            larger(peak, (*second, *count))
        })
    }
}

/// The decisions of a replay as they come.
#[derive(Debug, Default)]
pub(crate) struct Tallies {
    /// Keys are counted by their fingerprint, not their text.
    hash_keys: bool,
    requests: u64,
    refused: u64,
    first: Option<u64>,
    last: Option<u64>,
    routes: BTreeMap<String, RouteReport>,
    rules: BTreeMap<(String, String, String), RuleTally>,
    /// Requests and refusals by step of `step` seconds.
    timeline: BTreeMap<u64, (u64, u64)>,
    step: u64,
    /// The step requests last came in, and its counts, not yet in `timeline` (requests come
    /// in order of arrival: most are counted here).
    current: Option<(u64, (u64, u64))>,
}

impl Tallies {
    /// None yet; per-key rules' keys counted by their fingerprint if `hash_keys`.
    pub(crate) fn new(hash_keys: bool) -> Self {
        Self {
            hash_keys,
            step: 1,
            ..Self::default()
        }
    }

    /// The timeline's counts of the step of a request that arrived at `at`.
    fn step_of(&mut self, at: u64) -> &mut (u64, u64) {
        let key_of = |step: u64| at / 1_000_000_000 / step.max(1) * step.max(1);
        if self.current.map(|(key, _)| key) != Some(key_of(self.step)) {
            self.flush_step();
            // The step may have doubled.
            let key = key_of(self.step);
            let counts = self.timeline.remove(&key).unwrap_or_default();
            self.current = Some((key, counts));
        }
        let current = self.current.get_or_insert((key_of(self.step), (0, 0)));
        &mut current.1
    }

    /// Puts the current step's counts in the timeline: past [`MAX_TIMELINE`] steps, the step
    /// doubles and the steps merge in pairs.
    fn flush_step(&mut self) {
        let Some((mut key, (requests, refused))) = self.current.take() else {
            return;
        };
        if !self.timeline.contains_key(&key) && self.timeline.len() >= MAX_TIMELINE {
            self.step = self.step.max(1) * 2;
            let merged = std::mem::take(&mut self.timeline);
            for (at, (requests, refused)) in merged {
                let entry = self.timeline.entry(at / self.step * self.step).or_default();
                entry.0 += requests;
                entry.1 += refused;
            }
            key = key / self.step * self.step;
        }
        let entry = self.timeline.entry(key).or_default();
        entry.0 += requests;
        entry.1 += refused;
    }

    /// Counts a request to `resource` arrived at `at`: its route's figures (always there).
    fn request(&mut self, resource: &str, at: u64) -> Option<&mut RouteReport> {
        self.requests += 1;
        self.first = Some(self.first.map_or(at, |first| first.min(at)));
        self.last = Some(self.last.map_or(at, |last| last.max(at)));
        self.step_of(at).0 += 1;
        if !self.routes.contains_key(resource) {
            let route = RouteReport {
                resource: resource.to_owned(),
                ..RouteReport::default()
            };
            self.routes.insert(resource.to_owned(), route);
        }
        let route = self.routes.get_mut(resource)?;
        route.requests += 1;
        Some(route)
    }

    /// A request to `resource`, arrived at `at`, answered before any rule as `outcome`.
    pub(crate) fn early(&mut self, resource: &str, outcome: &str, at: u64) {
        if let Some(route) = self.request(resource, at) {
            *route.answered_early.entry(outcome.to_owned()).or_default() += 1;
        }
    }

    /// A request admitted; `shadow`: the rule (and kind) that refused it in shadow mode.
    pub(crate) fn admitted(&mut self, resource: &str, at: u64, shadow: Option<(&str, &str)>) {
        self.request(resource, at);
        if let Some((rule, kind)) = shadow {
            let key = (rule.to_owned(), kind.to_owned(), resource.to_owned());
            self.rules.entry(key).or_default().shadow += 1;
        }
    }

    /// A request refused by `rule` of `kind` (for `key`, a per-key rule's).
    pub(crate) fn refused(
        &mut self,
        resource: &str,
        at: u64,
        rule: &str,
        kind: &str,
        key_text: Option<&str>,
    ) {
        if let Some(route) = self.request(resource, at) {
            route.would_refuse += 1;
        }
        self.refused += 1;
        self.step_of(at).1 += 1;
        let key = (rule.to_owned(), kind.to_owned(), resource.to_owned());
        let tally = self.rules.entry(key).or_default();
        tally.refused_at(at);
        if let Some(key) = key_text {
            if self.hash_keys {
                tally
                    .keys
                    .add(&format!("{:016x}", spillway::keyed::fingerprint(key)));
            } else {
                tally.keys.add(key);
            }
        }
    }

    pub(crate) fn report(
        mut self,
        config: String,
        files: Vec<String>,
        read: ReadCounts,
        notes: Vec<String>,
    ) -> ReplayReport {
        self.flush_step();
        let requests_of = |resource: &str| self.routes.get(resource).map_or(0, |r| r.requests);
        let share = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 / whole as f64
            }
        };
        let rules = self
            .rules
            .iter()
            .map(|((rule, kind, resource), tally)| RuleReport {
                rule: rule.clone(),
                kind: kind.clone(),
                resource: resource.clone(),
                would_refuse: tally.refused,
                share: share(tally.refused, requests_of(resource)),
                shadow_refusals: tally.shadow,
                peak_second: tally
                    .peak()
                    .map(|(second, _)| rfc3339(second * 1_000_000_000)),
                peak_refusals: tally.peak().map_or(0, |(_, count)| count),
                first_refusal: tally.first.map(rfc3339),
                last_refusal: tally.last.map(rfc3339),
                top_keys: tally.keys.top(10),
            })
            .collect();
        let routes = (self.routes.values())
            .map(|route| RouteReport {
                share: share(route.would_refuse, route.requests),
                ..route.clone()
            })
            .collect();
        ReplayReport {
            config,
            files,
            requests: self.requests,
            would_refuse: self.refused,
            first_request: self.first.map(rfc3339),
            last_request: self.last.map(rfc3339),
            read,
            notes,
            routes,
            rules,
            timeline: (self.timeline.iter())
                .map(|(at, (requests, refused))| Second {
                    at: *at,
                    requests: *requests,
                    would_refuse: *refused,
                })
                .collect(),
            timeline_step_s: self.step.max(1),
        }
    }
}

/// `text` as a terminal may be shown it: control characters (an escape sequence, a carriage
/// return or a line break, a NUL) written as Rust escapes (`\u{1b}`, `\r`, `\n`, `\0`), so
/// that a key or a line from a log cannot clear the screen, set the terminal's title or start
/// a report line of its own.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn percent(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

impl ReplayReport {
    /// The report as text: a summary, the rules, the routes, and what was left out.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let span = match (&self.first_request, &self.last_request) {
            (Some(first), Some(last)) => format!(" from {first} to {last}"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{} requests{span} ({} lines in {} files): {} would be refused ({}) by {}\n",
            self.requests,
            self.read.lines,
            self.files.len(),
            self.would_refuse,
            percent(if self.requests == 0 {
                0.0
            } else {
                self.would_refuse as f64 / self.requests as f64
            }),
            self.config,
        ));
        if !self.rules.is_empty() {
            out.push_str("\nrule | kind | resource | would refuse | share | shadow | peak second (refused) | first refusal | last refusal\n");
            for rule in &self.rules {
                out.push_str(&format!(
                    "{} | {} | {} | {} | {} | {} | {} | {} | {}\n",
                    shown(&rule.rule),
                    rule.kind,
                    shown(&rule.resource),
                    rule.would_refuse,
                    percent(rule.share),
                    rule.shadow_refusals,
                    rule.peak_second
                        .as_ref()
                        .map_or("-".to_owned(), |at| format!(
                            "{at} ({})",
                            rule.peak_refusals
                        )),
                    rule.first_refusal.as_deref().unwrap_or("-"),
                    rule.last_refusal.as_deref().unwrap_or("-"),
                ));
            }
        }
        for rule in self.rules.iter().filter(|rule| !rule.top_keys.is_empty()) {
            let keys: Vec<String> = (rule.top_keys.iter())
                .map(|key| {
                    let bound = if key.error == 0 {
                        String::new()
                    } else {
                        format!(" at most, {} at least", key.refused - key.error)
                    };
                    format!("{} ({}{bound})", shown(&key.key), key.refused)
                })
                .collect();
            out.push_str(&format!(
                "\n{} refused most: {}\n",
                shown(&rule.rule),
                keys.join(", ")
            ));
        }
        out.push_str("\nresource | requests | would refuse | share | answered before any rule\n");
        for route in &self.routes {
            let early: Vec<String> = (route.answered_early.iter())
                .map(|(outcome, count)| format!("{outcome} {count}"))
                .collect();
            out.push_str(&format!(
                "{} | {} | {} | {} | {}\n",
                shown(&route.resource),
                route.requests,
                route.would_refuse,
                percent(route.share),
                if early.is_empty() {
                    "-".to_owned()
                } else {
                    early.join(", ")
                },
            ));
        }
        let read = &self.read;
        if read.malformed > 0 {
            out.push_str(&format!(
                "\n{} malformed lines, skipped; the first:\n",
                read.malformed
            ));
            for problem in &read.malformed_shown {
                out.push_str(&format!("  {}\n", shown(&problem.to_string())));
            }
        }
        if read.late > 0 {
            out.push_str(&format!(
                "\n{} lines arrived later than the reordering window allows, replayed at the time of the line before them; the first:\n",
                read.late
            ));
            for problem in &read.late_shown {
                out.push_str(&format!("  {}\n", shown(&problem.to_string())));
            }
        }
        for note in &self.notes {
            out.push_str(&format!("\nnote: {note}\n"));
        }
        out
    }
}

/// Two replays of the same logs side by side: per rule and per resource, what each would
/// refuse.
pub fn compare_text(a: &ReplayReport, b: &ReplayReport) -> String {
    let mut out = format!(
        "{} requests{}: {} would refuse {} ({}), {} would refuse {} ({})\n",
        a.requests,
        match (&a.first_request, &a.last_request) {
            (Some(first), Some(last)) => format!(" from {first} to {last}"),
            _ => String::new(),
        },
        a.config,
        a.would_refuse,
        percent(share_of(a.would_refuse, a.requests)),
        b.config,
        b.would_refuse,
        percent(share_of(b.would_refuse, b.requests)),
    );
    out.push_str(&format!(
        "\nrule | kind | resource | {} | {}\n",
        a.config, b.config
    ));
    let mut rules: BTreeMap<(&str, &str, &str), (u64, u64)> = BTreeMap::new();
    for rule in &a.rules {
        let key = (
            rule.rule.as_str(),
            rule.kind.as_str(),
            rule.resource.as_str(),
        );
        rules.entry(key).or_default().0 = rule.would_refuse;
    }
    for rule in &b.rules {
        let key = (
            rule.rule.as_str(),
            rule.kind.as_str(),
            rule.resource.as_str(),
        );
        rules.entry(key).or_default().1 = rule.would_refuse;
    }
    for ((rule, kind, resource), (in_a, in_b)) in &rules {
        let (rule, resource) = (shown(rule), shown(resource));
        out.push_str(&format!("{rule} | {kind} | {resource} | {in_a} | {in_b}\n"));
    }
    out.push_str(&format!(
        "\nresource | requests | {} | {}\n",
        a.config, b.config
    ));
    let mut routes: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for route in &a.routes {
        let entry = routes.entry(route.resource.as_str()).or_default();
        (entry.0, entry.1) = (route.requests, route.would_refuse);
    }
    for route in &b.routes {
        let entry = routes.entry(route.resource.as_str()).or_default();
        (entry.0, entry.2) = (route.requests, route.would_refuse);
    }
    for (resource, (requests, in_a, in_b)) in &routes {
        let resource = shown(resource);
        out.push_str(&format!(
            "{resource} | {requests} | {in_a} ({}) | {in_b} ({})\n",
            percent(share_of(*in_a, *requests)),
            percent(share_of(*in_b, *requests)),
        ));
    }
    out
}

fn share_of(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_from_a_log_are_shown_escaped() {
        let key = "\u{1b}[2J\u{1b}[31mPWNED\u{1b}]0,title\u{7}\r\nFAKE LINE\0";
        assert_eq!(
            shown(key),
            "\\u{1b}[2J\\u{1b}[31mPWNED\\u{1b}]0,title\\u{7}\\r\\nFAKE LINE\\0"
        );
        assert!(matches!(
            shown("/users/7 é"),
            std::borrow::Cow::Borrowed("/users/7 é")
        ));
    }

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_timeline_longer_than_its_cap_doubles_its_step() {
        let mut tallies = Tallies::new(false);
        // Requests over 250,000 s (about three days): steps of 4 s keep it under the cap.
        for second in 0..250_000u64 {
            tallies.early("a", "no_route", second * SECOND);
        }
        tallies.refused("a", 3 * SECOND, "r", "flow", None);
        let report = tallies.report(String::new(), Vec::new(), ReadCounts::default(), Vec::new());
        assert_eq!(report.timeline_step_s, 4);
        assert!(report.timeline.len() <= MAX_TIMELINE);
        assert_eq!(report.timeline[0].at, 0);
        assert_eq!(
            report.timeline[0].requests,
            5,
            "{:?}",
            &report.timeline[..2]
        );
        assert_eq!(report.timeline[0].would_refuse, 1);
        let total: u64 = report.timeline.iter().map(|step| step.requests).sum();
        assert_eq!(total, report.requests);
    }

    #[test]
    fn a_rule_s_peak_second_survives_its_seconds_being_folded() {
        let mut rule = RuleTally::default();
        for _ in 0..5 {
            rule.refused_at(10 * SECOND);
        }
        for second in 11..1_000u64 {
            rule.refused_at(second * SECOND);
        }
        // A late refusal of a second still kept.
        rule.refused_at(900 * SECOND);
        assert_eq!(rule.peak(), Some((10, 5)));
        assert!(rule.seconds.len() <= LATE_REFUSALS_S as usize + 1);
        assert_eq!(rule.first, Some(10 * SECOND));
    }
}
