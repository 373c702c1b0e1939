//! A variable the relay does not read but that looks meant for it is never silent:
//! `check-config` refuses it (exit 1, naming it and the nearest known name) and `serve`
//! logs a warning once; its value is never printed.

use std::process::Command;
use std::time::Duration;

use crate::common::process::RelayProcess;

/// A value that must never reach the output.
const SECRET: &str = "s3cr3t-do-not-print-7f3a";

fn check_config(vars: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sealrelay"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // A minimal valid configuration: dry run, no admin socket.
        .env("RELAY_DRY_RUN", "true")
        .env("RELAY_ADMIN_SOCKET", "")
        .envs(vars.iter().copied())
        .arg("check-config")
        .output()
        .expect("run sealrelay check-config");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_refuses_typos_with_suggestions() {
    let (code, _, err) = check_config(&[("RELAY_DEDUP_WINDOW", "10"), ("APNS_TEAMID", "X")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("unknown variable RELAY_DEDUP_WINDOW; did you mean RELAY_DEDUP_WINDOW_S?"),
        "{err}"
    );
    assert!(
        err.contains("unknown variable APNS_TEAMID; did you mean APNS_TEAM_ID?"),
        "{err}"
    );

    // The same configuration, spelled right, is valid.
    let (code, out, err) = check_config(&[("RELAY_DEDUP_WINDOW_S", "10")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("configuration is valid"), "{out}");
}

#[test]
fn an_unknown_variables_value_is_never_printed() {
    for name in [
        "APNS_AUTH_KEY_TEXT",
        "RELAY_QUEUE_KEYS",
        "OTEL_EXPORTER_OTLP_HEADER",
    ] {
        let (code, out, err) = check_config(&[(name, SECRET)]);
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(err.contains(&format!("unknown variable {name}")), "{err}");
        assert!(
            !err.contains(SECRET) && !out.contains(SECRET),
            "{name}'s value printed: {out}{err}"
        );
    }
}

#[test]
fn the_trace_protocol_of_traces_is_checked_too() {
    let (code, _, err) = check_config(&[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=\"grpc\" is not valid")
            && err.contains("http/protobuf"),
        "{err}"
    );
}

#[test]
fn other_tools_variables_and_service_links_pass() {
    let (code, _, err) = check_config(&[
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_LOGS_EXPORTER", "none"),
        ("REDIS_PASSWORD", SECRET),
        ("RELAY_SERVICE_HOST", "10.0.0.7"),
        ("RELAY_PORT", "tcp://10.0.0.7:8080"),
        ("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "relay-0"),
    ]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn serving_with_a_typo_logs_a_warning_naming_it() {
    let vars: Vec<(String, String)> = [
        ("RELAY_DRY_RUN", "true"),
        ("RELAY_DEDUP_WINDOW", SECRET),
        ("RELAY_SHUTDOWN_DELAY_S", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut relay = RelayProcess::spawn(&vars);
    let lines = relay.lines();
    let warning = lines
        .iter()
        .find(|l| l.contains("unknown variable RELAY_DEDUP_WINDOW"))
        .unwrap_or_else(|| panic!("no warning in:\n{}", lines.join("\n")));
    let v: serde_json::Value = serde_json::from_str(warning).expect("a JSON log line");
    assert_eq!(v["level"], "WARN", "{warning}");
    assert_eq!(v["variable"], "RELAY_DEDUP_WINDOW", "{warning}");
    assert_eq!(v["did_you_mean"], "RELAY_DEDUP_WINDOW_S", "{warning}");
    assert_eq!(
        v["message"],
        "unknown variable RELAY_DEDUP_WINDOW; did you mean RELAY_DEDUP_WINDOW_S?"
    );
    // Once, and without the value.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("unknown variable"))
            .count(),
        1,
        "{}",
        lines.join("\n")
    );
    assert!(!lines.iter().any(|l| l.contains(SECRET)), "value logged");
    relay.signal(sealrelay_testkit::process::SIGTERM);
    assert_eq!(relay.wait_exit(Duration::from_secs(20)), Some(0));
    assert!(
        !relay.lines().iter().any(|l| l.contains(SECRET)),
        "value logged"
    );
}
