//! Variables in the relay's environment that look meant for it but that it does not read: a
//! typo (`RELAY_DEDUP_WINDOW` for `RELAY_DEDUP_WINDOW_S`, `APNS_TEAMID`), a setting of
//! another product, or an OpenTelemetry variable this build ignores. `serve` logs each one
//! once as a warning; `check-config` refuses them. Only names are ever printed, never a value
//! (it may be a secret).
//!
//! Which names are flagged (case is ignored when matching, so `relay_listen` is caught too):
//!
//! - every name under a prefix the relay owns: `RELAY_`, `APNS_`, `FCM_`;
//! - the OpenTelemetry variables of the parts of the SDK the relay uses, which the
//!   specification defines and an operator may expect it to honour: the OTLP exporter
//!   (`OTEL_EXPORTER_OTLP_*`, except the other signals' `OTEL_EXPORTER_OTLP_METRICS_*`,
//!   `_LOGS_*` and `_PROFILES_*`), the trace signal (`OTEL_TRACES_*`, `OTEL_BSP_*`,
//!   `OTEL_SPAN_*`), attribute limits (`OTEL_ATTRIBUTE_*`, `OTEL_EVENT_ATTRIBUTE_*`,
//!   `OTEL_LINK_ATTRIBUTE_*`), the resource (`OTEL_SERVICE_*`, `OTEL_RESOURCE_*`) and the SDK
//!   switches (`OTEL_SDK_*`, `OTEL_PROPAGATORS`). The metrics and logs signals
//!   (`OTEL_METRICS_EXPORTER`, `OTEL_LOGS_EXPORTER`, `OTEL_METRIC_EXPORT_*`, `OTEL_BLRP_*`,
//!   ...) and other tools' variables are not, not even as typos: the relay has neither
//!   signal, and a shared ConfigMap or an injected environment may carry them for another
//!   program;
//! - any other name within a typo of a name the relay reads (one edit for names under ten
//!   characters, two otherwise; `REDIS_URI`, `REALY_LISTEN`). So `REDIS_*` is not claimed
//!   as a whole: `REDIS_PASSWORD`, `REDIS_HOST` or `REDIS_PORT` are common in a pod for other
//!   reasons (a `$(REDIS_PASSWORD)` composed into `REDIS_URL`, a Redis client, Docker links),
//!   and the relay reads only `REDIS_URL`.
//!
//! Not flagged although under those prefixes: Kubernetes service links (a Service named
//! `relay` puts `RELAY_SERVICE_HOST`, `RELAY_PORT=tcp://10.0.0.7:8080`, ... in every pod of
//! its namespace that keeps `enableServiceLinks`; recognised by name and value shape), and
//! the `OTEL_RESOURCE_ATTRIBUTES_*` helpers the OpenTelemetry Operator injects to compose
//! `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! Two variables the OpenTelemetry SDK reads have no effect in this build and are refused
//! at start-up, by `serve` as well ([`REFUSED`]).

use std::net::{IpAddr, SocketAddr};

use super::vars::VARS;
use crate::telemetry::UnknownVar;

/// Prefixes whose every name is the relay's.
const OWNED: &[&str] = &["RELAY_", "APNS_", "FCM_"];

/// The OpenTelemetry families the relay answers for (see the module's documentation).
const OTEL_FAMILIES: &[&str] = &[
    "OTEL_EXPORTER_OTLP_",
    "OTEL_TRACES_",
    "OTEL_BSP_",
    "OTEL_SPAN_",
    "OTEL_ATTRIBUTE_",
    "OTEL_EVENT_ATTRIBUTE_",
    "OTEL_LINK_ATTRIBUTE_",
    "OTEL_SERVICE_",
    "OTEL_RESOURCE_",
    "OTEL_SDK_",
    "OTEL_PROPAGATORS",
];

