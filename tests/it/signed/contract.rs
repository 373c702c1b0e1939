//! Signed pushes (`/v2/pushes`, SIGNED.md) against a relay in this process and the mock
//! APNs: the acceptance table row by row and in its order, replays and conflicts, ten
//! identical requests at once, the receipt's target states, signed reads, the event stream
//! and its resumption, the store round trips, and the 503 while the store is away.

use std::time::{Duration, Instant};

use crate::common::signed::*;
use crate::common::*;
use sealrelay::clock::Clock;
use serde_json::json;

fn devices(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(device).collect()
}

/// A relay on a manual clock with three signers enrolled: `ops` for the relay's topic,
/// `other` for another topic, `gone` revoked.
async fn relay_with_signers(clock: Clock) -> (SignedRelay, Signer, Signer, Signer) {
    let r = SignedRelay::start(Options::default().clock(clock)).await;
    let (ops, other, gone) = (
        Signer::new("ops"),
        Signer::new("other"),
        Signer::new("gone"),
    );
    r.enroll(&ops, &[TOPIC]).await;
    r.enroll(&other, &["com.example.other"]).await;
    r.enroll(&gone, &[TOPIC]).await;
    let (status, v) = r
        .admin_call(
            "POST",
            &format!("/admin/v1/signers/{}/revoke", gone.id),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "revoked");
    (r, ops, other, gone)
}

fn sent(h: &Harness) -> usize {
    h.prod.received().len() + h.sandbox.received().len()
}

