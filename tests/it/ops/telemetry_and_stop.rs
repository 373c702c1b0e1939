//! Operations: the metrics pass `promtool check metrics`, traces arrive at an OTLP/HTTP
//! receiver with the right names and parent links, and SIGTERM under load drops nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::process::RelayProcess;
use crate::common::*;
use bytes::Bytes;
use http_body_util::Full;
use sealrelay_testkit::otlp::Receiver;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs promtool (Debian package prometheus); scripts/test.sh installs it and runs ignored tests"]
async fn metrics_pass_promtool() {
    let h = Harness::with(Options::default().var("RELAY_RATE_CAPACITY", "1")).await;
    let d = device(1);
    h.post(&envelope(&d, &id(1))).await; // forwarded
    h.post(&envelope(&d, &id(1))).await; // coalesced
    h.post(&envelope(&d, &id(2))).await; // rate limited
    h.request("POST", "/", b"{}".to_vec()).await; // invalid
    h.prod
        .reply_times(&device(2), Reply::new(410, Some("Unregistered")), 1);
    h.post(&envelope(&device(2), &id(1))).await;
    let body = h.admin("/metrics").await.body;
    for name in [
        "sealrelay_intake_requests_total",
        "sealrelay_intake_duration_seconds_bucket",
        "sealrelay_apns_requests_total",
        "sealrelay_apns_duration_seconds_bucket",
        "sealrelay_store_duration_seconds_bucket",
        "sealrelay_provider_token_refreshes_total",
        "sealrelay_inflight_requests",
        "sealrelay_degraded",
        "sealrelay_retry_queue_depth",
        "sealrelay_build_info",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
    assert!(body.contains(r#"reason="Unregistered""#), "{body}");
    // Built from a git checkout, the binary names its commit (build.rs), never "unknown".
    if std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".git")
        .exists()
    {
        let info = body
            .lines()
            .find(|l| l.starts_with("sealrelay_build_info{"))
            .unwrap();
        let sha = info
            .split("git_sha=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("");
        assert!(
            sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "{info}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.txt");
    std::fs::write(&file, &body).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn relay_process_vars(
    pki: &Pki,
    key: &AuthKey,
    prod: &MockApns,
    sandbox: &MockApns,
) -> Vec<(String, String)> {
    let mut vars = relay_vars(pki, key, prod, sandbox);
    vars.retain(|(k, _)| k != "RELAY_LISTEN" && k != "RELAY_ADMIN_LISTEN");
    vars
}

fn sigterm(pid: u32) {
    sealrelay_testkit::process::send_signal(pid, sealrelay_testkit::process::SIGTERM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_an_otlp_receiver_with_parent_links() {
    let receiver = Receiver::start(None).await.unwrap();
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let mut vars = relay_process_vars(&pki, &key, &prod, &sandbox);
    vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), receiver.url()));
    vars.push(("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()));
    vars.push(("RELAY_SHUTDOWN_DELAY_S".into(), "0".into()));
    let relay = RelayProcess::spawn(&vars);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let req = hyper::Request::post(relay.url())
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&envelope(&device(1), &id(1))).unwrap(),
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 202);

    let deadline = Instant::now() + Duration::from_secs(15);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    loop {
        let got = receiver.spans();
        let find = |name: &str| got.iter().find(|s| s.name == name).cloned();
        if let (Some(intake), Some(admission), Some(apns)) =
            (find("intake"), find("admission"), find("apns"))
        {
            assert_eq!(
                hex(&intake.trace_id),
                trace_id,
                "continues the incoming trace"
            );
            assert_eq!(
                hex(&intake.parent_span_id),
                parent_id,
                "child of the caller's span"
            );
            assert_eq!(admission.parent_span_id, intake.span_id);
            assert_eq!(apns.parent_span_id, intake.span_id);
            assert_eq!(hex(&apns.trace_id), trace_id);
            let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, k: &str| {
                s.attributes
                    .iter()
                    .find(|a| a.key == k)
                    .map(|a| format!("{:?}", a.value))
            };
            assert!(attr(&intake, "outcome").unwrap().contains("forwarded"));
            assert!(attr(&apns, "environment").unwrap().contains("production"));
            // Nothing identifying in any span.
            let all = format!("{got:?}");
            assert!(!all.contains(&device(1)), "token in a span");
            println!(
                "received spans: {:?}",
                got.iter().map(|s| s.name.clone()).collect::<Vec<_>>()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "spans not received: {:?}",
            got.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sigterm(relay.pid());
}

/// OTLP over TLS: only `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set (an https:// URL used as
/// is), the collector's private CA given by `OTEL_EXPORTER_OTLP_CERTIFICATE`, an API key in
/// `OTEL_EXPORTER_OTLP_HEADERS`. Spans arrive, the header reaches the collector and never a
/// log line, and the request's log line carries the span's `trace_id` and `span_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_a_tls_collector_and_logs_carry_their_ids() {
    let collector_pki = pki();
    let receiver = Receiver::start(Some(&collector_pki)).await.unwrap();
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let mut vars = relay_process_vars(&pki, &key, &prod, &sandbox);
    let api_key = "k3y-7f0e9d1c5b2a";
    for (k, v) in [
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("{}/v1/traces", receiver.url()),
        ),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            collector_pki.ca_file.display().to_string(),
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", format!("x-api-key={api_key}")),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ("RELAY_SHUTDOWN_DELAY_S", "0".into()),
        ("RUST_LOG", "info".into()),
    ] {
        vars.push((k.into(), v));
    }
    let relay = RelayProcess::spawn(&vars);
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let req = hyper::Request::post(relay.url())
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"))
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&envelope(&device(2), &id(2))).unwrap(),
        )))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 202);
    let deadline = Instant::now() + Duration::from_secs(15);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let intake = loop {
        if let Some(s) = receiver.spans().into_iter().find(|s| s.name == "intake") {
            break s;
        }
        assert!(Instant::now() < deadline, "no span over TLS");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(hex(&intake.trace_id), trace_id);
    assert!(receiver
        .headers()
        .iter()
        .all(|h| h.iter().any(|(k, v)| k == "x-api-key" && v == api_key)));
    let line = loop {
        let lines = relay.lines();
        if let Some(l) = lines.iter().find(|l| {
            l.contains("\"message\":\"intake\"") && l.contains("\"outcome\":\"forwarded\"")
        }) {
            break l.clone();
        }
        assert!(Instant::now() < deadline, "no intake log line");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["trace_id"], trace_id, "{line}");
    assert_eq!(v["span_id"], hex(&intake.span_id), "{line}");
    assert!(
        relay.lines().iter().all(|l| !l.contains(api_key)),
        "the API key reached a log line"
    );
    sigterm(relay.pid());
}

/// A collector that fails every export: the failures are counted
/// (`sealrelay_trace_export_errors_total`) and logged, once, not silently dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_export_failures_are_counted_and_logged() {
    let receiver = Receiver::start(None).await.unwrap();
    receiver.set_failing(true);
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let mut vars = relay_process_vars(&pki, &key, &prod, &sandbox);
    vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), receiver.url()));
    vars.push(("OTEL_BSP_SCHEDULE_DELAY".into(), "50".into()));
    let relay = RelayProcess::spawn(&vars);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let metrics_url = format!("http://127.0.0.1:{}/metrics", relay.admin);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    loop {
        n += 1;
        let _ = request(
            &client,
            "POST",
            &relay.url(),
            serde_json::to_vec(&envelope(&device(3), &id(n))).unwrap(),
        )
        .await;
        let body = request(&client, "GET", &metrics_url, vec![]).await.body;
        let errors: f64 = body
            .lines()
            .find_map(|l| l.strip_prefix("sealrelay_trace_export_errors_total "))
            .map_or(0.0, |v| v.trim().parse().unwrap());
        if errors >= 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no export error counted:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(receiver.requests() >= 2);
    let warnings = relay
        .lines()
        .iter()
        .filter(|l| l.contains("exporting traces failed"))
        .count();
    assert_eq!(warnings, 1, "logged once a minute at most, not per failure");
    sigterm(relay.pid());
}