/// What belongs to other signals or composes a read variable: never flagged, not even as
/// a typo (`OTEL_BLRP_SCHEDULE_DELAY`, of the logs signal, is two edits from
/// `OTEL_BSP_SCHEDULE_DELAY`).
const OTEL_NOT_OURS: &[&str] = &[
    "OTEL_METRICS_",
    "OTEL_METRIC_",
    "OTEL_LOGS_",
    "OTEL_LOGRECORD_",
    "OTEL_BLRP_",
    "OTEL_EXPORTER_OTLP_METRICS_",
    "OTEL_EXPORTER_OTLP_LOGS_",
    "OTEL_EXPORTER_OTLP_PROFILES_",
    "OTEL_RESOURCE_ATTRIBUTES_",
];

/// Variables the OpenTelemetry SDK reads that have no effect in this build: set, they stop
/// start-up (`serve` and `check-config`), with the reason.
pub(super) const REFUSED: &[(&str, &str)] = &[
    (
        "OTEL_BSP_EXPORT_TIMEOUT",
        "the SDK's batch processor in this build does not bound an export by it; unset it (OTEL_EXPORTER_OTLP_TIMEOUT bounds each export request)",
    ),
    (
        "OTEL_BSP_MAX_CONCURRENT_EXPORTS",
        "the SDK's batch processor in this build exports one batch at a time; unset it",
    ),
];

/// Specification variables the relay does not read, with what it does instead.
const NOT_READ: &[(&str, &str)] = &[
    ("OTEL_SDK_DISABLED", "traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and only then; unset both to export nothing"),
    ("OTEL_TRACES_EXPORTER", "traces are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and only then; unset both to export nothing"),
    ("OTEL_PROPAGATORS", "it continues W3C trace context (traceparent, tracestate) only"),
    ("OTEL_EXPORTER_OTLP_INSECURE", "it applies to gRPC only; over OTLP/HTTP the endpoint's scheme, http:// or https://, decides"),
    ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "it applies to gRPC only; over OTLP/HTTP the endpoint's scheme, http:// or https://, decides"),
    ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "no client certificate is sent to the collector; authenticate with OTEL_EXPORTER_OTLP_HEADERS"),
    ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "no client certificate is sent to the collector; authenticate with OTEL_EXPORTER_OTLP_HEADERS"),
    ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "no client certificate is sent to the collector; authenticate with OTEL_EXPORTER_OTLP_HEADERS"),
    ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "no client certificate is sent to the collector; authenticate with OTEL_EXPORTER_OTLP_HEADERS"),
];

/// What the environment holds that the relay does not read: names in the relay's families
/// it does not know (`unknown`), and SDK variables it refuses (`refused`), one message each.
#[derive(Debug, Default)]
pub(super) struct Scan {
    pub(super) unknown: Vec<UnknownVar>,
    pub(super) refused: Vec<String>,
}

/// Scans `(name, value)` pairs (the process environment); values are only looked at to
/// recognise Kubernetes service links, never copied into a message.
pub(super) fn scan(env: &[(String, String)]) -> Scan {
    let mut out = Scan::default();
    let mut names: Vec<&(String, String)> = env.iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names.dedup_by(|a, b| a.0 == b.0);
    for (name, value) in names {
        if VARS.iter().any(|v| v.name == name) {
            continue;
        }
        if let Some((_, why)) = REFUSED.iter().find(|(n, _)| n == name) {
            if !value.trim().is_empty() {
                out.refused
                    .push(format!("{name} is set but has no effect: {why}"));
            }
            continue;
        }
        if !flagged(name) || is_service_link(name, value) {
            continue;
        }
        out.unknown.push(unknown(name));
    }
    out
}

/// The warning (or `check-config` error) for one unknown name.
fn unknown(name: &str) -> UnknownVar {
    let hint = NOT_READ.iter().find(|(n, _)| *n == name).map(|(_, h)| *h);
    let did_you_mean = if hint.is_some() { None } else { suggest(name) };
    let message = match (hint, did_you_mean) {
        (Some(h), _) => format!("unknown variable {name}: the relay does not read it; {h}"),
        (None, Some(s)) if s.eq_ignore_ascii_case(name) => {
            format!("unknown variable {name}; did you mean {s}? (names are case-sensitive)")
        }
        (None, Some(s)) => format!("unknown variable {name}; did you mean {s}?"),
        (None, None) => format!(
            "unknown variable {name}: the relay does not read it (sealrelay --help lists every variable it reads)"
        ),
    };
    UnknownVar {
        name: name.to_owned(),
        did_you_mean,
        message,
    }
}