/// Every row of the acceptance table, then pairs of failing checks: the earlier row
/// answers. Nothing refused reaches APNs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acceptance_table_row_by_row_and_in_order() {
    let clock = Clock::manual(T0);
    let (r, ops, other, gone) = relay_with_signers(clock.clone()).await;
    let stranger = Signer::new("stranger");
    let d = devices(0..1);

    // Row 1: the body's JSON and members.
    let resp =
        r.h.request("POST", "/v2/pushes", b"{not json".to_vec())
            .await;
    assert_error(&resp, 400, "invalid_request");
    let mut m = ops.request(&rid(1), &d, T0);
    m.insert("expectedFrontier".into(), json!("x"));
    let resp = r.push(&ops.sign(m)).await;
    let v = assert_error(&resp, 400, "invalid_request");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expectedFrontier"),
        "{v}"
    );
    let mut m = ops.request(&rid(1), &d, T0);
    m.remove("collapseId");
    let v = assert_error(&r.push(&ops.sign(m)).await, 400, "invalid_request");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("collapseId"),
        "{v}"
    );
    let mut m = ops.request(&rid(1), &d, T0);
    m["targets"] = json!([]);
    assert_error(&r.push(&ops.sign(m)).await, 400, "invalid_request");

    // Row 2: the signer, enrolled and active.
    let v = assert_error(
        &r.push(&stranger.sign(stranger.request(&rid(2), &d, T0)))
            .await,
        403,
        "unknown_signer",
    );
    assert_eq!(v["error"]["pushId"], rid(2));
    assert_error(
        &r.push(&gone.sign(gone.request(&rid(3), &d, T0))).await,
        403,
        "revoked_signer",
    );

    // Row 3: the signature.
    let mut signed = ops.sign(ops.request(&rid(4), &d, T0));
    signed["priority"] = json!("passive");
    assert_error(&r.push(&signed).await, 401, "bad_signature");
    let mut signed = ops.sign(ops.request(&rid(4), &d, T0));
    signed["signature"] = json!("c2hvcnQ");
    assert_error(&r.push(&signed).await, 401, "bad_signature");
    let mut signed = ops.sign(ops.request(&rid(4), &d, T0));
    signed["signature"] = json!(other.sign(other.request(&rid(4), &d, T0))["signature"]);
    assert_error(&r.push(&signed).await, 401, "bad_signature");

    // Row 4: the topic binding (the relay's default topic when the request names none).
    assert_error(
        &r.push(&other.sign(other.request(&rid(5), &d, T0))).await,
        403,
        "topic_not_allowed",
    );
    let mut m = other.request(&rid(5), &d, T0);
    m.remove("topic");
    assert_error(&r.push(&other.sign(m)).await, 403, "topic_not_allowed");

    // Row 5: freshness, 5 minutes before to 30 s after, bounds included.
    for issued in [T0 - 300_001, T0 + 30_001] {
        let v = assert_error(
            &r.push(&ops.sign(ops.request(&rid(6), &d, issued))).await,
            422,
            "stale_request",
        );
        assert_eq!(v["error"]["pushId"], rid(6));
    }
    assert_eq!(sent(&r.h), 0, "nothing refused reached APNs");
    for (n, issued) in [(7, T0 - 300_000), (8, T0 + 30_000)] {
        let resp = r
            .push(&ops.sign(ops.request(&rid(n), &devices(n as u32..n as u32 + 1), issued)))
            .await;
        assert_eq!(resp.status, 201, "{}", resp.body);
    }

    // Row 6: the request id, with another hash.
    let mut m = ops.request(&rid(7), &devices(7..8), T0);
    m["priority"] = json!("passive");
    let v = assert_error(&r.push(&ops.sign(m)).await, 409, "request_id_conflict");
    assert_eq!(v["error"]["pushId"], rid(7));

    // Over 512 KiB: 413, before anything is parsed. (On a connection of its own: the relay
    // answers without reading the body and closes it.)
    let big = format!(
        "POST /v2/pushes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        512 * 1024 + 1
    );
    let resp = raw(r.h.addr(), big.as_bytes()).await;
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(resp.contains(r#"{"error":{"code":"too_large","#), "{resp}");

    // Two failing checks at once: the earlier row answers.
    let mut m = stranger.request(&rid(9), &d, T0);
    m.insert("expectedFrontier".into(), json!(1));
    assert_error(&r.push(&stranger.sign(m)).await, 400, "invalid_request");
    let mut s = stranger.sign(stranger.request(&rid(9), &d, T0));
    s["signature"] = json!("AAAA");
    assert_error(&r.push(&s).await, 403, "unknown_signer");
    let mut s = gone.sign(gone.request(&rid(9), &d, T0 - 400_000));
    s["event"] = json!(true);
    assert_error(&r.push(&s).await, 403, "revoked_signer");
    let mut s = other.sign(other.request(&rid(9), &d, T0));
    s["event"] = json!(true);
    assert_error(&r.push(&s).await, 401, "bad_signature");
    assert_error(
        &r.push(&other.sign(other.request(&rid(9), &d, T0 - 400_000)))
            .await,
        403,
        "topic_not_allowed",
    );
    let mut m = ops.request(&rid(7), &devices(7..8), T0 - 400_000);
    m["priority"] = json!("passive");
    assert_error(&r.push(&ops.sign(m)).await, 422, "stale_request");

    assert_eq!(sent(&r.h), 2, "only the two accepted pushes reached APNs");
}

/// The same request again answers 200 with the stored receipt and sends nothing; the same
/// id with another body is 409 and sends nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_sends_nothing_and_another_body_is_a_conflict() {
    let r = SignedRelay::start(Options::default()).await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let now = Clock::System.now_ms();
    let body = ops.sign(ops.request(&rid(1), &devices(0..2), now));
    let first = r.push(&body).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let receipt = first.json();
    assert_eq!(receipt["state"], "settled");
    assert_eq!(receipt["pushId"], rid(1));
    assert!(receipt["canonicalHash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    for t in receipt["targets"].as_object().unwrap().values() {
        assert_eq!(t["state"], "delivered");
    }
    let again = r.push(&body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json(), receipt);
    assert_eq!(sent(&r.h), 2);
    let mut other = ops.request(&rid(1), &devices(0..2), now);
    other["event"] = json!(true);
    assert_error(&r.push(&ops.sign(other)).await, 409, "request_id_conflict");
    assert_eq!(sent(&r.h), 2);
    // The receipt names devices by hash only.
    assert!(!first.body.contains(&device(0)) && !first.body.contains(&"A".repeat(68)));
}

async fn ten_at_once(r: &SignedRelay) {
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    // Slow APNs, so the ten overlap the first one's delivery.
    r.h.prod.set_delay(Duration::from_millis(300));
    let body = ops.sign(ops.request(&rid(10), &devices(40..41), Clock::System.now_ms()));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let body = body.clone();
        let h = &r;
        tasks.push(async move { h.push(&body).await });
    }
    let answers = futures_util::future::join_all(tasks).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        9,
        "{statuses:?}"
    );
    // Replays that came while the first was in flight answer the receipt as it stood.
    for a in &answers {
        let v = a.json();
        assert_eq!(v["pushId"], rid(10));
        assert!(v["state"] == "pending" || v["state"] == "settled", "{v}");
    }
    assert_eq!(
        r.h.prod.received_for(&device(40)).len(),
        1,
        "one APNs request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_identical_requests_at_once_make_one_apns_request() {
    ten_at_once(&SignedRelay::start(Options::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_identical_requests_at_once_make_one_apns_request_on_redis() {
    let redis = RedisServer::start();
    ten_at_once(&SignedRelay::start(Options::default().var("REDIS_URL", &redis.url())).await).await;
}

/// Each target gets its own state: delivered on an APNs 200 only, rejected for a dead
/// token, failed with APNs's status and reason, queued on a transient failure and then
/// delivered by the retry queue (the stream sees it), coalesced for a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_gets_its_own_state_and_the_retry_queue_settles_the_queued() {
    let r = SignedRelay::start(Options::default()).await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let d = devices(50..54);
    r.h.prod
        .reply_always(&d[1], Reply::new(410, Some("Unregistered")));
    r.h.prod
        .reply_always(&d[2], Reply::new(400, Some("BadExpirationDate")));
    r.h.prod
        .reply_times(&d[3], Reply::new(503, Some("ServiceUnavailable")), 1);
    let resp = r
        .push(&ops.sign(ops.request(&rid(20), &d, Clock::System.now_ms())))
        .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    let v = resp.json();
    let key = |i: usize| hash16(&d[i]);
    let t = &v["targets"];
    assert_eq!(t[key(0)]["state"], "delivered", "{v}");
    assert_eq!(t[key(1)]["state"], "rejected", "{v}");
    assert_eq!(t[key(2)]["state"], "failed", "{v}");
    assert_eq!(
        t[key(2)]["failure"],
        json!({"apnsStatus": 400, "reason": "BadExpirationDate"})
    );
    assert_eq!(t[key(3)]["state"], "queued", "{v}");
    assert_eq!(v["state"], "pending");

    // The stream picks up where the answer left off and ends once the retry delivers.
    let last = v["events"].as_array().unwrap().last().unwrap()["sequence"]
        .as_u64()
        .unwrap();
    let path = format!("/v2/pushes/{}/events?after={last}", rid(20));
    let now = Clock::System.now_ms();
    let mut s = Stream::open(
        r.h.addr(),
        &path,
        &[("authorization", ops.read_auth(&path, now))],
    )
    .await;
    assert_eq!(s.status, 200);
    let e = s
        .next(Duration::from_secs(10))
        .await
        .expect("the retry's event");
    assert_eq!((e.id, e.event.as_str()), (last + 1, "target"));
    assert_eq!(e.data["target"], key(3));
    assert_eq!(e.data["state"], "delivered");
    let e = s.next(Duration::from_secs(5)).await.expect("settled");
    assert_eq!((e.id, e.event.as_str()), (last + 2, "settled"));
    assert!(
        s.ends(Duration::from_secs(5)).await,
        "the stream ends after settled"
    );
    assert_eq!(r.h.prod.received_for(&d[3]).len(), 2);

    // A duplicate of a delivered alert is coalesced, and nothing is sent.
    let mut m = ops.request(&rid(21), &d[..1], Clock::System.now_ms());
    m["collapseId"] = v["pushId"].as_str().unwrap().replace('-', "").into();
    let resp = r.push(&ops.sign(m)).await;
    assert_eq!(
        resp.json()["targets"][key(0)]["state"],
        "coalesced",
        "{}",
        resp.body
    );
    assert_eq!(r.h.prod.received_for(&d[0]).len(), 1);

    // The receipt as read now.
    let path = format!("/v2/pushes/{}", rid(20));
    let got = r.read(&ops, &path, Clock::System.now_ms()).await;
    assert_eq!(got.status, 200);
    let g = got.json();
    assert_eq!(g["state"], "settled");
    assert_eq!(g["targets"][key(3)]["state"], "delivered");
    let seqs: Vec<u64> = g["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

/// Signed reads, in SIGNED.md's order: the header (401, also for a push that does not
/// exist), the signer (403), the signature (401), freshness (422), another signer (403),
/// an unknown push (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_reads_check_in_order() {
    let clock = Clock::manual(T0);
    let (r, ops, other, gone) = relay_with_signers(clock.clone()).await;
    let resp = r
        .push(&ops.sign(ops.request(&rid(1), &devices(0..1), T0)))
        .await;
    assert_eq!(resp.status, 201);
    let path = format!("/v2/pushes/{}", rid(1));
    let missing = format!("/v2/pushes/{}", rid(99));

    for p in [&path, &missing] {
        assert_error(
            &r.h.request("GET", p, Vec::new()).await,
            401,
            "unauthorized",
        );
        let bad = [("authorization", "Bearer x".to_owned())];
        assert_error(
            &r.h.request_with("GET", p, &bad, Vec::new()).await,
            401,
            "unauthorized",
        );
    }
    let stranger = Signer::new("stranger");
    assert_error(&r.read(&stranger, &path, T0).await, 403, "unknown_signer");
    assert_error(&r.read(&gone, &path, T0).await, 403, "revoked_signer");
    // Signed for another path: the signature does not verify.
    let auth = ops.read_auth(&missing, T0);
    let resp =
        r.h.request_with("GET", &path, &[("authorization", auth)], Vec::new())
            .await;
    assert_error(&resp, 401, "bad_signature");
    assert_error(
        &r.read(&ops, &path, T0 - 300_001).await,
        422,
        "stale_request",
    );
    assert_error(
        &r.read(&ops, &path, T0 + 30_001).await,
        422,
        "stale_request",
    );
    assert_error(&r.read(&other, &path, T0).await, 403, "forbidden");
    assert_error(&r.read(&ops, &missing, T0).await, 404, "not_found");
    let ok = r.read(&ops, &path, T0 - 300_000).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["pushId"], rid(1));
    // The admin API reads any receipt.
    let (status, v) = r
        .admin_call("GET", &format!("/admin/v1/pushes/{}", rid(1)), None)
        .await;
    assert_eq!((status, &v["pushId"]), (200, &json!(rid(1))));
    let (status, v) = r
        .admin_call("GET", &format!("/admin/v1/pushes/{}", rid(99)), None)
        .await;
    assert_eq!((status, &v["error"]["code"]), (404, &json!("not_found")));
}

/// `after=` and `Last-Event-ID` pick the first event; the query wins over the header; the
/// stream ends after `settled`, at once when it resumes past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_resumes_where_asked() {
    let r = SignedRelay::start(Options::default()).await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let resp = r
        .push(&ops.sign(ops.request(&rid(1), &devices(0..1), Clock::System.now_ms())))
        .await;
    assert_eq!(resp.status, 201);
    let base = format!("/v2/pushes/{}/events", rid(1));
    let read = |path: String, last: Option<&'static str>| {
        let (r, ops) = (&r, &ops);
        async move {
            let mut headers = vec![(
                "authorization",
                ops.read_auth(&path, Clock::System.now_ms()),
            )];
            if let Some(l) = last {
                headers.push(("last-event-id", l.to_owned()));
            }
            let resp = r.h.request_with("GET", &path, &headers, Vec::new()).await;
            assert_eq!(resp.status, 200, "{}", resp.body);
            assert!(resp
                .header("content-type")
                .unwrap()
                .starts_with("text/event-stream"));
            parse_sse(&resp.body)
        }
    };
    let all = read(base.clone(), None).await;
    let names: Vec<(u64, &str)> = all.iter().map(|e| (e.id, e.event.as_str())).collect();
    assert_eq!(names, vec![(1, "accepted"), (2, "target"), (3, "settled")]);
    assert_eq!(all[1].data["state"], "delivered");
    assert_eq!(all[1].data["sequence"], 2);
    assert_eq!(all[0].data, resp.json()["events"][0]);
    let after1 = read(format!("{base}?after=1"), None).await;
    assert_eq!(after1.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2, 3]);
    let header2 = read(base.clone(), Some("2")).await;
    assert_eq!(header2.iter().map(|e| e.id).collect::<Vec<_>>(), vec![3]);
    let query_wins = read(format!("{base}?after=0"), Some("2")).await;
    assert_eq!(query_wins.len(), 3);
    let past = read(format!("{base}?after=3"), None).await;
    assert!(past.is_empty());
    let path = format!("{base}?after=x");
    let auth = ops.read_auth(&path, Clock::System.now_ms());
    let bad =
        r.h.request_with("GET", &path, &[("authorization", auth)], Vec::new())
            .await;
    assert_error(&bad, 400, "invalid_request");
}

