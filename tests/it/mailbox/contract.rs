//! Mailboxes (MAILBOX.md) against a relay in this process: every row of its tables (the
//! one 404, claim and heartbeat, erase, envelopes, list, get, head, prune), idle expiry,
//! the buckets' exact 429s, the watch socket, and push through the APNs module against the
//! mock APNs (payloads, headers, foreground suppression, dead tokens forgotten).

use std::time::Duration;

use crate::common::mailbox::*;
use crate::common::*;
use futures_util::StreamExt;
use sealrelay::clock::Clock;
use serde_json::{json, Value};

const APPS: &str = "chat:push=com.example.cronstable,signal;notes;plain:signal";

async fn relay(opts: Options) -> Harness {
    Harness::with(opts.var("RELAY_APPS", APPS)).await
}

fn mb(h: &Harness, n: u32) -> Mb {
    Mb::new(h.addr(), "chat", &mailbox_id(n), &bearer(n))
}

const NOT_FOUND: &str = r#"{"v":1,"error":"not found"}"#;

fn assert_err(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body, format!(r#"{{"error":"{code}","status":{status}}}"#));
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_404_comes_before_authentication() {
    let h = relay(Options::default()).await;
    let m = mb(&h, 1);
    let id = mailbox_id(1);
    for path in [
        format!("/v1/unknown/mailbox/{id}"),
        "/v1/chat/mailbox/too-short".to_owned(),
        format!("/v1/chat/mailbox/{}", "x".repeat(65)),
        format!("/v1/chat/mailbox/{id}/p2c/0"),
        format!("/v1/chat/mailbox/{id}/p2c/01"),
        format!("/v1/chat/mailbox/{id}/p2c/9007199254740992"),
        format!("/v1/chat/mailbox/{id}/sideways"),
        format!("/v1/chat/mailbox/{id}/ice"),
        format!("/v1/notes/mailbox/{id}/p2c/push"),
        format!("/v1/notes/mailbox/{id}/signal/primary"),
        format!("/v1/chat/mailbox/{id}/signal/third"),
        format!("/v1/chat/mailbox/{id}/signal/watch"),
        format!("/v1/chat/mailbox/{id}/p2c/1/2"),
        format!("/v1/chat/mailbox/{id}/p2c/%31"),
        format!("/v1/chat/mailbox/{id}/"),
        format!("/v1/chat/mailbox/%{:02X}{}", id.as_bytes()[0], &id[1..]),
        "/v1/chat".to_owned(),
        "/v1/".to_owned(),
    ] {
        for method in ["GET", "PUT", "DELETE"] {
            let r = h.request(method, &path, Vec::new()).await;
            assert_eq!(
                (r.status, r.body.as_str()),
                (404, NOT_FOUND),
                "{method} {path}"
            );
        }
    }
    // A mailbox that was never claimed, with a good bearer: the same 404.
    let r = m.list("p2c", "").await;
    assert_eq!((r.status, r.body.as_str()), (404, NOT_FOUND));
    let r = m.put("p2c", 1, b"x").await;
    assert_eq!((r.status, r.body.as_str()), (404, NOT_FOUND));
    // No RELAY_APPS: every /v1 path is 404.
    let bare = Harness::start().await;
    let r = Mb::new(bare.addr(), "chat", &id, &bearer(1))
        .call("PUT", "", &[], Vec::new())
        .await;
    assert_eq!((r.status, r.body.as_str()), (404, NOT_FOUND));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_heartbeat_bearers_and_erase() {
    let h = relay(Options::default()).await;
    let m = mb(&h, 1);
    let r = m.anonymous("PUT", "").await;
    assert_err(&r, 401, "unauthorized");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    for bad in [
        "Bearer short",
        "Basic abc",
        "Bearer has space in it xxxxxxxxxx",
        "Bearer ünïcödeünïcödeünïcöde",
    ] {
        let r = m
            .with_bearer("unused")
            .call("PUT", "", &[("authorization", bad.to_owned())], Vec::new())
            .await;
        // Two Authorization headers (the helper's and this one) are malformed too.
        assert_err(&r, 401, "unauthorized");
    }
    assert_eq!(m.claim().await, 201);
    assert_eq!(m.claim().await, 204, "the heartbeat claim");
    let other = m.with_bearer(&bearer(2));
    assert_err(
        &other.call("PUT", "", &[], Vec::new()).await,
        403,
        "forbidden",
    );
    assert_err(&other.put("p2c", 1, b"x").await, 403, "forbidden");
    assert_err(&other.list("p2c", "").await, 403, "forbidden");
    assert_err(
        &other.call("DELETE", "", &[], Vec::new()).await,
        403,
        "forbidden",
    );
    assert_eq!(m.put("p2c", 1, b"one").await.status, 201);
    assert_eq!(m.erase().await, 204);
    let r = m.list("p2c", "").await;
    assert_eq!((r.status, r.body.as_str()), (404, NOT_FOUND));
    // Gone means gone: a new claim starts empty, by anyone.
    assert_eq!(other.claim().await, 201);
    assert_eq!(
        other.list("p2c", "").await.body,
        r#"{"envelopes":[],"last":0,"more":false}"#
    );
    let r = h.request("POST", &m.path(""), Vec::new()).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("PUT, DELETE"));
}

/// Every path answers the methods it does not take with 405 and its `Allow`, before the
/// bearer, counted under the route of the path it hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_are_405_before_the_bearer() {
    let h = relay(Options::default()).await;
    let m = mb(&h, 1);
    let table: [(&str, &str, &str, &[&str]); 6] = [
        (
            "",
            "PUT, DELETE",
            "claim",
            &["GET", "HEAD", "POST", "PATCH", "OPTIONS"],
        ),
        ("/p2c", "GET, HEAD, DELETE", "list", &["PUT", "POST"]),
        ("/p2c/1", "GET, HEAD, PUT", "get", &["DELETE", "POST"]),
        ("/p2c/watch", "GET", "watch", &["HEAD", "PUT", "DELETE"]),
        (
            "/p2c/push",
            "PUT, DELETE",
            "register",
            &["GET", "HEAD", "POST"],
        ),
        ("/signal/primary", "GET", "signal", &["HEAD", "PUT"]),
    ];
    for (path, allow, _, methods) in table {
        for method in methods {
            let r = h.request(method, &m.path(path), Vec::new()).await;
            if *method == "HEAD" {
                assert_eq!(r.status, 405, "{method} {path}");
            } else {
                assert_err(&r, 405, "method_not_allowed");
            }
            assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        }
    }
    let metrics = h.admin("/metrics").await.body;
    for (path, _, route, _) in table {
        let line = format!(r#"sealrelay_mailbox_requests_total{{route="{route}",status="405"}}"#);
        assert!(
            metrics.lines().any(|l| l.starts_with(&line)),
            "{path}: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_every_row() {
    let h = relay(
        Options::default()
            .var("RELAY_MAILBOX_MAX_ENVELOPE_BYTES", "1000")
            .var("RELAY_MAILBOX_MAX_ENVELOPES", "5"),
    )
    .await;
    let m = mb(&h, 1);
    assert_eq!(m.claim().await, 201);
    let bytes: Vec<u8> = (0..=255u8).collect();
    assert_eq!(m.put("p2c", 1, &bytes).await.status, 201);
    assert_eq!(
        m.put("p2c", 1, &bytes).await.status,
        204,
        "the same bytes: a safe retry"
    );
    assert_err(&m.put("p2c", 1, b"other").await, 409, "conflict");
    assert_err(&m.put("p2c", 2, b"").await, 400, "bad_request");
    assert_err(&m.put("p2c", 2, &[1u8; 1001]).await, 413, "too_large");
    assert_eq!(m.put("p2c", 2, &[1u8; 1000]).await.status, 201);
    for seq in [10, 20, 9_007_199_254_740_991] {
        assert_eq!(
            m.put("p2c", seq, format!("env {seq}").as_bytes())
                .await
                .status,
            201
        );
    }
    assert_err(&m.put("p2c", 30, b"x").await, 507, "mailbox_full");
    assert_eq!(
        m.put("c2p", 30, b"x").await.status,
        201,
        "each direction holds its own"
    );
    assert_eq!(
        m.put("p2c", 10, b"env 10").await.status,
        204,
        "a retry of a stored seq is fine when full"
    );

    // List: ascending, after, limit, more, last.
    let r = m.list("p2c", "").await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let seqs: Vec<u64> = v["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2, 10, 20, 9_007_199_254_740_991]);
    assert_eq!(v["last"], 9_007_199_254_740_991u64);
    assert_eq!(v["more"], false);
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(
        b64.decode(v["envelopes"][0]["data"].as_str().unwrap())
            .unwrap(),
        bytes
    );
    let v = m.list("p2c", "?after=1&limit=2").await.json();
    assert_eq!(v["envelopes"].as_array().unwrap().len(), 2);
    assert_eq!(v["envelopes"][0]["seq"], 2);
    assert_eq!(v["more"], true);
    let v = m.list("p2c", "?after=20").await.json();
    assert_eq!(v["envelopes"].as_array().unwrap().len(), 1);
    assert_eq!(v["more"], false);
    // The query is percent-decoded: `1%30` is `10`, an escaped key is that key.
    assert_eq!(
        m.list("p2c", "?after=1%30").await.body,
        m.list("p2c", "?after=10").await.body
    );
    assert_eq!(
        m.list("p2c", "?%61fter=1&limit=%32").await.body,
        m.list("p2c", "?after=1&limit=2").await.body
    );
    for bad in [
        "?limit=0",
        "?limit=257",
        "?limit=x",
        "?after=-1",
        "?after=01",
        "?limit=1&limit=2",
        "?after=9007199254740992",
        "?after=1&%61fter=1",
        "?x=1&x=2",
    ] {
        assert_err(&m.list("p2c", bad).await, 400, "bad_request");
    }
    assert_eq!(m.list("p2c", "?limit=256").await.status, 200);

    // Get: the bytes as stored; absent is the one 404.
    let r = m.call("GET", "/p2c/1", &[], Vec::new()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body.len(), String::from_utf8_lossy(&bytes).len());
    let r = m.call("GET", "/p2c/3", &[], Vec::new()).await;
    assert_eq!((r.status, r.body.as_str()), (404, NOT_FOUND));

    // Head.
    let r = m.call("HEAD", "/p2c", &[], Vec::new()).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("x-relay-last-seq"), Some("9007199254740991"));
    assert_eq!(r.header("x-relay-count"), Some("5"));

    // Prune.
    assert_err(
        &m.call("DELETE", "/p2c", &[], Vec::new()).await,
        400,
        "bad_request",
    );
    assert_err(
        &m.call("DELETE", "/p2c?upto=x", &[], Vec::new()).await,
        400,
        "bad_request",
    );
    assert_eq!(
        m.call("DELETE", "/p2c?upto=10", &[], Vec::new())
            .await
            .status,
        204
    );
    let r = m.call("HEAD", "/p2c", &[], Vec::new()).await;
    assert_eq!(r.header("x-relay-count"), Some("2"));
    assert_eq!(m.put("p2c", 40, b"room again").await.status, 201);
    let r = m.call("HEAD", "/c2p", &[], Vec::new()).await;
    assert_eq!(
        (r.header("x-relay-last-seq"), r.header("x-relay-count")),
        (Some("30"), Some("1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_mailboxes_expire_and_only_writes_and_claims_keep_them() {
    let clock = Clock::manual(T0);
    let h = relay(
        Options::default()
            .clock(clock.clone())
            .var("RELAY_MAILBOX_IDLE_S", "10"),
    )
    .await;
    let m = mb(&h, 1);
    assert_eq!(m.claim().await, 201);
    clock.advance_ms(9_000);
    assert_eq!(m.list("p2c", "").await.status, 200, "a read");
    clock.advance_ms(1_000);
    assert_eq!(
        m.list("p2c", "").await.status,
        404,
        "reads do not restart the timer"
    );
    assert_eq!(m.claim().await, 201);
    clock.advance_ms(9_000);
    assert_eq!(m.claim().await, 204, "heartbeat");
    clock.advance_ms(9_000);
    assert_eq!(
        m.put("p2c", 1, b"x").await.status,
        201,
        "still there after 18 s: the heartbeat kept it"
    );
    clock.advance_ms(9_999);
    assert_eq!(m.list("p2c", "").await.status, 200);
    clock.advance_ms(1);
    assert_eq!(m.list("p2c", "").await.status, 404);
}

async fn exhaust(name: &str, burst: usize, mut req: impl AsyncFnMut(usize) -> Resp) {
    for i in 0..burst {
        let r = req(i).await;
        assert!(r.status < 300, "{name} {i}: {} {}", r.status, r.body);
    }
    let r = req(burst).await;
    assert_err(&r, 429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bucket_answers_the_specs_429() {
    let clock = Clock::manual(T0);
    let h = relay(
        Options::default()
            .clock(clock.clone())
            .var("RELAY_MAILBOX_MAX_ENVELOPES", "1000")
            // The socket bucket (20) is reached before the per-replica cap of one
            // mailbox's sockets.
            .var("RELAY_MAILBOX_MAX_SOCKETS", "32"),
    )
    .await;
    let m = mb(&h, 1);
    assert_eq!(m.claim().await, 201);
    // Envelopes stored: 120, then nothing is stored.
    exhaust("envelopes", 120, async |i| {
        m.put("p2c", i as u64 + 1, b"x").await
    })
    .await;
    let r = m.call("HEAD", "/p2c", &[], Vec::new()).await;
    assert_eq!(
        r.header("x-relay-count"),
        Some("120"),
        "the refused envelope was not stored"
    );
    let r = m.put("p2c", 500, b"x").await;
    assert_eq!(r.header("retry-after"), Some("1"));
    clock.advance_ms(500);
    assert_eq!(m.put("p2c", 500, b"x").await.status, 201, "2 per second");
    // Fetches, HEADs, prunes: 240, after a minute refilled them.
    clock.advance_ms(60_000);
    exhaust("reads", 240, async |_| m.list("p2c", "?limit=1").await).await;
    // Push registrations: 10, 1 per minute.
    let reg = json!({"service": "x", "tag": "t"});
    exhaust("registrations", 10, async |_| m.register("c2p", &reg).await).await;
    assert_eq!(
        m.register("c2p", &reg).await.header("retry-after"),
        Some("60")
    );
    // WebSocket connections: 20, 1 per 5 s; an upgrade over it is answered 429 the same way.
    let mut open = Vec::new();
    for _ in 0..20 {
        open.push(m.watch("p2c").await);
    }
    let (status, body) = refused(m.socket("/p2c/watch", true).await.unwrap_err());
    assert_eq!(
        (status, body.as_str()),
        (429, r#"{"error":"rate_limited","status":429}"#)
    );
    let metrics = h.admin("/metrics").await.body;
    for bucket in ["envelopes", "reads", "registrations", "sockets"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    r#"sealrelay_mailbox_rate_limited_total{{bucket="{bucket}"}}"#
                ))
            })
            .unwrap_or_else(|| panic!("{bucket}"));
        assert!(!line.ends_with(" 0"), "{line}");
    }
}

/// Buckets are per mailbox: one busy link does not throttle another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_are_per_mailbox() {
    let h = relay(
        Options::default()
            .clock(Clock::manual(T0))
            .var("RELAY_MAILBOX_MAX_ENVELOPES", "1000"),
    )
    .await;
    let (a, b) = (mb(&h, 1), mb(&h, 2));
    assert_eq!(a.claim().await, 201);
    assert_eq!(b.claim().await, 201);
    exhaust("a", 120, async |i| a.put("p2c", i as u64 + 1, b"x").await).await;
    assert_eq!(b.put("p2c", 1, b"x").await.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sockets() {
    let h = relay(Options::default()).await;
    let m = mb(&h, 1);
    // Refused upgrades answer like requests.
    assert_eq!(
        refused(m.socket("/p2c/watch", true).await.unwrap_err()).0,
        404
    );
    assert_eq!(m.claim().await, 201);
    assert_eq!(
        refused(
            m.with_bearer(&bearer(9))
                .socket("/p2c/watch", true)
                .await
                .unwrap_err()
        )
        .0,
        403
    );
    let mut bad = m.clone();
    bad.bearer = "short".into();
    let (status, body) = refused(bad.socket("/p2c/watch", false).await.unwrap_err());
    assert_eq!(
        (status, body.as_str()),
        (401, r#"{"error":"unauthorized","status":401}"#)
    );

    // The bearer as a subprotocol: zerobyte.v1 is selected, the bearer never echoed.
    let (mut ws, resp) = m.socket("/p2c/watch", false).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "zerobyte.v1");
    let (mut other_dir, resp) = m.socket("/c2p/watch", true).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "zerobyte.v1");
    assert_eq!(m.put("p2c", 7, b"x").await.status, 201);
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(5)).await.as_deref(),
        Some("seq 7")
    );
    assert_eq!(m.put("p2c", 7, b"x").await.status, 204);
    assert_eq!(m.put("p2c", 8, b"y").await.status, 201);
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(5)).await.as_deref(),
        Some("seq 8"),
        "a 204 sends nothing"
    );
    assert_eq!(m.put("c2p", 3, b"z").await.status, 201);
    assert_eq!(
        next_text(&mut other_dir, Duration::from_secs(5))
            .await
            .as_deref(),
        Some("seq 3")
    );
    send_text(&mut ws, "ping").await;
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(5)).await.as_deref(),
        Some("pong")
    );
    assert_eq!(
        next_text(&mut ws, Duration::from_millis(300)).await,
        None,
        "nothing of c2p on p2c"
    );

    // Anything else closes with 1003.
    send_text(&mut ws, "hello").await;
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(5)).await,
        Some(1003)
    );
    let mut ws = m.watch("p2c").await;
    send_binary(&mut ws, vec![1, 2, 3]).await;
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(5)).await,
        Some(1003)
    );

    // Erase closes every socket with 1000.
    let mut a = m.watch("p2c").await;
    let mut b = m.watch("c2p").await;
    assert_eq!(m.erase().await, 204);
    assert_eq!(close_code(&mut a, Duration::from_secs(5)).await, Some(1000));
    assert_eq!(close_code(&mut b, Duration::from_secs(5)).await, Some(1000));
    assert_eq!(
        close_code(&mut other_dir, Duration::from_secs(5)).await,
        Some(1000)
    );
}