/// SIGTERM while requests are in flight and more keep arriving during the drain delay:
/// `/readyz` turns 503 at once, every request sent gets its answer, and the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drops_nothing() {
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    prod.set_delay(Duration::from_millis(800));
    let mut vars = relay_process_vars(&pki, &key, &prod, &sandbox);
    vars.push(("RELAY_SHUTDOWN_DELAY_S".into(), "1".into()));
    vars.push(("RELAY_SHUTDOWN_GRACE_S".into(), "10".into()));
    let mut relay = RelayProcess::spawn(&vars);
    let url = relay.url();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();

    let sent = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut tasks = Vec::new();
    // Load: 40 requests spread over the first 0.8 s, the SIGTERM lands at 0.3 s.
    for i in 0..40u32 {
        let client = client.clone();
        let url = url.clone();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(u64::from(i) * 20)).await;
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            request(
                &client,
                "POST",
                &url,
                serde_json::to_vec(&envelope(&device(i), &id(i))).unwrap(),
            )
            .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = relay.pid();
    sigterm(pid);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!relay.ready(), "/readyz turns 503 at once");

    let mut ok = 0;
    for t in tasks {
        let r = t.await.expect("request answered, not dropped");
        assert_eq!(r.status, 202, "{}", r.body);
        ok += 1;
    }
    assert_eq!(ok, 40);
    assert_eq!(prod.delivered(), 40);
    let status = relay.wait_exit(Duration::from_secs(15));
    assert_eq!(status, Some(0), "exit code after drain");
}