/// Store round trips per signed push: three for one target (the receipt begun, the
/// admission, the outcomes recorded), one more per extra target; a replay costs one. The
/// signer comes from the replica's cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_per_signed_push() {
    let redis = RedisServer::start();
    let r = SignedRelay::start(Options::default().var("REDIS_URL", &redis.url())).await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    // Warm up: the signer cached, every script loaded.
    let now = Clock::System.now_ms();
    assert_eq!(
        r.push(&ops.sign(ops.request(&rid(1), &devices(0..1), now)))
            .await
            .status,
        201
    );
    let scripts = |before: &std::collections::HashMap<String, u64>| {
        let after = redis.command_calls();
        let d = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
        // The retry worker's polls are one EVALSHA each, running one ZRANGEBYSCORE; the queue
        // gauges' are one EVALSHA per shard, running one ZCARD. (No receipt script runs
        // either.)
        d("evalsha") - d("zrangebyscore") - d("zcard")
    };
    let signer_loads = || async {
        let m = r.h.admin("/metrics").await.body;
        m.lines()
            .find(|l| l.starts_with(r#"sealrelay_store_duration_seconds_count{op="signer_get"}"#))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // The cache is cleared once when the replica's subscription to signer changes takes
    // (what changed before it could have been missed): warm up until a push loads nothing.
    let mut loads = signer_loads().await;
    assert!(loads >= 1, "the first push loaded the signer");
    for n in 100.. {
        assert!(n < 150, "the signer cache never settled");
        let body = ops.sign(ops.request(&rid(n), &devices(n as u32..n as u32 + 1), now));
        assert_eq!(r.push(&body).await.status, 201);
        let l = signer_loads().await;
        if l == loads {
            break;
        }
        loads = l;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    background_scripts_loaded(&redis).await;
    for (n, targets, want) in [(2u64, 1u32, 3u64), (3, 5, 7)] {
        let body = ops.sign(ops.request(
            &rid(n),
            &devices(n as u32 * 10..n as u32 * 10 + targets),
            now,
        ));
        let before = redis.command_calls();
        assert_eq!(r.push(&body).await.status, 201);
        let got = scripts(&before);
        if got != want {
            let after = redis.command_calls();
            let diff: Vec<_> = after
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(v))
                .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
                .collect();
            panic!("{targets} targets: {got} scripts, want {want}: {diff:?}");
        }
        let before = redis.command_calls();
        assert_eq!(r.push(&body).await.status, 200);
        assert_eq!(scripts(&before), 1, "a replay");
    }
    assert_eq!(
        signer_loads().await,
        loads,
        "the signer came from the cache"
    );
}

/// While the shared store is away, `/v2` answers 503 with `Retry-After`, also in the
/// degrade mode in which v1 keeps answering from this replica's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_away_is_503_even_while_v1_degrades() {
    let mut redis = RedisServer::start();
    let r = SignedRelay::start(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_REDIS_TIMEOUT_MS", "200"),
    )
    .await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let now = Clock::System.now_ms();
    assert_eq!(
        r.push(&ops.sign(ops.request(&rid(1), &devices(0..1), now)))
            .await
            .status,
        201
    );
    redis.stop();
    let started = Instant::now();
    let resp = r
        .push(&ops.sign(ops.request(&rid(2), &devices(1..2), now)))
        .await;
    let v = assert_error(&resp, 503, "unavailable");
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert_eq!(v["error"]["pushId"], rid(2));
    assert!(started.elapsed() < Duration::from_secs(3));
    // v1 degrades to this replica's memory and still forwards.
    let v1 = r.h.post(&envelope(&device(2), &id(2))).await;
    assert_eq!(v1.status, 202, "{}", v1.body);
    assert!(r.h.relay.degraded());
    let resp = r
        .push(&ops.sign(ops.request(&rid(3), &devices(3..4), now)))
        .await;
    assert_error(&resp, 503, "unavailable");
    let (status, v) = r.admin_call("GET", "/admin/v1/signers", None).await;
    assert_eq!((status, &v["error"]["code"]), (503, &json!("unavailable")));
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    // One request, sent again as it is until it goes through: an attempt whose store reply
    // was lost may have begun its receipt, and the same bytes are then a replay (200).
    let again = ops.sign(ops.request(&rid(4), &devices(4..5), Clock::System.now_ms()));
    loop {
        // A fresh Redis: the signer is enrolled again once the store answers.
        let (status, _) = r
            .admin_call(
                "PUT",
                &format!("/admin/v1/signers/{}", ops.id),
                Some(json!({"publicKey": ops.public(), "topics": [TOPIC]})),
            )
            .await;
        let resp = r.push(&again).await;
        if resp.status == 201 || resp.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never recovered: {status} {}",
            resp.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The push answered 503 while the store was away was not decided in this replica's
    // memory; its replica settles it in the background once the store answers again (a
    // reply that did not arrive is not a command that did not run), so by now it was sent
    // once or not yet, never twice.
    assert!(
        r.h.prod.received_for(&device(1)).len() <= 1,
        "the refused push was sent more than once"
    );
}

/// Wrong methods on `/v2` answer in the envelope, with the `Allow` of their path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_methods_answer_405_in_the_envelope() {
    let r = SignedRelay::start(Options::default()).await;
    let receipt = format!("/v2/pushes/{}", rid(1));
    let events = format!("{receipt}/events");
    for (method, path, allow) in [
        ("GET", "/v2/pushes", "POST"),
        ("PUT", "/v2/pushes", "POST"),
        ("DELETE", receipt.as_str(), "GET, HEAD"),
        ("POST", receipt.as_str(), "GET, HEAD"),
        ("POST", events.as_str(), "GET, HEAD"),
    ] {
        let resp = r.h.request(method, path, Vec::new()).await;
        assert_error(&resp, 405, "method_not_allowed");
        assert_eq!(resp.header("allow"), Some(allow), "{method} {path}");
    }
}

/// `/v2` is admitted at the same door as v1, before its body costs anything: the source's
/// bucket is one for both front-ends (two v1 alerts and one signed push spend a bucket of
/// three), and once it is empty a signed push, a body that is not even JSON, and a signed
/// read are all 429 `rate_limited` with the bucket's `Retry-After`; nothing more is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_shares_the_source_bucket_with_v1() {
    let r = SignedRelay::start(
        Options::default()
            .var("RELAY_IP_RATE_CAPACITY", "3")
            .var("RELAY_IP_RATE_REFILL_PER_S", "0.1"),
    )
    .await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    for n in 0..2 {
        let v1 = r.h.post(&envelope(&device(n), &id(n))).await;
        assert_eq!(v1.status, 202, "{}", v1.body);
    }
    let now = Clock::System.now_ms();
    let first = r
        .push(&ops.sign(ops.request(&rid(1), &devices(10..11), now)))
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let second = r
        .push(&ops.sign(ops.request(&rid(2), &devices(11..12), now)))
        .await;
    let v = assert_error(&second, 429, "rate_limited");
    assert_eq!(second.header("retry-after"), Some("10"), "{v}");
    let garbage =
        r.h.request("POST", "/v2/pushes", b"not json".to_vec())
            .await;
    assert_error(&garbage, 429, "rate_limited");
    let read = r.read(&ops, &format!("/v2/pushes/{}", rid(1)), now).await;
    assert_error(&read, 429, "rate_limited");
    assert_eq!(sent(&r.h), 3);
    let v1 = r.h.post(&envelope(&device(3), &id(3))).await;
    assert_eq!(
        v1.status, 429,
        "v1 is refused by the same bucket: {}",
        v1.body
    );
}