fn apns_reg(token: &str, env: &str) -> Value {
    json!({"service": "apns", "token": token, "environment": env, "tag": "Zq3k8r2mT1u0wQ", "alert": "New message"})
}

async fn wait_received(
    mock: &MockApns,
    token: &str,
    n: usize,
) -> Vec<sealrelay_testkit::mock_apns::Received> {
    for _ in 0..100 {
        let got = mock.received_for(token);
        if got.len() >= n {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mock.received_for(token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_through_the_apns_module() {
    let h = relay(Options::default()).await;
    let m = mb(&h, 1);
    assert_eq!(m.claim().await, 201);
    let token = device(77);
    // Registration rules: the module knows its fields.
    for bad in [
        json!({"service": "apns", "token": token.to_uppercase(), "environment": "production", "tag": "t"}),
        json!({"service": "apns", "token": token, "environment": "staging", "tag": "t"}),
        json!({"service": "apns", "token": token, "environment": "production", "tag": "t", "extra": "x"}),
        json!({"service": "apns", "token": token, "environment": "production", "tag": "no spaces allowed"}),
        json!({"service": "apns", "token": token, "tag": "t", "alert": "a".repeat(161)}),
    ] {
        let r = m.register("p2c", &bad).await;
        assert_err(&r, 400, "bad_request");
    }
    assert_eq!(
        m.register("p2c", &apns_reg(&token, "production"))
            .await
            .status,
        204
    );

    // X-Relay-Notify: alert.
    assert_err(
        &m.put_notify("p2c", 1, b"x", "loud").await,
        400,
        "bad_request",
    );
    assert_eq!(
        m.call("HEAD", "/p2c", &[], Vec::new())
            .await
            .header("x-relay-count"),
        Some("0"),
        "nothing stored"
    );
    assert_eq!(m.put_notify("p2c", 1, b"x", "alert").await.status, 201);
    let got = wait_received(&h.prod, &token, 1).await;
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        r#"{"aps":{"alert":{"body":"New message"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
    );
    assert_eq!(r.header("apns-push-type"), "alert");
    assert_eq!(r.header("apns-priority"), "10");
    assert_eq!(r.header("apns-topic"), TOPIC);
    let exp: u64 = r.header("apns-expiration").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(exp.abs_diff(now + 7 * 86_400) < 60, "{exp}");
    // A retry of the same envelope asks nothing again.
    assert_eq!(m.put_notify("p2c", 1, b"x", "alert").await.status, 204);
    // Silent.
    assert_eq!(m.put_notify("p2c", 2, b"x", "silent").await.status, 201);
    let got = wait_received(&h.prod, &token, 2).await;
    let r = &got[1];
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        r#"{"aps":{"content-available":1},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
    );
    assert_eq!(r.header("apns-push-type"), "background");
    assert_eq!(r.header("apns-priority"), "5");
    let exp: u64 = r.header("apns-expiration").parse().unwrap();
    assert!(exp.abs_diff(now + 3600) < 60, "{exp}");
    // Absent header: no push. The other direction has no registration: no push.
    assert_eq!(m.put("p2c", 3, b"x").await.status, 201);
    assert_eq!(m.put_notify("c2p", 1, b"x", "alert").await.status, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.prod.received_for(&token).len(), 2);

    // Development builds go to the sandbox.
    let dev = device(78);
    assert_eq!(
        m.register("c2p", &apns_reg(&dev, "development"))
            .await
            .status,
        204
    );
    assert_eq!(m.put_notify("c2p", 2, b"x", "alert").await.status, 201);
    assert_eq!(wait_received(&h.sandbox, &dev, 1).await.len(), 1);
    assert!(h.prod.received_for(&dev).is_empty());

    // The reader in the foreground: no push while its watch pinged within 45 s.
    let mut ws = m.watch("p2c").await;
    send_text(&mut ws, "ping").await;
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(5)).await.as_deref(),
        Some("pong")
    );
    assert_eq!(m.put_notify("p2c", 4, b"x", "alert").await.status, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.prod.received_for(&token).len(), 2, "foreground: skipped");
    // The watch closes: the reader is in the background at once, and the next envelope
    // is pushed (the relay clears the mark before the connection ends).
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    assert_eq!(m.put_notify("p2c", 5, b"x", "alert").await.status, 201);
    assert_eq!(wait_received(&h.prod, &token, 3).await.len(), 3);

    // Unregister: nothing more.
    assert_eq!(
        m.call("DELETE", "/c2p/push", &[], Vec::new()).await.status,
        204
    );
    assert_eq!(m.put_notify("c2p", 3, b"x", "alert").await.status, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.sandbox.received_for(&dev).len(), 1);

    let metrics = h.admin("/metrics").await.body;
    let count = |service: &str, outcome: &str| -> u64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    r#"sealrelay_mailbox_pushes_total{{service="{service}",outcome="{outcome}"}}"#
                ))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("apns", "delivered"), 4);
    assert_eq!(count("none", "foreground"), 1);
    assert_eq!(count("none", "no_registration"), 2);
}

