//! The `sealrelay` binary as an operator runs it: `check-config`, start-up refusals, the
//! `smoke` subcommand, JSON logs that never carry a token or a ciphertext, and SIGTERM.

use std::process::Command;
use std::time::Duration;

use sealrelay_testkit::process::{ChildProcess, SIGTERM};

use crate::common::*;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sealrelay"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    c
}

#[test]
fn check_config_accepts_defaults_and_lists_every_problem() {
    let out = bin().arg("check-config").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration is valid"));

    let out = bin()
        .arg("check-config")
        .env("RELAY_DEDUP_WINDOW_S", "-3")
        .env("APNS_TEAM_ID", "ABCDE12345")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RELAY_DEDUP_WINDOW_S=\"-3\""), "{err}");
    assert!(err.contains("APNS_KEY_ID"), "{err}");
}

#[test]
fn flags_work_like_variables() {
    let out = bin()
        .args(["--relay-rate-capacity", "zero", "check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RELAY_RATE_CAPACITY"));
}

#[test]
fn flags_work_after_the_server_subcommands_too() {
    for sub in ["check-config", "serve"] {
        let out = bin()
            .args([sub, "--relay-rate-capacity", "zero"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{sub}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("RELAY_RATE_CAPACITY=\"zero\""), "{sub}: {err}");
    }
    // A flag wins over the environment wherever it is given.
    let out = bin()
        .args(["--relay-rate-capacity", "zero", "check-config"])
        .env("RELAY_RATE_CAPACITY", "5")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn server_options_are_on_the_server_commands_only() {
    let help = |args: &[&str]| {
        let out = bin().args(args).arg("--help").output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for server in [&[][..], &["serve"], &["check-config"]] {
        let text = help(server);
        for flag in ["--redis-url", "--relay-listen", "[env: REDIS_URL]"] {
            assert!(
                text.contains(flag),
                "{server:?} --help lacks {flag}:\n{text}"
            );
        }
    }
    for client in [
        &["push"][..],
        &["admin"],
        &["admin", "signers", "add"],
        &["admin", "receipt"],
        &["keygen"],
        &["smoke"],
    ] {
        let text = help(client);
        for flag in ["--redis-url", "--relay-listen", "RELAY_LISTEN"] {
            assert!(
                !text.contains(flag),
                "{client:?} --help shows {flag}:\n{text}"
            );
        }
    }
    assert!(help(&["push"]).contains("--wait-timeout-s"));
    // A server flag after a client subcommand is a usage error.
    let out = bin()
        .args(["keygen", "--redis-url", "redis://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serving_refuses_a_bad_configuration() {
    let out = bin().env("APNS_ENVIRONMENT", "staging").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("APNS_ENVIRONMENT") && err.contains("production, sandbox or auto"),
        "{err}"
    );
}

/// Starts the binary in dry-run mode on ports it binds itself; returns the child and the
/// ports from its start-up line.
fn spawn_dry_run() -> (ChildProcess, u16, u16) {
    let mut cmd = bin();
    cmd.env("RELAY_LISTEN", "127.0.0.1:0")
        .env("RELAY_ADMIN_LISTEN", "127.0.0.1:0")
        .env("RELAY_DRY_RUN", "true")
        .env("RELAY_SHUTDOWN_DELAY_S", "0")
        .env("RELAY_REPLICA_NAME", "replica-under-test");
    let child = ChildProcess::spawn(cmd, false).unwrap();
    let line = child
        .wait_for_line(Duration::from_secs(20), |l| l.contains("sealrelay serving"))
        .expect("start-up line");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let port = |f: &str| -> u16 {
        v[f].as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (public, admin) = (port("addr"), port("admin_addr"));
    (child, public, admin)
}

#[tokio::test(flavor = "multi_thread")]
async fn smoke_logs_and_sigterm() {
    let (mut child, port, _admin) = spawn_dry_run();
    // The smoke subcommand against the running relay.
    let out = bin()
        .args(["smoke", &format!("http://127.0.0.1:{port}/")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"202 {"v":1,"outcome":"forwarded"}"#
    );

    // A real envelope through the relay: the log names the device by its hash only.
    let token = device(77);
    let mut e = envelope(&token, &id(1234));
    let ciphertext = format!("{}YQ==", "Zm9v".repeat(30));
    e["ciphertext"] = serde_json::json!(ciphertext);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let r = request(
        &client,
        "POST",
        &format!("http://127.0.0.1:{port}/"),
        serde_json::to_vec(&e).unwrap(),
    )
    .await;
    assert_eq!(r.status, 202);

    child.signal(SIGTERM);
    let status = child.wait_exit(Duration::from_secs(20));
    assert_eq!(status, Some(0), "exit after SIGTERM");

    let lines: Vec<String> = child.lines();
    let all = lines.join("\n");
    assert!(!all.contains(&token), "token in logs");
    assert!(!all.contains(&ciphertext[..40]), "ciphertext in logs");
    assert!(!all.contains(&id(1234)), "whole collapse id in logs");
    let hash8 = hash8(&token);
    let line = lines
        .iter()
        .find(|l| l.contains(&hash8) && l.contains("\"outcome\""))
        .unwrap_or_else(|| panic!("no request line for {hash8}:\n{all}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    // A dry run answers the v1 body `forwarded` but is logged and counted as what it is.
    assert_eq!(v["outcome"], "dry_run");
    assert_eq!(v["status"], 202);
    assert_eq!(v["collapse"], &id(1234)[..8]);
    assert_eq!(v["priority"], "time-sensitive");
    assert_eq!(v["event"], false);
    assert!(v["latency_ms"].is_number());
    assert_eq!(v["replica"], "replica-under-test");
    assert!(
        all.contains("RELAY_DRY_RUN"),
        "dry-run warning at start-up:\n{all}"
    );
}

/// How logs name a device: the first 8 hex characters of SHA-256 of its token.
fn hash8(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    d.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// A second SIGTERM while the relay drains exits at once (code 1) instead of waiting out
/// the drain delay.
#[test]
fn a_second_sigterm_forces_exit() {
    let mut cmd = bin();
    cmd.env("RELAY_LISTEN", "127.0.0.1:0")
        .env("RELAY_ADMIN_LISTEN", "127.0.0.1:0")
        .env("RELAY_DRY_RUN", "true")
        .env("RELAY_SHUTDOWN_DELAY_S", "60");
    let mut child = ChildProcess::spawn(cmd, false).unwrap();
    child
        .wait_for_line(Duration::from_secs(20), |l| l.contains("sealrelay serving"))
        .expect("started");
    child.signal(SIGTERM);
    child
        .wait_for_line(Duration::from_secs(10), |l| l.contains("draining"))
        .expect("draining after the first signal");
    let started = std::time::Instant::now();
    child.signal(SIGTERM);
    assert_eq!(child.wait_exit(Duration::from_secs(10)), Some(1));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(child
        .lines()
        .iter()
        .any(|l| l.contains("second shutdown signal")));
}

/// Every intake answer, refusals included (404, 405, 413, 400 invalid, 429 client limit,
/// 408 timeout), writes exactly one log line and one metric increment with its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_intake_answer_writes_one_log_line_and_one_metric() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut cmd = bin();
    cmd.env("RELAY_LISTEN", "127.0.0.1:0")
        .env("RELAY_ADMIN_LISTEN", "127.0.0.1:0")
        .env("RELAY_DRY_RUN", "true")
        .env("RELAY_BODY_TIMEOUT_MS", "300")
        .env("RELAY_IP_RATE_CAPACITY", "5")
        .env("RELAY_IP_RATE_REFILL_PER_S", "0.001");
    let child = ChildProcess::spawn(cmd, false).unwrap();
    let line = child
        .wait_for_line(Duration::from_secs(20), |l| l.contains("sealrelay serving"))
        .expect("started");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let port = |f: &str| -> u16 {
        v[f].as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (public, admin) = (port("addr"), port("admin_addr"));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let url = format!("http://127.0.0.1:{public}");
    let metric = |body: &str, outcome: &str, status: &str| -> u64 {
        let prefix = format!(
            "sealrelay_intake_requests_total{{outcome=\"{outcome}\",status=\"{status}\"}} "
        );
        body.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let metrics_url = format!("http://127.0.0.1:{admin}/metrics");
    let scrape = || request(&client, "GET", &metrics_url, vec![]);
    let before = scrape().await.body;
    let cases: Vec<(&str, &str, &str, Vec<u8>, &str)> = vec![
        ("GET", "/nowhere", "not_found", vec![], "404"),
        ("PUT", "/", "method_not_allowed", vec![], "405"),
        ("POST", "/", "too_large", vec![b'x'; 9000], "413"),
        ("POST", "/", "invalid", b"{}".to_vec(), "400"),
        (
            "POST",
            "/",
            "dry_run",
            serde_json::to_vec(&envelope(&device(1), &id(1))).unwrap(),
            "202",
        ),
    ];
    for (method, path, _, body, status) in &cases {
        let r = request(&client, method, &format!("{url}{path}"), body.clone()).await;
        assert_eq!(r.status.to_string(), *status, "{method} {path}");
    }
    // A body that never arrives: 408.
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", public))
        .await
        .unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"));
    // Four posts took tokens of the client bucket (5): one more passes, the rest are 429.
    let mut limited = 0;
    for _ in 0..4 {
        if request(&client, "POST", &url, b"{}".to_vec()).await.status == 429 {
            limited += 1;
        }
    }
    assert_eq!(limited, 3);
    let after = scrape().await.body;
    let mut expected: Vec<(&str, &str, u64)> = cases.iter().map(|c| (c.2, c.4, 1)).collect();
    expected.push(("timeout", "408", 1));
    expected.push(("client_rate_limited", "429", limited));
    for (outcome, status, n) in &expected {
        let invalid_extra = if *outcome == "invalid" {
            4 - limited
        } else {
            0
        };
        assert_eq!(
            metric(&after, outcome, status) - metric(&before, outcome, status),
            n + invalid_extra,
            "{outcome} {status}"
        );
    }
    // One log line per answer, with its outcome and status.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let lines = child.lines();
        let count = |outcome: &str| {
            lines
                .iter()
                .filter(|l| {
                    l.contains("\"message\":\"intake\"")
                        && l.contains(&format!("\"outcome\":\"{outcome}\""))
                })
                .count() as u64
        };
        let ok = expected.iter().all(|(o, _, n)| {
            let extra = if *o == "invalid" { 4 - limited } else { 0 };
            count(o) == n + extra
        });
        if ok {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "log lines per outcome differ: {:?}",
            expected
                .iter()
                .map(|(o, _, _)| (o, count(o)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.signal(SIGTERM);
}

/// `sealrelay smoke` keeps testing: every run is a new device, so against credentials
/// Apple accepts every run reaches APNs (no run is answered from the dead-token memory),
/// and the healthy 410 BadDeviceToken exits 0; a relay without credentials exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_reaches_apns_on_every_run() {
    let h = Harness::start().await;
    // Apple answers an unknown token BadDeviceToken on both environments.
    h.prod
        .reply_default(Some(Reply::new(400, Some("BadDeviceToken"))));
    h.sandbox
        .reply_default(Some(Reply::new(400, Some("BadDeviceToken"))));
    let url = format!("http://{}/", h.addr());
    for run in 1..=3 {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || bin().args(["smoke", &url]).output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "run {run}: {stdout}");
        assert_eq!(
            stdout.trim(),
            r#"410 {"v":1,"error":"device token rejected by APNs","reason":"BadDeviceToken"}"#
        );
        assert_eq!(h.prod.received().len(), run, "run {run} reached APNs");
    }
    let tokens: std::collections::HashSet<_> =
        h.prod.received().into_iter().map(|r| r.token).collect();
    assert_eq!(tokens.len(), 3);

    let unconfigured = Harness::with(Options::default().without_credentials()).await;
    let url = format!("http://{}/", unconfigured.addr());
    let out = tokio::task::spawn_blocking(move || bin().args(["smoke", &url]).output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("502 "));
}
