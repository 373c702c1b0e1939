//! The configuration's validation: defaults, refusals that name the variable, and the
//! table's machine-readable kinds checked against what the parser really accepts.

use super::*;
use crate::policy::Policy;
use crate::push::EnvironmentMode;

use std::collections::HashMap;

/// The configuration these variables give (shared by the sections' own tests).
pub(super) fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load(&move |k: &str| map.get(k).cloned())
}

/// Every problem these variables give, as start-up prints them.
pub(super) fn errors(pairs: &[(&str, &str)]) -> String {
    load(pairs).unwrap_err().to_string()
}

#[test]
fn defaults_are_valid_and_match_design() {
    let c = load(&[]).unwrap();
    assert_eq!(c.app.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(c.app.admin_listen.to_string(), "0.0.0.0:9090");
    assert_eq!(c.policy, Policy::defaults());
    assert_eq!(c.v1.max_ciphertext_chars, 3800);
    assert_eq!(c.core.environment, EnvironmentMode::Auto);
    assert!(matches!(c.delivery, Delivery::Unconfigured));
}

/// Unset, the runtime has a worker per core; set, the count given (1: one thread).
#[test]
fn worker_threads_are_one_per_core_unless_given() {
    assert_eq!(load(&[]).unwrap().worker_threads(), None);
    let c = load(&[("RELAY_WORKER_THREADS", "1")]).unwrap();
    assert_eq!(c.worker_threads(), Some(1));
    let e = errors(&[("RELAY_WORKER_THREADS", "0")]);
    assert!(
        e.contains("RELAY_WORKER_THREADS=\"0\"") && e.contains("an integer from 1 to 1024"),
        "{e}"
    );
}

/// `RELAY_RUNTIME`: one shared runtime unless `per-core`, which runs `RELAY_WORKER_THREADS`
/// cores (unset: one per core of the machine) and needs Redis to share their state.
#[test]
fn per_core_runtimes_need_redis_and_count_the_worker_threads() {
    assert_eq!(load(&[]).unwrap().cores(), None);
    let redis = ("REDIS_URL", "redis://127.0.0.1:6379");
    let c = load(&[
        redis,
        ("RELAY_RUNTIME", "per-core"),
        ("RELAY_WORKER_THREADS", "3"),
    ])
    .unwrap();
    assert_eq!(c.cores(), Some(3));
    let cpus = std::thread::available_parallelism().unwrap().get();
    let c = load(&[redis, ("RELAY_RUNTIME", "per-core")]).unwrap();
    assert_eq!(c.cores(), Some(cpus));
    let e = errors(&[("RELAY_RUNTIME", "per-core")]);
    assert!(
        e.contains("RELAY_RUNTIME=per-core") && e.contains("set REDIS_URL"),
        "{e}"
    );
    let e = errors(&[redis, ("RELAY_RUNTIME", "per-thread")]);
    assert!(
        e.contains("RELAY_RUNTIME=\"per-thread\"") && e.contains("shared or per-core"),
        "{e}"
    );
}

#[test]
fn bad_values_name_the_variable_and_what_is_allowed() {
    let e = errors(&[("RELAY_DEDUP_WINDOW_S", "soon")]);
    assert!(e.contains("RELAY_DEDUP_WINDOW_S=\"soon\""), "{e}");
    assert!(e.contains("an integer from 1 to 86400"), "{e}");
    let e = errors(&[("RELAY_RATE_CAPACITY", "0")]);
    assert!(e.contains("RELAY_RATE_CAPACITY"), "{e}");
    let e = errors(&[("RELAY_RATE_REFILL_PER_S", "-1")]);
    assert!(e.contains("RELAY_RATE_REFILL_PER_S"), "{e}");
    let e = errors(&[("RELAY_RATE_REFILL_PER_S", "NaN")]);
    assert!(e.contains("RELAY_RATE_REFILL_PER_S"), "{e}");
    let e = errors(&[("APNS_ENVIRONMENT", "prod")]);
    assert!(e.contains("production, sandbox or auto"), "{e}");
    let e = errors(&[("RELAY_LISTEN", "8080")]);
    assert!(e.contains("RELAY_LISTEN"), "{e}");
    let e = errors(&[("RELAY_DRY_RUN", "yes please")]);
    assert!(
        e.contains("RELAY_DRY_RUN") && e.contains("true or false"),
        "{e}"
    );
    let e = errors(&[("APNS_PRODUCTION_URL", "http://x")]);
    assert!(e.contains("APNS_PRODUCTION_URL"), "{e}");
    let e = errors(&[("REDIS_URL", "localhost:6379")]);
    assert!(e.contains("REDIS_URL"), "{e}");
    let e = errors(&[("REDIS_URL", "redis://:hunter2@")]);
    assert!(e.contains("REDIS_URL") && !e.contains("hunter2"), "{e}");
    let e = errors(&[("RELAY_REDIS_PREFIX", "a{b}")]);
    assert!(e.contains("RELAY_REDIS_PREFIX"), "{e}");
    let c = load(&[(
        "REDIS_URL",
        "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001",
    )])
    .unwrap();
    assert_eq!(c.store.redis.unwrap().prefix, "sealrelay:");
    let e = errors(&[("RELAY_LOG_FORMAT", "xml")]);
    assert!(e.contains("RELAY_LOG_FORMAT"), "{e}");
}

/// A receipt outlives the freshness window strictly: a push issued 30 s ahead of the relay's
/// clock can be replayed until 300 s after it was issued, 330 s after the receipt was made,
/// so a 330 s TTL would let a replay at that instant find no receipt and send again.
#[test]
fn the_receipt_ttl_is_strictly_longer_than_the_freshness_window() {
    let e = errors(&[("RELAY_RECEIPT_TTL_S", "330")]);
    assert!(e.contains("RELAY_RECEIPT_TTL_S=\"330\""), "{e}");
    assert!(e.contains("331"), "{e}");
    let c = load(&[("RELAY_RECEIPT_TTL_S", "331")]).unwrap();
    assert!(c.signed.receipt_ttl_ms > 330_000);
}

#[test]
fn all_problems_are_reported_at_once() {
    let e = load(&[("RELAY_FLAP_WINDOW_S", "x"), ("RELAY_FLAP_RESET_S", "0")]).unwrap_err();
    assert_eq!(e.0.len(), 2, "{e}");
}

#[test]
fn ciphertext_cap_is_refused_when_the_body_would_not_fit() {
    assert!(load(&[("RELAY_MAX_CIPHERTEXT_CHARS", "3800")]).is_ok());
    let e = errors(&[("RELAY_MAX_CIPHERTEXT_CHARS", "4000")]);
    assert!(
        e.contains("RELAY_MAX_CIPHERTEXT_CHARS=4000") && e.contains("4096"),
        "{e}"
    );
    // A long stub eats into the room.
    let long = "x".repeat(120);
    let e = errors(&[("RELAY_ALERT_TITLE", &long), ("RELAY_ALERT_BODY", &long)]);
    assert!(e.contains("RELAY_MAX_CIPHERTEXT_CHARS"), "{e}");
}

#[test]
fn partial_credentials_name_the_missing_ones() {
    let e = errors(&[
        ("APNS_TEAM_ID", "ABCDE12345"),
        ("APNS_TOPIC", "com.example.app"),
    ]);
    assert!(e.contains("APNS_KEY_ID"), "{e}");
    assert!(e.contains("APNS_AUTH_KEY or APNS_AUTH_KEY_FILE"), "{e}");
    assert!(!e.contains("APNS_TOPIC not set"), "{e}");
}

#[test]
fn dry_run_without_credentials() {
    let c = load(&[("RELAY_DRY_RUN", "true")]).unwrap();
    assert!(matches!(c.delivery, Delivery::DryRun));
}

#[test]
fn bad_key_is_refused_without_printing_it() {
    let e = errors(&[
        ("APNS_TEAM_ID", "ABCDE12345"),
        ("APNS_KEY_ID", "KEY1234567"),
        (
            "APNS_AUTH_KEY",
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----",
        ),
        ("APNS_TOPIC", "com.example.app"),
    ]);
    assert!(e.contains("APNS_AUTH_KEY is not valid"), "{e}");
    assert!(!e.contains("c2VjcmV0"), "{e}");
}

#[test]
fn flags_are_derived_from_variables() {
    assert_eq!(Config::flag_name("RELAY_LISTEN"), "relay-listen");
    let mut names: Vec<_> = VARS.iter().map(|v| v.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), VARS.len(), "duplicate variable");
}