/// The registration goes on a 410 and on BadDeviceToken, and stays on other errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_tokens_are_forgotten_and_others_kept() {
    let h = relay(Options::default()).await;
    let m = mb(&h, 1);
    assert_eq!(m.claim().await, 201);
    let mut seq = 0;
    let mut send = async |m: &Mb| {
        seq += 1;
        assert_eq!(m.put_notify("p2c", seq, b"x", "alert").await.status, 201);
    };
    for (reply, forgotten) in [
        (Reply::new(500, Some("InternalServerError")), false),
        (Reply::new(400, Some("BadExpirationDate")), false),
        (Reply::new(429, Some("TooManyRequests")), false),
        (Reply::new(410, Some("Unregistered")), true),
        (Reply::new(400, Some("BadDeviceToken")), true),
    ] {
        let token =
            device(200 + reply.status as u32 + reply.reason.as_ref().map_or(0, |r| r.len() as u32));
        // The sandbox answers the same, so auto environments could not matter.
        h.prod.reply_always(&token, reply.clone());
        h.sandbox.reply_always(&token, reply.clone());
        assert_eq!(
            m.register("p2c", &apns_reg(&token, "production"))
                .await
                .status,
            204
        );
        send(&m).await;
        assert_eq!(
            wait_received(&h.prod, &token, 1).await.len(),
            1,
            "{reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        send(&m).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = h.prod.received_for(&token).len();
        assert_eq!(sent, if forgotten { 1 } else { 2 }, "{reply:?}");
    }
}