/// At start-up, before any request: the series with known labels are there at zero (so
/// `rate()` and absent-metric alerts work from the first scrape), the queue gauges carry
/// their scope, and the process metrics are exported. Prints the excerpt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_exist_at_zero_from_start_up() {
    let h = Harness::start().await;
    let body = h.admin("/metrics").await.body;
    let expected = [
        r#"sealrelay_intake_requests_total{outcome="forwarded",status="202"} 0"#,
        r#"sealrelay_intake_requests_total{outcome="credentials_rejected",status="502"} 0"#,
        r#"sealrelay_intake_requests_total{outcome="token_remembered",status="410"} 0"#,
        r#"sealrelay_intake_requests_total{outcome="not_found",status="404"} 0"#,
        r#"sealrelay_apns_requests_total{environment="production",status="200",reason="none"} 0"#,
        r#"sealrelay_retry_attempts_total{result="expired"} 0"#,
        r#"sealrelay_retry_unopenable_total 0"#,
        r#"sealrelay_trace_export_errors_total 0"#,
        r#"sealrelay_retry_queue_depth{scope="shared"} 0"#,
        r#"sealrelay_retry_queue_depth{scope="local"} 0"#,
        r#"sealrelay_retry_queue_oldest_age_seconds{scope="shared"} 0"#,
        r#"sealrelay_max_inflight 1024"#,
        r#"sealrelay_store_errors_total{op="admit"} 0"#,
        r#"sealrelay_degraded 0"#,
    ];
    for line in expected {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in:\n{body}"
        );
    }
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(body.lines().any(|l| l.starts_with(name)), "missing {name}");
    }
    println!("start-up /metrics excerpt:");
    for l in body
        .lines()
        .filter(|l| expected.contains(l) || l.starts_with("process_") && !l.starts_with('#'))
    {
        println!("  {l}");
    }
}

/// Answers served from the dead-token memory are counted apart from APNs's own answers.
#[tokio::test]
async fn dead_token_answers_are_counted_apart() {
    let h = Harness::start().await;
    let d = device(9);
    h.prod
        .reply_always(&d, Reply::new(410, Some("Unregistered")));
    assert_eq!(h.post(&envelope(&d, &id(1))).await.status, 410);
    assert_eq!(h.post(&envelope(&d, &id(2))).await.status, 410);
    assert_eq!(h.prod.received_for(&d).len(), 1, "APNs asked once");
    let body = h.admin("/metrics").await.body;
    assert!(
        body.contains(
            r#"sealrelay_intake_requests_total{outcome="token_rejected",status="410"} 1"#
        ),
        "{body}"
    );
    assert!(
        body.contains(
            r#"sealrelay_intake_requests_total{outcome="token_remembered",status="410"} 1"#
        ),
        "{body}"
    );
}

/// A relay that could serve nothing (no credentials, no dry run, no mailbox app) says why on
/// `/readyz` and stays out of the load balancer; its start-up line has plain values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_can_serve_nothing_is_not_ready_and_says_why() {
    let mut relay = RelayProcess::start(&[]);
    let readyz = relay.readyz();
    assert!(readyz.starts_with("HTTP/1.1 503"), "{readyz}");
    assert!(
        readyz.contains("not ready: nothing to serve: no APNs credentials"),
        "{readyz}"
    );
    let serving = relay
        .lines()
        .into_iter()
        .find(|l| l.contains("sealrelay serving"))
        .unwrap();
    assert!(serving.contains(r#""admin_socket":"off""#), "{serving}");
    assert!(serving.contains(r#""admin_api":"off""#), "{serving}");
    sigterm(relay.pid());
    assert_eq!(relay.wait_exit(Duration::from_secs(10)), Some(0));

    // Dry run alone is something to serve.
    let relay = RelayProcess::spawn(&[("RELAY_DRY_RUN".into(), "true".into())]);
    assert!(relay.readyz().ends_with("ready\n"));
    sigterm(relay.pid());
}

/// A Redis that accepts connections and never answers: the relay is not ready, logs which
/// server failed, and SIGTERM stops it without the drain delay (no load balancer sends to a
/// replica that is not ready) and without waiting on the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_on_a_store_that_is_down() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for (port, cause) in [(silent_port, None), (closed_port, Some("refused"))] {
        let mut relay = RelayProcess::start(&[
            ("RELAY_DRY_RUN".into(), "true".into()),
            ("REDIS_URL".into(), format!("redis://127.0.0.1:{port}")),
            ("RELAY_SHUTDOWN_DELAY_S".into(), "5".into()),
            ("RELAY_SHUTDOWN_GRACE_S".into(), "25".into()),
        ]);
        // Long enough for the signer follower's subscription and the pool to be mid-attempt.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let readyz = relay.readyz();
        assert!(readyz.starts_with("HTTP/1.1 503"), "{readyz}");
        if let Some(cause) = cause {
            let failed = relay
                .lines()
                .into_iter()
                .find(|l| l.contains("Redis connection failed"))
                .expect("the connection failure is logged");
            assert!(
                failed.contains(&format!(r#""hosts":"127.0.0.1:{port}""#)),
                "{failed}"
            );
            assert!(failed.to_lowercase().contains(cause), "{failed}");
        }
        let t = Instant::now();
        sigterm(relay.pid());
        assert_eq!(relay.wait_exit(Duration::from_secs(10)), Some(0));
        // The drain delay alone is 5 s; a store command times out after 2 s.
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        assert!(
            !relay.lines().iter().any(|l| l.contains("still in flight")),
            "nothing was in flight"
        );
    }
    drop(silent);
}