/// Whether `name` (not a known variable) is one the relay answers for.
fn flagged(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if OWNED.iter().any(|p| upper.starts_with(p)) {
        return true;
    }
    if OTEL_NOT_OURS.iter().any(|p| upper.starts_with(p)) {
        return false;
    }
    if OTEL_FAMILIES.iter().any(|p| upper.starts_with(p)) {
        return true;
    }
    // Anything else only when it is a typo of a name the relay reads.
    VARS.iter().any(|v| {
        let reach = if v.name.len() < 10 { 1 } else { 2 };
        upper.len().abs_diff(v.name.len()) <= reach && distance(&upper, v.name) <= reach
    })
}

/// The known name nearest to `name` by edit distance (case ignored): offered when it is
/// within `max(2, len/4)` edits, or when one name is the other plus `_...` (a dropped or an
/// added suffix). Among equals, the first in [`VARS`].
pub(crate) fn suggest(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    let len = upper.chars().count();
    let reach = (len / 4).max(2);
    let mut best: Option<(usize, &'static str)> = None;
    for v in VARS {
        let suffix = suffix_of(&upper, v.name);
        if !suffix && len.abs_diff(v.name.len()) > reach {
            continue;
        }
        let d = distance(&upper, v.name);
        if (d <= reach || suffix) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, v.name));
        }
    }
    best.map(|(_, n)| n)
}

/// `a` is `b` plus `_...`, or `b` is `a` plus `_...` (whole words added or dropped at the end).
fn suffix_of(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    // At least one word past a family's prefix, so `RELAY_` alone matches nothing.
    short.len() > 6
        && long
            .strip_prefix(short)
            .is_some_and(|rest| rest.starts_with('_'))
}

/// Optimal-string-alignment distance (Damerau-Levenshtein with adjacent transpositions):
/// insertions, deletions, substitutions and swaps of two neighbours each cost one.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the table: i-2, i-1, i.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// A variable Kubernetes defines for a Service (`<SVC>_SERVICE_HOST=10.0.0.7`,
/// `<SVC>_SERVICE_PORT[_<NAME>]=8080`, `<SVC>_PORT=tcp://10.0.0.7:8080`,
/// `<SVC>_PORT_8080_TCP[=tcp://...|_PROTO=tcp|_PORT=8080|_ADDR=10.0.0.7]`), told by its name
/// and the shape of its value.
fn is_service_link(name: &str, value: &str) -> bool {
    let v = value.trim();
    let port = || v.parse::<u16>().is_ok();
    let ip = || v.parse::<IpAddr>().is_ok();
    let url = || {
        ["tcp://", "udp://", "sctp://"].iter().any(|p| {
            v.strip_prefix(p)
                .is_some_and(|a| a.parse::<SocketAddr>().is_ok())
        })
    };
    if name.ends_with("_SERVICE_HOST") {
        return ip();
    }
    if name.ends_with("_SERVICE_PORT") || name.contains("_SERVICE_PORT_") {
        return port();
    }
    if name.ends_with("_PORT") && url() {
        return true;
    }
    if port_proto(name) {
        return url();
    }
    let Some((base, field)) = name.rsplit_once('_') else {
        return false;
    };
    port_proto(base)
        && match field {
            "PROTO" => ["tcp", "udp", "sctp"].contains(&v),
            "PORT" => port(),
            "ADDR" => ip(),
            _ => false,
        }
}

/// `..._PORT_<number>_<TCP|UDP|SCTP>`.
fn port_proto(name: &str) -> bool {
    let mut words = name.rsplit('_');
    let (Some(proto), Some(number), Some(port)) = (words.next(), words.next(), words.next()) else {
        return false;
    };
    ["TCP", "UDP", "SCTP"].contains(&proto)
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && port == "PORT"
        && words.next().is_some()
}