/// The in-flight limit is the relay's, not v1's: with `RELAY_MAX_INFLIGHT=2` and APNs slow,
/// two of six signed pushes at once are taken and four are 503 `unavailable` with
/// `Retry-After: 1` before their bodies are read; the shed ones, sent again, are new pushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_is_shed_at_the_relays_in_flight_limit() {
    let r = std::sync::Arc::new(
        SignedRelay::start(Options::default().var("RELAY_MAX_INFLIGHT", "2")).await,
    );
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    r.h.prod.set_delay(Duration::from_millis(800));
    let now = Clock::System.now_ms();
    let bodies: Vec<serde_json::Value> = (0..6u32)
        .map(|n| ops.sign(ops.request(&rid(u64::from(n)), &devices(n..n + 1), now)))
        .collect();
    let tasks: Vec<_> = bodies
        .iter()
        .cloned()
        .map(|b| {
            let addr = r.h.addr();
            tokio::spawn(async move { post_json(addr, "/v2/pushes", &b).await })
        })
        .collect();
    let mut shed = Vec::new();
    let mut created = 0;
    for (n, t) in tasks.into_iter().enumerate() {
        let resp = t.await.unwrap();
        match resp.status {
            201 => created += 1,
            503 => {
                let v = assert_error(&resp, 503, "unavailable");
                assert_eq!(resp.header("retry-after"), Some("1"), "{v}");
                assert!(
                    v["error"].get("pushId").is_none(),
                    "shed before the body: {v}"
                );
                shed.push(n);
            }
            s => panic!("unexpected {s}: {}", resp.body),
        }
    }
    assert_eq!((created, shed.len()), (2, 4));
    r.h.prod.set_delay(Duration::ZERO);
    for n in shed {
        let again = r.push(&bodies[n]).await;
        assert_eq!(
            again.status, 201,
            "a shed push was never begun: {}",
            again.body
        );
    }
    assert_eq!(sent(&r.h), 6);
}

