//! The DESIGN.md compatibility table, row by row, against a relay on a random port and a
//! mock APNs that speaks HTTP/2 over TLS and checks the provider JWT.

use std::time::Duration;

use crate::common::*;
use sealrelay::clock::Clock;
use serde_json::json;

#[tokio::test]
async fn get_and_head_root_name_the_service() {
    let h = Harness::start().await;
    let r = h.request("GET", "/", vec![]).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("sealrelay") && r.body.contains("source:"),
        "{}",
        r.body
    );
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let r = h.request("HEAD", "/", vec![]).await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn other_paths_are_404_and_query_strings_do_not_change_the_path() {
    let h = Harness::start().await;
    for (m, p) in [
        ("GET", "/x"),
        ("POST", "/push"),
        ("POST", "/v1/"),
        ("GET", "/healthz"),
    ] {
        let r = h.request(m, p, vec![]).await;
        assert_eq!(r.status, 404, "{m} {p}");
        assert_eq!(r.body, r#"{"v":1,"error":"not found"}"#);
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let r = h.post_to("/?x=1", &envelope(&device(1), &id(1))).await;
    assert_eq!(r.status, 202, "{}", r.body);
}

impl Harness {
    async fn post_to(&self, path: &str, body: &serde_json::Value) -> Resp {
        self.request("POST", path, serde_json::to_vec(body).unwrap())
            .await
    }
}

#[tokio::test]
async fn other_methods_are_405_with_allow() {
    let h = Harness::start().await;
    for m in ["PUT", "DELETE", "PATCH", "OPTIONS"] {
        let r = h.request(m, "/", vec![]).await;
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.body, r#"{"v":1,"error":"method not allowed"}"#);
        assert_eq!(r.header("allow"), Some("GET, HEAD, POST"));
    }
}

#[tokio::test]
async fn body_over_8192_bytes_is_413_declared_or_discovered() {
    let h = Harness::start().await;
    // Declared: refused from the header alone.
    let resp = raw(
        h.addr(),
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8193\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(
        resp.ends_with(r#"{"v":1,"error":"body too large"}"#),
        "{resp}"
    );
    // Discovered while reading a chunked body with no length.
    let mut req = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..9 {
        req.extend_from_slice(b"400\r\n");
        req.extend_from_slice(&[b' '; 1024]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let resp = raw(h.addr(), &req).await;
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(
        resp.ends_with(r#"{"v":1,"error":"body too large"}"#),
        "{resp}"
    );
    assert!(h.prod.received().is_empty());

    // Exactly 8192 bytes (a valid envelope padded with spaces) is accepted.
    let mut body = serde_json::to_vec(&envelope(&device(1), &id(1))).unwrap();
    body.resize(8192, b' ');
    assert_eq!(h.request("POST", "/", body.clone()).await.status, 202);
    body.push(b' ');
    let r = h.request("POST", "/", body).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (413, r#"{"v":1,"error":"body too large"}"#)
    );
}

/// Every validation failure answers the hosted reference relay's exact bytes (DESIGN.md's
/// error-text table), names the field, fits the daemon's 512-byte log excerpt, and changes
/// nothing.
#[tokio::test]
async fn invalid_envelopes_are_400_with_the_reference_texts_and_change_nothing() {
    let h = Harness::start().await;
    let with = |field: &str, v: serde_json::Value| {
        let mut e = envelope(&device(1), &id(1));
        e[field] = v;
        serde_json::to_vec(&e).unwrap()
    };
    let without = |field: &str| {
        let mut e = envelope(&device(1), &id(1));
        e.as_object_mut().unwrap().remove(field);
        serde_json::to_vec(&e).unwrap()
    };
    let cases = [
        (b"nope".to_vec(), "body is not valid JSON"),
        (b"{\"v\":1".to_vec(), "body is not valid JSON"),
        (b"[]".to_vec(), "body must be a JSON object"),
        (b"\"text\"".to_vec(), "body must be a JSON object"),
        (
            with("v", json!(2)),
            "unsupported protocol version (expected v: 1)",
        ),
        (
            with("v", json!("1")),
            "unsupported protocol version (expected v: 1)",
        ),
        (
            with("device", json!("not-hex")),
            "device must be a hex APNs device token",
        ),
        (with("suite", json!(null)), "suite must be a string"),
        (with("suite", json!(25519)), "suite must be a string"),
        (
            with("suite", json!("X25519")),
            "suite is not a valid suite identifier",
        ),
        (without("ciphertext"), "ciphertext is required"),
        (with("ciphertext", json!("")), "ciphertext is required"),
        (
            with("ciphertext", json!("A".repeat(3804))),
            "ciphertext exceeds 3800 characters",
        ),
        (
            with("ciphertext", json!("not base64!!")),
            "ciphertext is not a base64 sealed box",
        ),
        (
            with("ciphertext", json!("A".repeat(64))),
            "ciphertext is not a base64 sealed box",
        ),
        (
            with("collapseId", json!("XYZ")),
            "collapseId must be 32 lowercase hex characters",
        ),
        (
            with("flapId", json!(7)),
            "flapId must be 32 lowercase hex characters",
        ),
        (
            with("priority", json!("urgent")),
            r#"priority must be "time-sensitive" or "passive""#,
        ),
        (with("event", json!("false")), "event must be a boolean"),
    ];
    for (body, error) in cases {
        let r = h.request("POST", "/", body).await;
        assert_eq!(r.status, 400, "{error}");
        assert_eq!(
            r.body,
            serde_json::to_string(&json!({"v": 1, "error": error})).unwrap()
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.body.len() < 512);
    }
    assert!(h.prod.received().is_empty());
    // Nothing was recorded: the same alert, valid now, is forwarded.
    assert_eq!(h.post(&envelope(&device(1), &id(1))).await.status, 202);
}

/// A daemon fits ciphertexts to 3800; after a 400 that names `ciphertext` it re-fits to
/// 3000 and posts once more, and that post goes through.
#[tokio::test]
async fn the_three_thousand_character_refit_still_works() {
    let h = Harness::start().await;
    let mut e = envelope(&device(2), &id(2));
    e["ciphertext"] = json!("A".repeat(3804));
    let r = h.post(&e).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("ciphertext"));
    e["ciphertext"] = json!("A".repeat(3000));
    assert_eq!(h.post(&e).await.status, 202);
    assert_eq!(h.prod.received().len(), 1);
}

#[tokio::test]
async fn forwarded_request_is_exactly_what_apns_expects() {
    let h = Harness::start().await;
    let mut e = envelope(&device(7).to_uppercase(), &id(42));
    e["flapId"] = json!(id(99));
    e["suite"] = json!("x25519-v2");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let r = h.post(&e).await;
    assert_eq!(r.status, 202);
    assert_eq!(r.body, r#"{"v":1,"outcome":"forwarded"}"#);
    assert_eq!(r.header("content-type"), Some("application/json"));

    let got = h.prod.received();
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(req.status, 200, "the mock accepted the JWT");
    assert_eq!(req.token, device(7), "lowercased");
    assert_eq!(req.header("apns-topic"), TOPIC);
    assert_eq!(req.header("apns-push-type"), "alert");
    assert_eq!(req.header("apns-priority"), "10");
    assert_eq!(req.header("apns-collapse-id"), id(42));
    let exp: u64 = req.header("apns-expiration").parse().unwrap();
    assert!(
        (before + 600..=before + 602).contains(&exp),
        "{exp} vs {before}"
    );
    assert_eq!(req.header("apns-id").len(), 36);
    assert!(req.header("authorization").starts_with("bearer "));
    let expected = format!(
        r#"{{"aps":{{"alert":{{"title":"cronstable","body":"New alert"}},"mutable-content":1,"interruption-level":"time-sensitive","sound":"default"}},"v":1,"suite":"x25519-v2","ciphertext":"{}"}}"#,
        "A".repeat(68)
    );
    assert_eq!(std::str::from_utf8(&req.body).unwrap(), expected);
    assert!(h.sandbox.received().is_empty());

    // Passive: priority 5, no sound.
    let mut p = envelope(&device(8), &id(43));
    p["priority"] = json!("passive");
    assert_eq!(h.post(&p).await.status, 202);
    let req = &h.prod.received_for(&device(8))[0];
    assert_eq!(req.header("apns-priority"), "5");
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body["aps"]["interruption-level"], "passive");
    assert!(body["aps"].get("sound").is_none());
}

#[tokio::test]
async fn maximum_ciphertext_arrives_within_4096_bytes() {
    let h = Harness::start().await;
    let mut e = envelope(&device(1), &id(1));
    e["ciphertext"] = json!(format!("{}==", "A".repeat(3798)));
    e["suite"] = json!("abcdefghijklmnop");
    let r = h.post(&e).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let req = &h.prod.received()[0];
    assert_eq!(req.status, 200);
    assert!(req.body.len() <= 4096, "{} bytes", req.body.len());
}

#[tokio::test]
async fn duplicates_coalesce_and_concurrent_duplicates_send_once() {
    let h = Harness::start().await;
    let e = envelope(&device(1), &id(1));
    let all = futures_join(20, || h.post(&e)).await;
    let forwarded = all.iter().filter(|r| r.body.contains("forwarded")).count();
    let coalesced = all
        .iter()
        .filter(|r| r.status == 202 && r.body == r#"{"v":1,"outcome":"coalesced"}"#)
        .count();
    assert_eq!((forwarded, coalesced), (1, 19));
    assert_eq!(h.prod.received().len(), 1);
}

async fn futures_join<'a, F, Fut>(n: usize, f: F) -> Vec<Resp>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Resp> + 'a,
{
    let futs: Vec<_> = (0..n).map(|_| f()).collect();
    let mut out = Vec::new();
    let joined = join_all(futs).await;
    out.extend(joined);
    out
}

async fn join_all<Fut: std::future::Future>(futs: Vec<Fut>) -> Vec<Fut::Output> {
    // A tiny join_all: poll every future concurrently on this task.
    let mut set = Vec::with_capacity(futs.len());
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut results: Vec<Option<Fut::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if results[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => results[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn flap_suppression_and_rate_limit_over_http() {
    let clock = Clock::manual(T0);
    let h = Harness::with(
        Options::default()
            .clock(clock.clone())
            .var("RELAY_RATE_CAPACITY", "8"),
    )
    .await;
    let flap = id(500);
    for i in 0..6 {
        let mut e = envelope(&device(1), &id(i));
        e["flapId"] = json!(flap);
        assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"forwarded"}"#);
        clock.advance_ms(60_000);
    }
    let mut e = envelope(&device(1), &id(100));
    e["flapId"] = json!(flap);
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"suppressed"}"#);
    // The cooldown interval later, one reminder goes through.
    clock.advance_ms(1_800_000);
    let mut e = envelope(&device(1), &id(101));
    e["flapId"] = json!(flap);
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"forwarded"}"#);
    assert_eq!(h.prod.received().len(), 7);

    // Bucket: capacity 8, 7 spent (with refill over the 36 minutes it is full again).
    for i in 0..8 {
        assert_eq!(
            h.post(&envelope(&device(2), &id(200 + i))).await.status,
            202
        );
    }
    let r = h.post(&envelope(&device(2), &id(300))).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, r#"{"v":1,"error":"device is rate limited"}"#);
    assert_eq!(r.header("retry-after"), Some("2"));
    clock.advance_ms(2_000);
    assert_eq!(h.post(&envelope(&device(2), &id(300))).await.status, 202);
}

#[tokio::test]
async fn token_rejected_is_410_and_the_token_is_remembered() {
    let h = Harness::with(Options::default().var("APNS_ENVIRONMENT", "production")).await;
    let d = device(3);
    h.prod
        .reply_always(&d, Reply::new(410, Some("Unregistered")));
    let e = envelope(&d, &id(1));
    let body = json!({"v":1,"error":"device token rejected by APNs","reason":"Unregistered"});
    let r = h.post(&e).await;
    assert_eq!((r.status, r.json()), (410, body.clone()));
    // The dead token is answered from memory with the same body; Apple is not asked again.
    for i in 0..5 {
        let r = h.post(&envelope(&d, &id(10 + i))).await;
        assert_eq!((r.status, r.json()), (410, body.clone()));
    }
    assert_eq!(h.prod.received_for(&d).len(), 1);

    // Without tombstones the refusal is still rolled back: the same alert is eligible again.
    let h = Harness::with(
        Options::default()
            .var("APNS_ENVIRONMENT", "production")
            .var("RELAY_TOMBSTONE_TTL_S", "0"),
    )
    .await;
    h.prod
        .reply_times(&d, Reply::new(410, Some("Unregistered")), 1);
    assert_eq!(h.post(&e).await.status, 410);
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"forwarded"}"#);
    assert_eq!(h.prod.received_for(&d).len(), 2);
}

#[tokio::test]
async fn apns_refusals_map_to_the_reference_answers() {
    let h = Harness::with(Options::default().var("APNS_ENVIRONMENT", "production")).await;
    let cases = [
        (
            Reply::new(403, Some("InvalidProviderToken")),
            502,
            json!({"v":1,"error":"relay APNs credentials rejected","reason":"InvalidProviderToken"}),
        ),
        (
            Reply::new(400, Some("TopicDisallowed")),
            502,
            json!({"v":1,"error":"relay APNs credentials rejected","reason":"TopicDisallowed"}),
        ),
        (
            Reply::new(400, Some("BadCollapseId")),
            502,
            json!({"v":1,"error":"APNs error","apnsStatus":400,"reason":"BadCollapseId"}),
        ),
        (
            Reply::new(413, Some("PayloadTooLarge")),
            502,
            json!({"v":1,"error":"APNs error","apnsStatus":413,"reason":"PayloadTooLarge"}),
        ),
    ];
    for (i, (reply, status, body)) in cases.into_iter().enumerate() {
        let d = device(10 + i as u32);
        h.prod.reply_times(&d, reply, 1);
        let e = envelope(&d, &id(1));
        let r = h.post(&e).await;
        assert_eq!(r.status, status, "{}", r.body);
        assert_eq!(r.json(), body);
        // Every refusal is rolled back: the same alert goes through once APNs is fine.
        assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"forwarded"}"#);
        // Refusals are never queued.
        assert_eq!(h.prod.received_for(&d).len(), 2);
    }
}

#[tokio::test]
async fn transient_apns_failures_are_queued_not_refused() {
    let h = Harness::with(Options::default().var("APNS_ENVIRONMENT", "production")).await;
    for (i, reply) in [
        Reply::new(429, Some("TooManyRequests")),
        Reply::new(500, Some("InternalServerError")),
        Reply::new(503, Some("ServiceUnavailable")),
    ]
    .into_iter()
    .enumerate()
    {
        let d = device(20 + i as u32);
        h.prod.reply_times(&d, reply, 1);
        let e = envelope(&d, &id(1));
        let r = h.post(&e).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (202, r#"{"v":1,"outcome":"queued"}"#)
        );
        // While queued, duplicates coalesce.
        assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"coalesced"}"#);
    }
}

#[tokio::test]
async fn auto_mode_falls_back_to_sandbox_once_and_remembers() {
    let h = Harness::start().await;
    let d = device(4);
    h.prod
        .reply_always(&d, Reply::new(400, Some("BadDeviceToken")));
    let r = h.post(&envelope(&d, &id(1))).await;
    assert_eq!(r.body, r#"{"v":1,"outcome":"forwarded"}"#);
    assert_eq!(h.prod.received_for(&d).len(), 1);
    assert_eq!(h.sandbox.received_for(&d).len(), 1);
    // The next alert goes straight to sandbox.
    assert_eq!(h.post(&envelope(&d, &id(2))).await.status, 202);
    assert_eq!(h.prod.received_for(&d).len(), 1);
    assert_eq!(h.sandbox.received_for(&d).len(), 2);
    // Same apns-id on both attempts of the first notification.
    assert_eq!(
        h.prod.received_for(&d)[0].header("apns-id"),
        h.sandbox.received_for(&d)[0].header("apns-id")
    );

    // Rejected on both: 410 with the second answer's reason, one try each.
    let d2 = device(5);
    h.prod
        .reply_always(&d2, Reply::new(400, Some("BadDeviceToken")));
    h.sandbox
        .reply_always(&d2, Reply::new(400, Some("BadDeviceToken")));
    let r = h.post(&envelope(&d2, &id(1))).await;
    assert_eq!(r.status, 410);
    assert_eq!(r.json()["reason"], "BadDeviceToken");
    assert_eq!(
        (
            h.prod.received_for(&d2).len(),
            h.sandbox.received_for(&d2).len()
        ),
        (1, 1)
    );

    // Unregistered is not an environment problem: no fallback.
    let d3 = device(6);
    h.prod
        .reply_always(&d3, Reply::new(410, Some("Unregistered")));
    assert_eq!(h.post(&envelope(&d3, &id(1))).await.status, 410);
    assert!(h.sandbox.received_for(&d3).is_empty());
}

#[tokio::test]
async fn fixed_environments_never_fall_back() {
    let h = Harness::with(Options::default().var("APNS_ENVIRONMENT", "sandbox")).await;
    let d = device(1);
    h.sandbox
        .reply_always(&d, Reply::new(400, Some("BadDeviceToken")));
    let r = h.post(&envelope(&d, &id(1))).await;
    assert_eq!(r.status, 410);
    assert!(h.prod.received().is_empty());
    assert_eq!(h.post(&envelope(&device(2), &id(1))).await.status, 202);
    assert_eq!(h.sandbox.received_for(&device(2)).len(), 1);
}

#[tokio::test]
async fn provider_token_is_reused_and_refreshed_after_expired_provider_token() {
    let h = Harness::start().await;
    for i in 0..5 {
        assert_eq!(h.post(&envelope(&device(i), &id(i))).await.status, 202);
    }
    let jwts: std::collections::HashSet<_> =
        h.prod.received().iter().map(|r| r.jwt.clone()).collect();
    assert_eq!(jwts.len(), 1, "one token reused");

    // APNs says the token expired: the relay signs a new one and retries once.
    let d = device(50);
    h.prod
        .reply_times(&d, Reply::new(403, Some("ExpiredProviderToken")), 1);
    // A new token is signed within the same second only if its iat differs; give it one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = h.post(&envelope(&d, &id(1))).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let tries = h.prod.received_for(&d);
    assert_eq!(tries.len(), 2);
    assert_ne!(tries[0].jwt, tries[1].jwt);
    assert_eq!(tries[1].status, 200);
}

#[tokio::test]
async fn reconnects_after_goaway() {
    let h = Harness::start().await;
    assert_eq!(h.post(&envelope(&device(1), &id(1))).await.status, 202);
    assert_eq!(h.prod.connections(), 1);
    h.prod.goaway_all();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 2..5 {
        assert_eq!(h.post(&envelope(&device(i), &id(i))).await.status, 202);
    }
    assert_eq!(h.prod.connections(), 2);
    assert_eq!(h.prod.delivered(), 4);
}

#[tokio::test]
async fn without_credentials_forwards_are_502_or_dry_run() {
    let h = Harness::with(Options::default().without_credentials()).await;
    let r = h.post(&envelope(&device(1), &id(1))).await;
    assert_eq!(r.status, 502);
    assert_eq!(
        r.body,
        r#"{"v":1,"error":"relay is not configured for APNs delivery"}"#
    );
    // Rolled back, and coalescing/validation still apply.
    assert_eq!(h.post(&envelope(&device(1), &id(1))).await.status, 502);

    let h = Harness::with(
        Options::default()
            .without_credentials()
            .var("RELAY_DRY_RUN", "true"),
    )
    .await;
    let e = envelope(&device(1), &id(1));
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"forwarded"}"#);
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"coalesced"}"#);
    assert!(h.prod.received().is_empty());
}

#[tokio::test]
async fn admin_endpoints() {
    let h = Harness::start().await;
    assert_eq!(h.admin("/healthz").await.status, 200);
    let r = h.admin("/readyz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ready\n"));
    h.post(&envelope(&device(1), &id(1))).await;
    let m = h.admin("/metrics").await;
    assert_eq!(m.status, 200);
    assert!(
        m.body
            .contains("sealrelay_intake_requests_total{outcome=\"forwarded\",status=\"202\"}"),
        "{}",
        m.body
    );
    assert!(
        m.body.contains("sealrelay_apns_requests_total"),
        "{}",
        m.body
    );
    assert!(!m.body.contains(&device(1)), "no token in metrics");
    assert!(!m.body.contains(&device(1)[..16]));
}
