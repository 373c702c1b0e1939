//! The configuration's validation: defaults, refusals that name the variable, and the
//! table's machine-readable kinds checked against what the parser really accepts.

use super::*;
use crate::delivery::EnvironmentMode;
use crate::policy::Policy;

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
        let (kind, arg) = v.kind.split_once(':').unwrap_or((v.kind, ""));
        match kind {
            "int" => {
                let (lo, hi) = arg.split_once("..").unwrap();
                let (lo, hi): (u64, u64) = (lo.parse().unwrap(), hi.parse().unwrap());
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
            "float" => {
                let (lo, hi) = arg.split_once("..").unwrap();
                let (lo, hi): (f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap());
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
            "enum" => {
                for choice in arg.split('|') {
                    assert!(accepts(v.name, choice), "{} {choice}", v.name);
                }
                assert!(!accepts(v.name, "not-a-choice"), "{}", v.name);
                checked += 1;
            }
            "bool" => {
                assert!(
                    accepts(v.name, "true") && accepts(v.name, "false"),
                    "{}",
                    v.name
                );
                assert!(!accepts(v.name, "maybe"), "{}", v.name);
                checked += 1;
            }
            "addr" | "url" | "string" | "appleid" | "path" | "secret" | "list" => {}
            other => panic!("{}: unknown kind {other}", v.name),
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn defaults_match_their_kinds() {
    for v in VARS {
        if let (Some(d), Some(range)) = (v.default, v.kind.strip_prefix("int:")) {
            let (lo, hi) = range.split_once("..").unwrap();
            let n: u64 = d.parse().unwrap();
            assert!(
                n >= lo.parse().unwrap() && n <= hi.parse().unwrap(),
                "{}",
                v.name
            );
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