/// Enrolment over the admin API: 201 then 200, strict bodies, the list, revocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signers_are_enrolled_listed_and_revoked() {
    let r = SignedRelay::start(Options::default()).await;
    let s = Signer::new("ops-eu-1");
    let path = format!("/admin/v1/signers/{}", s.id);
    let body = json!({"publicKey": s.public(), "topics": [TOPIC]});
    let (status, v) = r.admin_call("PUT", &path, Some(body.clone())).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["state"], "active");
    let (status, _) = r
        .admin_call(
            "PUT",
            &path,
            Some(json!({"publicKey": s.public(), "topics": [TOPIC, "com.example.b"]})),
        )
        .await;
    assert_eq!(status, 200);
    for bad in [
        json!({"publicKey": "AAAA", "topics": [TOPIC]}),
        json!({"publicKey": s.public(), "topics": []}),
        json!({"publicKey": s.public(), "topics": ["has space"]}),
        json!({"publicKey": s.public(), "topics": [TOPIC, TOPIC]}),
        json!({"publicKey": s.public(), "topics": [TOPIC], "extra": 1}),
        json!([1]),
    ] {
        let (status, v) = r.admin_call("PUT", &path, Some(bad.clone())).await;
        assert_eq!(
            (status, &v["error"]["code"]),
            (400, &json!("invalid_request")),
            "{bad}"
        );
    }
    let (status, v) = r
        .admin_call("PUT", "/admin/v1/signers/rsa:nope", Some(body))
        .await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("invalid_request"))
    );
    let (status, v) = r.admin_call("GET", "/admin/v1/signers", None).await;
    assert_eq!(status, 200);
    let list = v["signers"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["keyId"], s.id);
    assert_eq!(list[0]["publicKey"], s.public());
    assert_eq!(list[0]["topics"], json!([TOPIC, "com.example.b"]));
    assert!(list[0]["createdAtMs"].as_i64().unwrap() <= list[0]["updatedAtMs"].as_i64().unwrap());
    let (status, v) = r.admin_call("POST", &format!("{path}/revoke"), None).await;
    assert_eq!((status, &v["state"]), (200, &json!("revoked")));
    assert!(v["revokedAtMs"].is_i64());
    let (status, _) = r
        .admin_call("POST", "/admin/v1/signers/ed25519:nobody/revoke", None)
        .await;
    assert_eq!(status, 404);
    let (status, v) = r.admin_call("GET", "/admin/v1/nothing", None).await;
    assert_eq!((status, &v["error"]["code"]), (404, &json!("not_found")));
    // The admin API is not on the public listener.
    let resp = r.h.request("GET", "/admin/v1/signers", Vec::new()).await;
    assert_eq!(resp.status, 404);
}

