//! Operations: the metrics pass `promtool check metrics`, traces arrive at an OTLP/HTTP
//! receiver with the right names and parent links, and SIGTERM under load drops nothing.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::process::RelayProcess;
use common::*;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

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

type Spans = Arc<Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>;

/// An OTLP/HTTP (protobuf) trace receiver on a free loopback port.
async fn otlp_receiver() -> (SocketAddr, Spans) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let spans: Spans = Arc::default();
    let store = spans.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let store = store.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let store = store.clone();
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|c| c.to_bytes())
                                .unwrap_or_default();
                            if path == "/v1/traces" {
                                if let Ok(export) = ExportTraceServiceRequest::decode(body) {
                                    let mut s = store.lock().unwrap();
                                    for rs in export.resource_spans {
                                        for ss in rs.scope_spans {
                                            s.extend(ss.spans);
                                        }
                                    }
                                }
                            }
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .header("content-type", "application/x-protobuf")
                                    .body(Full::new(Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, spans)
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
    let (addr, spans) = otlp_receiver().await;
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let mut vars = relay_process_vars(&pki, &key, &prod, &sandbox);
    vars.push((
        "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
        format!("http://{addr}"),
    ));
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
        let got = spans.lock().unwrap().clone();
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