/// Every `int:` and `float:` kind in the table is exactly what the parser accepts (its
/// bounds in, one step past them out), every `enum:` lists exactly what it takes, and
/// `bool` takes true and false: the chart's schema, generated from the kinds, cannot drift
/// from the binary.
#[test]
fn kinds_agree_with_the_parser() {
    // Variables whose acceptance depends on another one, and their companions.
    let context = |name: &str| -> Vec<(&'static str, &'static str)> {
        match name {
            "APNS_REQUEST_TIMEOUT_MS" => vec![("RELAY_RETRY_LEASE_MS", "600000")],
            "RELAY_RETRY_LEASE_MS" => vec![("APNS_REQUEST_TIMEOUT_MS", "100")],
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" => vec![("OTEL_BSP_MAX_QUEUE_SIZE", "1000000")],
            "OTEL_BSP_MAX_QUEUE_SIZE" => vec![("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")],
            "RELAY_RUNTIME" => vec![("REDIS_URL", "redis://127.0.0.1:6379")],
            _ => vec![],
        }
    };
    let accepts = |name: &str, value: &str| {
        let mut pairs = context(name);
        pairs.push((name, value));
        let e = load(&pairs)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        !e.contains(name)
    };
    let mut checked = 0;
    for v in VARS {
        match v.kind {
            Kind::Int(lo, hi) => {
                // The ciphertext cap's upper range is bounded by the APNs body too.
                if v.name != "RELAY_MAX_CIPHERTEXT_CHARS" {
                    assert!(accepts(v.name, &hi.to_string()), "{} {hi}", v.name);
                    assert!(
                        !accepts(v.name, &(hi + 1).to_string()),
                        "{} {}",
                        v.name,
                        hi + 1
                    );
                }
                assert!(accepts(v.name, &lo.to_string()), "{} {lo}", v.name);
                if lo > 0 {
                    assert!(
                        !accepts(v.name, &(lo - 1).to_string()),
                        "{} {}",
                        v.name,
                        lo - 1
                    );
                }
                assert!(!accepts(v.name, "x"), "{}", v.name);
                checked += 1;
            }
            Kind::Float(lo, hi) => {
                assert!(accepts(v.name, &lo.to_string()), "{} {lo}", v.name);
                assert!(accepts(v.name, &hi.to_string()), "{} {hi}", v.name);
                assert!(
                    !accepts(v.name, &(lo - (hi - lo) / 1000.0).to_string()),
                    "{} below",
                    v.name
                );
                assert!(
                    !accepts(v.name, &(hi * 2.0).to_string()),
                    "{} above",
                    v.name
                );
                assert!(!accepts(v.name, "NaN"), "{}", v.name);
                checked += 1;
            }
            Kind::Enum(choices) => {
                for choice in choices {
                    assert!(accepts(v.name, choice), "{} {choice}", v.name);
                }
                assert!(!accepts(v.name, "not-a-choice"), "{}", v.name);
                checked += 1;
            }
            Kind::Bool => {
                assert!(
                    accepts(v.name, "true") && accepts(v.name, "false"),
                    "{}",
                    v.name
                );
                assert!(!accepts(v.name, "maybe"), "{}", v.name);
                checked += 1;
            }
            Kind::Addr
            | Kind::RedisUrl
            | Kind::HttpUrl
            | Kind::HttpsUrl
            | Kind::Text(..)
            | Kind::AppleId
            | Kind::Path
            | Kind::Secret
            | Kind::CidrList => {}
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn defaults_match_their_kinds() {
    for v in VARS {
        match (v.default, v.kind) {
            (Some(d), Kind::Int(lo, hi)) => {
                let n: u64 = d.parse().unwrap();
                assert!(n >= lo && n <= hi, "{}", v.name);
            }
            (Some(d), Kind::Float(lo, hi)) => {
                let x: f64 = d.parse().unwrap();
                assert!(x >= lo && x <= hi, "{}", v.name);
            }
            (Some(d), Kind::Enum(words)) => assert!(words.contains(&d), "{}", v.name),
            (Some(d), Kind::Text(min, max)) => {
                assert!((min..=max).contains(&d.chars().count()), "{}", v.name)
            }
            _ => {}
        }
    }
}

#[test]
fn tiny_refill_rates_are_refused_so_bucket_arithmetic_cannot_overflow() {
    for name in ["RELAY_RATE_REFILL_PER_S", "RELAY_IP_RATE_REFILL_PER_S"] {
        for bad in ["0", "0.0000001", "1e-300", "-1", "inf"] {
            let e = errors(&[(name, bad)]);
            assert!(e.contains(name), "{name}={bad}: {e}");
        }
    }
    let c = load(&[
        ("RELAY_RATE_REFILL_PER_S", "0.001"),
        ("RELAY_RATE_CAPACITY", "1000000"),
    ])
    .unwrap();
    // The largest tolerance the bucket can compute stays exact in a double.
    assert!(c.policy.emission_us * i64::from(c.policy.rate_capacity) <= 1_000_000_000_000_000);
}

#[test]
fn the_queue_key_comes_from_the_variable_or_the_apns_key() {
    let e = errors(&[("RELAY_QUEUE_KEY", "short")]);
    assert!(e.contains("RELAY_QUEUE_KEY") && !e.contains("short"), "{e}");
    let c = load(&[("RELAY_QUEUE_KEY", &"k".repeat(32))]).unwrap();
    assert!(c.store.queue_key.is_some());
    assert!(load(&[]).unwrap().store.queue_key.is_none());
}

/// The nearest known name, one named case per row: (case, typed, offered).
#[test]
fn suggestions_name_the_nearest_known_variable() {
    let table: &[(&str, &str, Option<&str>)] = &[
        (
            "dropped unit suffix",
            "RELAY_DEDUP_WINDOW",
            Some("RELAY_DEDUP_WINDOW_S"),
        ),
        ("missing underscore", "APNS_TEAMID", Some("APNS_TEAM_ID")),
        ("swapped letters", "RELAY_LITSEN", Some("RELAY_LISTEN")),
        ("swapped prefix", "REALY_LISTEN", Some("RELAY_LISTEN")),
        ("one letter off", "REDIS_URI", Some("REDIS_URL")),
        ("lower case", "relay_dry_run", Some("RELAY_DRY_RUN")),
        ("added word", "RELAY_APPS_LIST", Some("RELAY_APPS")),
        ("plural", "RELAY_ICE_TURN_URL", Some("RELAY_ICE_TURN_URLS")),
        (
            "otel typo",
            "OTEL_EXPORTER_OTPL_ENDPOINT",
            Some("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ),
        (
            "otel signal variant",
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            Some("OTEL_EXPORTER_OTLP_CERTIFICATE"),
        ),
        ("far from everything", "RELAY_BANANA", None),
        ("a family prefix alone", "RELAY_", None),
        ("empty", "", None),
        (
            "not ascii",
            "RELAY_DÉDUP_WINDOW_S",
            Some("RELAY_DEDUP_WINDOW_S"),
        ),
    ];
    for (case, typed, offered) in table {
        assert_eq!(unknown::suggest(typed), *offered, "{case}: {typed}");
    }
}

#[test]
fn distance_counts_edits_and_swaps() {
    let table: &[(&str, &str, &str, usize)] = &[
        ("equal", "ABC", "ABC", 0),
        ("insertion", "ABC", "ABXC", 1),
        ("deletion", "ABC", "AC", 1),
        ("substitution", "ABC", "AXC", 1),
        ("transposition", "ABCD", "ACBD", 1),
        ("from empty", "", "ABC", 3),
        ("to empty", "ABC", "", 3),
        ("kitten", "KITTEN", "SITTING", 3),
    ];
    for (case, a, b, d) in table {
        assert_eq!(unknown::distance(a, b), *d, "{case}");
        assert_eq!(unknown::distance(b, a), *d, "{case}, reversed");
    }
}

/// The environment's unknown names: the relay's families, typos anywhere, and what is left
/// alone (other signals, other tools, Kubernetes service links, Operator helpers).
#[test]
fn the_environment_scan_flags_what_looks_meant_for_the_relay() {
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let flagged = |pairs: &[(&str, &str)]| -> Vec<String> {
        unknown::scan(&env(pairs))
            .unknown
            .into_iter()
            .map(|u| u.name)
            .collect()
    };
    for name in [
        "RELAY_DEDUP_WINDOW",
        "APNS_TEAMID",
        "FCM_SERVER_KEY",
        "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
        "OTEL_TRACES_EXPORTER",
        "OTEL_SDK_DISABLED",
        "OTEL_PROPAGATORS",
        "OTEL_ATTRIBUTE_COUNT_LIMIT",
        "OTEL_RESOURCE_ATTRIBUTE",
        "OTEL_EXPORTER_OTPL_ENDPOINT",
        "REDIS_URI",
        "REALY_LISTEN",
        "relay_listen",
    ] {
        assert_eq!(flagged(&[(name, "1")]), vec![name.to_owned()], "{name}");
    }
    for (name, value) in [
        ("RUST_LOG", "debug"),
        ("HOME", "/root"),
        ("SEALRELAY_GIT_SHA", "abc"),
        ("REDIS_PASSWORD", "hunter2"),
        ("REDIS_HOST", "redis"),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_LOGS_EXPORTER", "none"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
        ("OTEL_BLRP_SCHEDULE_DELAY", "1000"),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4318"),
        ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc"),
        ("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "relay-0"),
        ("RELAY_SERVICE_HOST", "10.0.0.7"),
        ("RELAY_SERVICE_PORT", "8080"),
        ("RELAY_SERVICE_PORT_HTTP", "8080"),
        ("RELAY_PORT", "tcp://10.0.0.7:8080"),
        ("RELAY_PORT_8080_TCP", "tcp://10.0.0.7:8080"),
        ("RELAY_PORT_8080_TCP_PROTO", "tcp"),
        ("RELAY_PORT_8080_TCP_PORT", "8080"),
        ("RELAY_PORT_8080_TCP_ADDR", "10.0.0.7"),
        ("APNS_MOCK_SERVICE_HOST", "fd00::7"),
        ("RELAY_LISTEN", "127.0.0.1:0"),
    ] {
        assert!(flagged(&[(name, value)]).is_empty(), "{name}={value}");
    }
    // Service-link names with values of another shape are the operator's, and flagged.
    for (name, value) in [("RELAY_PORT", "8080"), ("RELAY_SERVICE_HOST", "relay")] {
        assert_eq!(
            flagged(&[(name, value)]),
            vec![name.to_owned()],
            "{name}={value}"
        );
    }
    // A name given twice is reported once.
    assert_eq!(
        flagged(&[("APNS_TEAMID", "a"), ("APNS_TEAMID", "b")]).len(),
        1
    );
}

#[test]
fn unknown_variables_are_named_with_a_suggestion_never_with_their_value() {
    let env: Vec<(String, String)> = [
        ("RELAY_DEDUP_WINDOW", "10"),
        ("APNS_TEAMID", "s3cr3t-value"),
        ("OTEL_PROPAGATORS", "b3"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let lookup = |_: &str| None;
    let e = Config::load_env(&lookup, &env, UnknownVars::Refuse)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown variable RELAY_DEDUP_WINDOW; did you mean RELAY_DEDUP_WINDOW_S?"),
        "{e}"
    );
    assert!(
        e.contains("unknown variable APNS_TEAMID; did you mean APNS_TEAM_ID?"),
        "{e}"
    );
    assert!(
        e.contains("OTEL_PROPAGATORS") && e.contains("W3C trace context"),
        "{e}"
    );
    assert!(!e.contains("s3cr3t") && !e.contains("b3"), "{e}");
    // Serving: valid, with the warnings kept for the log.
    let c = Config::load_env(&lookup, &env, UnknownVars::Warn).unwrap();
    let names: Vec<_> = c
        .telemetry
        .unknown_vars
        .iter()
        .map(|u| (u.name.as_str(), u.did_you_mean))
        .collect();
    assert_eq!(
        names,
        [
            ("APNS_TEAMID", Some("APNS_TEAM_ID")),
            ("OTEL_PROPAGATORS", None),
            ("RELAY_DEDUP_WINDOW", Some("RELAY_DEDUP_WINDOW_S")),
        ]
    );
    // Nothing unknown: the same configuration as `load`.
    assert!(Config::load_env(&lookup, &[], UnknownVars::Refuse).is_ok());
}

#[test]
fn sdk_variables_without_effect_are_refused_even_when_serving() {
    let lookup = |_: &str| None;
    for name in ["OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_CONCURRENT_EXPORTS"] {
        let env = vec![(name.to_owned(), "30000".to_owned())];
        let e = Config::load_env(&lookup, &env, UnknownVars::Warn)
            .unwrap_err()
            .to_string();
        assert!(e.contains(name) && e.contains("no effect"), "{e}");
        // Empty is unset.
        let env = vec![(name.to_owned(), String::new())];
        assert!(Config::load_env(&lookup, &env, UnknownVars::Refuse).is_ok());
    }
}

/// Every OTEL_* variable the OpenTelemetry SDK and OTLP exporter 0.33 read for traces is in
/// the table (validated) or refused: none is read behind the configuration's back.
#[test]
fn every_otel_variable_the_sdk_reads_is_known_or_refused() {
    let sdk_reads = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
        "OTEL_SPAN_EVENT_COUNT_LIMIT",
        "OTEL_SPAN_LINK_COUNT_LIMIT",
        "OTEL_BSP_SCHEDULE_DELAY",
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        "OTEL_BSP_EXPORT_TIMEOUT",
        "OTEL_BSP_MAX_CONCURRENT_EXPORTS",
    ];
    for name in sdk_reads {
        assert!(
            VARS.iter().any(|v| v.name == name) || unknown::REFUSED.iter().any(|(n, _)| *n == name),
            "{name}"
        );
    }
}

#[test]
fn trace_protocol_compression_and_timeout_are_validated() {
    let e = errors(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")]);
    assert!(
        e.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=\"grpc\"") && e.contains("http/protobuf"),
        "{e}"
    );
    let c = load(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")]).unwrap();
    assert_eq!(c.telemetry.export_timeout.as_millis(), 10_000);
    for name in [
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    ] {
        let e = errors(&[(name, "gzip")]);
        assert!(e.contains(name) && e.contains("none"), "{e}");
        assert!(load(&[(name, "none")]).is_ok());
    }
    let c = load(&[
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "20000"),
    ])
    .unwrap();
    assert_eq!(c.telemetry.export_timeout.as_millis(), 20_000);
    let c = load(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "3000")]).unwrap();
    assert_eq!(c.telemetry.export_timeout.as_millis(), 3_000);
}

#[test]
fn development_is_sandbox() {
    let c = load(&[("APNS_ENVIRONMENT", "development")]).unwrap();
    assert_eq!(c.core.environment, EnvironmentMode::Sandbox);
    let help = VARS
        .iter()
        .find(|v| v.name == "APNS_ENVIRONMENT")
        .unwrap()
        .help;
    assert!(help.contains("development"), "{help}");
}

#[test]
fn bounds_that_other_modules_define_match_the_table() {
    // The smallest ciphertext the alert payload is built for.
    assert_eq!(
        vars::RELAY_MAX_CIPHERTEXT_CHARS.kind,
        Kind::Int(crate::delivery::alert::MIN_CIPHERTEXT_CHARS as u64, 4096)
    );
    // Every variable is listed once, and each constant is the one listed.
    let mut names: Vec<&str> = VARS.iter().map(|v| v.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), VARS.len());
    assert!(VARS.iter().any(|v| v.name == vars::RELAY_LISTEN.name));
}

#[test]
fn every_variable_a_reader_names_in_prose_is_one_it_reads() {
    // Messages name variables in their text; a misspelt name there would send an operator
    // looking for a setting that does not exist. (`unknown.rs` names other programs'
    // variables on purpose.)
    let sources = [
        ("admin.rs", include_str!("admin.rs")),
        ("apns.rs", include_str!("apns.rs")),
        ("fcm.rs", include_str!("fcm.rs")),
        ("ice.rs", include_str!("ice.rs")),
        ("listen.rs", include_str!("listen.rs")),
        ("mailbox.rs", include_str!("mailbox.rs")),
        ("mod.rs", include_str!("mod.rs")),
        ("policy.rs", include_str!("policy.rs")),
        ("store.rs", include_str!("store.rs")),
        ("telemetry.rs", include_str!("telemetry.rs")),
        ("v1.rs", include_str!("v1.rs")),
    ];
    // Not variables: a Rust constant, and the module documentation's example of a typo.
    let not_variables = ["APNS_MAX_BODY_BYTES", "RELAY_DEDUP_WINDOW"];
    let mut unknown = Vec::new();
    for (file, text) in sources {
        let words =
            text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'));
        for w in words {
            let ours = ["RELAY_", "APNS_", "FCM_", "OTEL_", "REDIS_"]
                .iter()
                .any(|p| w.starts_with(p) && w.len() > p.len());
            let known = VARS.iter().any(|v| v.name == w) || not_variables.contains(&w);
            if ours && !w.ends_with('_') && !known {
                unknown.push(format!("{file}: {w}"));
            }
        }
    }
    assert!(unknown.is_empty(), "{unknown:?}");
}

#[test]
fn redis_urls_of_another_scheme_or_with_a_raw_password_are_refused() {
    let e = errors(&[("REDIS_URL", "http://x")]);
    assert!(
        e.contains("REDIS_URL") && e.contains("\"http\"") && e.contains("rediss"),
        "{e}"
    );
    let e = errors(&[("REDIS_URL", "ftp://x")]);
    assert!(e.contains("REDIS_URL") && e.contains("\"ftp\""), "{e}");
    let e = errors(&[("REDIS_URL", "redis://:Zm9v/YmFy+cXV4=@redis:6379/0")]);
    assert!(
        e.contains("REDIS_URL") && e.contains("percent-encode"),
        "{e}"
    );
    assert!(!e.contains("Zm9v"), "the password is repeated: {e}");
    assert!(load(&[("REDIS_URL", "redis://:Zm9v%2FYmFy%2BcXV4%3D@redis:6379/0")]).is_ok());
}

#[test]
fn urls_carrying_credentials_are_refused_without_repeating_them() {
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        let e = errors(&[(var, "https://tenant:s3cr3t@collector:4318")]);
        assert!(
            e.contains(var) && e.contains("OTEL_EXPORTER_OTLP_HEADERS"),
            "{e}"
        );
        assert!(!e.contains("s3cr3t"), "the credential is repeated: {e}");
        // An @ in the path is not user information.
        assert!(load(&[(var, "https://collector:4318/a@b")]).is_ok());
    }
    let e = errors(&[("APNS_SANDBOX_URL", "https://u:pw@apns.local")]);
    assert!(e.contains("APNS_SANDBOX_URL") && !e.contains("pw@"), "{e}");
}

#[test]
fn a_configuration_with_nothing_to_serve_says_so() {
    let c = load(&[]).unwrap();
    let why = c.unserved().expect("no credentials, no dry run, no app");
    assert!(
        why.contains("RELAY_DRY_RUN") && why.contains("RELAY_APPS"),
        "{why}"
    );
    assert!(c.summary().contains("/readyz will stay 503"));
    assert!(load(&[("RELAY_DRY_RUN", "true")])
        .unwrap()
        .unserved()
        .is_none());
    let apps = load(&[("RELAY_APPS", "demo")]).unwrap();
    assert!(
        apps.unserved().is_none(),
        "mailboxes alone are something to serve"
    );
}

#[test]
fn regions_are_refused_unless_complete_and_consistent() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("region.key");
    std::fs::write(&key, format!("{}\n", "k".repeat(32))).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let short = dir.path().join("short.key");
    std::fs::write(&short, "k".repeat(31)).unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.path().join("open.key");
    std::fs::write(&open, "k".repeat(40)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let key = key.display().to_string();
    let base = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("RELAY_DRY_RUN", "true".to_owned()),
            ("RELAY_REGION", "eu".to_owned()),
            (
                "RELAY_REGION_PEERS",
                "us=http://us.internal:9443".to_owned(),
            ),
            ("RELAY_REGION_LISTEN", "127.0.0.1:0".to_owned()),
            ("RELAY_REGION_KEY_FILE", key.clone()),
        ];
        for (k, val) in extra {
            v.retain(|(n, _)| n != k);
            v.push((k, val.clone()));
        }
        v
    };
    let load_v = |v: &[(&'static str, String)]| {
        let pairs: Vec<(&str, &str)> = v.iter().map(|(k, v)| (*k, v.as_str())).collect();
        load(&pairs)
    };
    let errs = |v: &[(&'static str, String)]| match load_v(v) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    };
    let c = load_v(&base(&[])).unwrap();
    let r = c.region.as_ref().unwrap();
    assert_eq!((r.name.as_str(), r.peers.len()), ("eu", 1));
    assert_eq!(r.key.expose().len(), 32, "one trailing newline removed");
    assert!(load(&[("RELAY_DRY_RUN", "true")]).unwrap().region.is_none());
    type Case = (&'static str, Vec<(&'static str, String)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            "a bad name",
            base(&[("RELAY_REGION", "EU".into())]),
            "RELAY_REGION=\"EU\"",
        ),
        (
            "no key file",
            base(&[("RELAY_REGION_KEY_FILE", String::new())]),
            "RELAY_REGION_KEY_FILE is not",
        ),
        (
            "a short key",
            base(&[("RELAY_REGION_KEY_FILE", short.display().to_string())]),
            "31 bytes",
        ),
        (
            "a key others can read",
            base(&[("RELAY_REGION_KEY_FILE", open.display().to_string())]),
            "mode 0644",
        ),
        (
            "a peer named twice",
            base(&[("RELAY_REGION_PEERS", "us=http://a:1,us=http://b:1".into())]),
            "named twice",
        ),
        (
            "a peer named like this region",
            base(&[("RELAY_REGION_PEERS", "eu=http://a:1".into())]),
            "own name",
        ),
        (
            "a bad URL",
            base(&[("RELAY_REGION_PEERS", "us=ftp://a:1".into())]),
            "not an http",
        ),
        (
            "a URL with a path",
            base(&[("RELAY_REGION_PEERS", "us=http://a:1/x".into())]),
            "path or a query",
        ),
        (
            "a URL with credentials",
            base(&[("RELAY_REGION_PEERS", "us=http://u:p@a:1".into())]),
            "credentials",
        ),
        (
            "no listener",
            base(&[("RELAY_REGION_LISTEN", String::new())]),
            "RELAY_REGION_LISTEN is not",
        ),
        (
            "no peers",
            base(&[("RELAY_REGION_PEERS", String::new())]),
            "RELAY_REGION_PEERS is not",
        ),
        (
            "a certificate without its key",
            base(&[("RELAY_REGION_TLS_CERT_FILE", key.clone())]),
            "go together",
        ),
        (
            "a certificate file that holds none",
            base(&[
                ("RELAY_REGION_TLS_CERT_FILE", key.clone()),
                ("RELAY_REGION_TLS_KEY_FILE", key.clone()),
            ]),
            "RELAY_REGION_TLS_CERT_FILE",
        ),
        (
            "a CA file that holds none",
            base(&[("RELAY_REGION_CA_FILE", key.clone())]),
            "RELAY_REGION_CA_FILE",
        ),
    ];
    for (case, vars, want) in cases {
        let e = errs(&vars);
        assert!(e.contains(want), "{case}: {e}");
    }
    // Region variables without RELAY_REGION: refused, not ignored.
    let e = errs(&[
        ("RELAY_DRY_RUN", "true".into()),
        ("RELAY_REGION_PEERS", "us=http://a:1".into()),
    ]);
    assert!(
        e.contains("RELAY_REGION_PEERS is set but RELAY_REGION is not"),
        "{e}"
    );
    assert!(!e.contains("p@a"), "{e}");
}