/// What the parser and the handler do with hostile bodies: never a panic, always the
/// envelope, never an APNs request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_get_the_envelope() {
    let r = SignedRelay::start(Options::default()).await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"null".to_vec(),
        b"\xff\xfe".to_vec(),
        deep.into_bytes(),
        br#"{"schemaVersion":"2","schemaVersion":"2"}"#.to_vec(),
        serde_json::to_vec(&json!({"targets": [{"device": 1}]})).unwrap(),
        br#"{"issuedAtMs":1e400}"#.to_vec(),
    ];
    for b in bodies {
        let resp = r.h.request("POST", "/v2/pushes", b.clone()).await;
        assert_error(&resp, 400, "invalid_request");
    }
    assert_eq!(sent(&r.h), 0);
}

/// A target still `accepted` past twice `RELAY_RETRY_LEASE_MS` is settled as `failed` with
/// `relay_interrupted` by whoever reads the receipt (a signed read, an open event stream,
/// the admin API), but only once the push's lease has lapsed by the store's clock. The
/// manual clock jumps 60 s ahead while APNs holds the delivering replica's answer:
/// - in memory the store's clock is that clock, so the lease has lapsed: the readers settle
///   the target, nothing is sent again, and the late outcome changes nothing;
/// - on Redis the lease is timed by Redis, which says the owner's lease still runs: a
///   replica whose clock ran ahead settles nothing behind a live owner, and the owner's
///   outcome (`delivered`) is what every reader sees.
async fn abandoned_targets_are_settled_by_their_readers(redis: Option<String>) {
    let clock = Clock::manual(Clock::System.now_ms());
    let mut opts = Options::default()
        .clock(clock.clone())
        .var("RELAY_RETRY_LEASE_MS", "30000");
    if let Some(url) = &redis {
        opts = opts.var("REDIS_URL", url);
    }
    let store_clock_lapsed = redis.is_none();
    let r = SignedRelay::start(opts).await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    r.h.prod.set_delay(Duration::from_millis(1500));
    let bound = 60_000;
    let interrupted = json!({"reason": "relay_interrupted"});

    // Starts a push of one target and waits until its APNs request is in flight.
    let start = |n: u64| {
        let body = ops.sign(ops.request(&rid(n), &devices(n as u32..n as u32 + 1), clock.now_ms()));
        let sent_before = r.h.prod.started();
        let post = {
            let (addr, body) = (r.h.addr(), body.clone());
            tokio::spawn(async move { post_json(addr, "/v2/pushes", &body).await })
        };
        (body, post, sent_before)
    };
    let prod = &r.h.prod;
    let in_flight = |before: usize| async move {
        let deadline = Instant::now() + Duration::from_secs(10);
        while prod.started() <= before {
            assert!(Instant::now() < deadline, "the APNs request never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };

    // 1. A signed read and an open event stream.
    let (_, post, before) = start(40);
    in_flight(before).await;
    let path = format!("/v2/pushes/{}", rid(40));
    let early = r.read(&ops, &path, clock.now_ms()).await;
    assert_eq!(early.status, 200, "{}", early.body);
    let e = early.json();
    assert_eq!(
        e["state"], "pending",
        "within the bound nothing is settled: {e}"
    );
    let key = hash16(&device(40));
    assert_eq!(e["targets"][&key]["state"], "accepted");
    let events = format!("{path}/events?after=1");
    let mut stream = Stream::open(
        r.h.addr(),
        &events,
        &[("authorization", ops.read_auth(&events, clock.now_ms()))],
    )
    .await;
    assert_eq!(stream.status, 200);
    clock.advance_ms(bound + 1);
    let want = if store_clock_lapsed {
        "failed"
    } else {
        "delivered"
    };
    let ev = stream
        .next(Duration::from_secs(5))
        .await
        .expect("the stream sees the target settle");
    assert_eq!((ev.id, ev.event.as_str()), (2, "target"));
    assert_eq!(
        (ev.data["target"].as_str(), ev.data["state"].as_str()),
        (Some(key.as_str()), Some(want))
    );
    let ev = stream.next(Duration::from_secs(5)).await.expect("settled");
    assert_eq!((ev.id, ev.event.as_str()), (3, "settled"));
    assert!(stream.ends(Duration::from_secs(5)).await);
    let read = r.read(&ops, &path, clock.now_ms()).await.json();
    assert_eq!(read["state"], "settled", "{read}");
    assert_eq!(read["targets"][&key]["state"], want);
    if store_clock_lapsed {
        assert_eq!(read["targets"][&key]["failure"], interrupted);
    }
    // The slow delivery finishes: APNs took it. In memory the receipt already said what
    // the relay could know, and the late outcome is ignored (the answer is what the store
    // holds).
    let answered = post.await.unwrap();
    assert_eq!(answered.status, 201, "{}", answered.body);
    assert_eq!(answered.json()["targets"][&key]["state"], want);
    assert_eq!(r.read(&ops, &path, clock.now_ms()).await.json(), read);
    assert_eq!(
        r.h.prod.received_for(&device(40)).len(),
        1,
        "nothing is resent"
    );

    // 2. The admin API.
    let (_, post, before) = start(42);
    in_flight(before).await;
    let admin_path = format!("/admin/v1/pushes/{}", rid(42));
    let (status, v) = r.admin_call("GET", &admin_path, None).await;
    assert_eq!((status, v["state"].as_str()), (200, Some("pending")), "{v}");
    clock.advance_ms(bound + 1);
    let (status, v) = r.admin_call("GET", &admin_path, None).await;
    assert_eq!(status, 200);
    if store_clock_lapsed {
        assert_eq!(v["state"], "settled", "{v}");
        assert_eq!(v["targets"][hash16(&device(42))]["failure"], interrupted);
        let seqs: Vec<&str> = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(seqs, ["accepted", "target", "settled"]);
    } else {
        assert_eq!(v["state"], "pending", "the owner's lease still runs: {v}");
    }
    assert_eq!(post.await.unwrap().status, 201);
    assert_eq!(r.h.prod.received_for(&device(42)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_targets_are_settled_by_their_readers_in_memory() {
    abandoned_targets_are_settled_by_their_readers(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_clock_ahead_settles_nothing_behind_a_live_owner_on_redis() {
    let redis = RedisServer::start();
    abandoned_targets_are_settled_by_their_readers(Some(redis.url())).await;
}

/// A POST from a task of its own (the harness's client borrows the harness).
async fn post_json(addr: std::net::SocketAddr, path: &str, body: &serde_json::Value) -> Resp {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    request(
        &client,
        "POST",
        &format!("http://{addr}{path}"),
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

/// Reads are the key's, not the key id's: after an update enrols `ops` again with another
/// key, a read signed by the new key gets 403 `forbidden` for the receipt made under the
/// old one (which still shows `signerKeyId` as sent), its event stream too, and the new
/// key reads its own pushes; the admin API still reads every receipt. Also on Redis, where
/// the receipt is kept by a script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_authorised_by_the_key_the_push_was_made_under() {
    let redis = RedisServer::start();
    for on_redis in [false, true] {
        let opts = if on_redis {
            Options::default().var("REDIS_URL", &redis.url())
        } else {
            Options::default()
        };
        let r = SignedRelay::start(opts).await;
        let old = Signer::new("ops");
        r.enroll(&old, &[TOPIC]).await;
        let now = Clock::System.now_ms();
        let made = r
            .push(&old.sign(old.request(&rid(1), &devices(0..1), now)))
            .await;
        assert_eq!(made.status, 201, "{}", made.body);
        assert_eq!(made.json()["signerKeyId"], "ed25519:ops");
        let path = format!("/v2/pushes/{}", rid(1));
        assert_eq!(r.read(&old, &path, now).await.status, 200);

        let new = Signer::new("ops");
        r.enroll(&new, &[TOPIC]).await;
        // The signer cache takes the new key within a second.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let refused = loop {
            let resp = r.read(&new, &path, Clock::System.now_ms()).await;
            if resp.status != 401 || std::time::Instant::now() > deadline {
                break resp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_error(&refused, 403, "forbidden");
        let events = r
            .read(&new, &format!("{path}/events"), Clock::System.now_ms())
            .await;
        assert_error(&events, 403, "forbidden");
        let now = Clock::System.now_ms();
        let mine = r
            .push(&new.sign(new.request(&rid(2), &devices(1..2), now)))
            .await;
        assert_eq!(mine.status, 201, "{}", mine.body);
        let own = r.read(&new, &format!("/v2/pushes/{}", rid(2)), now).await;
        assert_eq!(own.status, 200, "{}", own.body);
        assert_eq!(own.json()["signerKeyId"], "ed25519:ops");
        let (status, v) = r
            .admin_call("GET", &format!("/admin/v1/pushes/{}", rid(1)), None)
            .await;
        assert_eq!(
            (status, &v["signerKeyId"]),
            (200, &json!("ed25519:ops")),
            "{v}"
        );
        redis.cli(&["FLUSHALL"]);
    }
}

/// The event stream checks its signed read before it subscribes: 30 event-stream requests
/// refused (no signature: 401; an unknown signer, or a signer that did not make the push:
/// 403; a push nobody made: 404) leave Redis's shard channels as they were; an accepted
/// stream subscribes, and hands the subscription back once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_event_streams_leave_no_subscription() {
    let redis = RedisServer::start();
    let r = SignedRelay::start(Options::default().var("REDIS_URL", &redis.url())).await;
    let (ops, other) = (Signer::new("ops"), Signer::new("other"));
    r.enroll(&ops, &[TOPIC]).await;
    r.enroll(&other, &[TOPIC]).await;
    let now = Clock::System.now_ms();
    let made = r
        .push(&ops.sign(ops.request(&rid(1), &devices(0..1), now)))
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let channels = || {
        let mut v: Vec<String> = redis
            .cli(&["PUBSUB", "SHARDCHANNELS"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let before = channels();
    let stranger = Signer::new("stranger");
    for n in 0..10u64 {
        let path = format!("/v2/pushes/{}/events", rid(1));
        let anonymous = r.h.request("GET", &path, Vec::new()).await;
        assert_error(&anonymous, 401, "unauthorized");
        let now = Clock::System.now_ms();
        assert_error(&r.read(&stranger, &path, now).await, 403, "unknown_signer");
        assert_error(&r.read(&other, &path, now).await, 403, "forbidden");
        let missing = format!("/v2/pushes/{}/events", rid(100 + n));
        assert_error(&r.read(&ops, &missing, now).await, 404, "not_found");
    }
    assert_eq!(channels(), before, "a refused stream subscribed");
    // The push is settled: its stream sends what there is and ends, releasing its channel.
    let done = r
        .read(
            &ops,
            &format!("/v2/pushes/{}/events", rid(1)),
            Clock::System.now_ms(),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("event: settled"), "{}", done.body);
    let deadline = Instant::now() + Duration::from_secs(3);
    while channels() != before {
        assert!(Instant::now() < deadline, "{:?}", channels());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
