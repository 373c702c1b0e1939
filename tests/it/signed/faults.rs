//! Signed pushes when the store or a replica misbehaves, against a real Redis: a store
//! reply lost after Redis acted (`CLIENT PAUSE` longer than `RELAY_REDIS_TIMEOUT_MS`), and a
//! replica killed (`kill -9`) with a push accepted and not yet recorded. In both, the push
//! reaches APNs once and its receipt settles as `delivered`, never `pending` for good and
//! never `failed` for a page that could still be sent. Each test is bounded in time and
//! prints what it measured.

use std::time::{Duration, Instant};

use crate::common::process::RelayProcess;
use crate::common::signed::*;
use crate::common::*;
use sealrelay::clock::Clock;
use serde_json::Value;

async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hash16(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Redis stalls for 800 ms (`CLIENT PAUSE 800 ALL`) while a signed push is posted with
/// `RELAY_REDIS_TIMEOUT_MS=150`: the relay answers 503 ("retry the same request"), and Redis
/// then runs the queued `receipt_begin`. The replica that answered 503 keeps the push and
/// settles it itself once the store answers again: APNs gets it exactly once, the client's
/// retry is a replay answered 200, and the receipt says `delivered`. (Before, the retry
/// found the target `accepted` with nobody delivering it, and it ended `failed`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_begin_reply_still_delivers_once() {
    let redis = RedisServer::start();
    let r = SignedRelay::start(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_REDIS_TIMEOUT_MS", "150"),
    )
    .await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    // A first push caches the signer, so the stalled call is the receipt's. The cache
    // reads a signer again after 0.9 s: on a slow machine the stalled call can be that
    // read instead (503 before any receipt exists), so the test tries until Redis holds
    // the receipt of the push it answered 503 to.
    let mut n = 1;
    let (d, body, paused) = loop {
        assert!(n < 10, "the stall never hit the receipt's creation");
        // With a 150 ms store timeout a busy machine can fail the warm-up too: it is
        // tried again (a replay of it then answers 200).
        let warm = ops.sign(ops.request(&rid(n), &[device(n as u32)], Clock::System.now_ms()));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = r.push(&warm).await.status;
            if s == 201 || s == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "the warm-up push answered {s}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let d = device(n as u32 + 1);
        let body = ops.sign(ops.request(
            &rid(n + 1),
            std::slice::from_ref(&d),
            Clock::System.now_ms(),
        ));
        redis.cli(&["CLIENT", "PAUSE", "800", "ALL"]);
        let paused = Instant::now();
        let first = r.push(&body).await;
        assert_error(&first, 503, "unavailable");
        assert!(first.header("retry-after").is_some());
        let key = format!("sealrelay:{{r:{}}}", rid(n + 1));
        // redis-cli waits out the pause like everyone else.
        if redis.cli(&["EXISTS", &key]).trim() == "1" {
            break (d, body, paused);
        }
        n += 2;
    };
    wait_until(
        "the accepting replica to deliver the push after the lost reply",
        Duration::from_secs(15),
        || r.h.prod.received_for(&d).len() == 1,
    )
    .await;
    let delivered_after = paused.elapsed();
    // The client retries the same request: a replay, answered 200, that sends nothing.
    let deadline = Instant::now() + Duration::from_secs(15);
    let receipt: Value = loop {
        let again = r.push(&body).await;
        if again.status == 200 {
            let v = again.json();
            if v["state"] == "settled" {
                break v;
            }
        } else {
            assert_error(&again, 503, "unavailable");
        }
        assert!(Instant::now() < deadline, "{}", again.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        receipt["targets"][hash16(&d)]["state"],
        "delivered",
        "{receipt}"
    );
    let path = format!("/v2/pushes/{}", rid(n + 1));
    let read = r.read(&ops, &path, Clock::System.now_ms()).await.json();
    assert_eq!(read["targets"][hash16(&d)]["state"], "delivered", "{read}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(r.h.prod.received_for(&d).len(), 1, "sent exactly once");
    let metrics = r.h.admin("/metrics").await.body;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sealrelay_signed_resolutions_total{result=\"delivered\"} 1")),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("resolutions"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "lost begin reply (CLIENT PAUSE 800 ms, timeout 150 ms): answered 503, delivered once {delivered_after:?} after the pause began, receipt delivered"
    );
}

/// A replica accepts a signed push and is killed (`kill -9`) while its APNs request is in
/// flight, before it records the outcome. The client's retry on another replica is a replay
/// that, once the push's lease has lapsed by Redis's clock, takes the push over and
/// delivers it (the dead replica's admission coalesces nothing away: at least once, under
/// the same `apns-collapse-id`). Before, every replay answered `pending` until a reader
/// settled the target `failed` (`relay_interrupted`) and the page was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_left_by_a_killed_replica_is_taken_over_by_a_replay() {
    let redis = RedisServer::start();
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run").join("admin.sock");
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    vars.retain(|(k, _)| {
        !["RELAY_LISTEN", "RELAY_ADMIN_LISTEN", "RELAY_ADMIN_SOCKET"].contains(&k.as_str())
    });
    let lease_ms = 5_000;
    for (k, v) in [
        ("REDIS_URL", redis.url()),
        ("APNS_ENVIRONMENT", "production".into()),
        ("APNS_REQUEST_TIMEOUT_MS", "2000".into()),
        ("RELAY_RETRY_LEASE_MS", lease_ms.to_string()),
        (
            "RELAY_QUEUE_KEY",
            "signed-faults-test-queue-key-0123456789".into(),
        ),
    ] {
        vars.push((k.into(), v));
    }
    let mut a_vars = vars.clone();
    a_vars.push(("RELAY_ADMIN_SOCKET".into(), socket.display().to_string()));
    let mut a = RelayProcess::spawn(&a_vars);
    let ops = Signer::new("ops");
    let (status, v) = admin_call(
        &socket,
        "PUT",
        &format!("/admin/v1/signers/{}", ops.id),
        Some(serde_json::json!({"publicKey": ops.public(), "topics": [TOPIC]})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let b = RelayProcess::spawn(&vars);

    let d = device(3);
    let body = ops.sign(ops.request(&rid(3), std::slice::from_ref(&d), Clock::System.now_ms()));
    let bytes = serde_json::to_vec(&body).unwrap();
    // A's APNs request hangs; A dies while it is in flight.
    prod.set_delay(Duration::from_secs(30));
    let post = {
        let (url, bytes) = (format!("{}v2/pushes", a.url()), bytes.clone());
        tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            let req = hyper::Request::post(url)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(bytes)))
                .unwrap();
            // Killed before it answers: the connection just ends.
            client.request(req).await.map(|r| r.status())
        })
    };
    wait_until("A's APNs request", Duration::from_secs(10), || {
        prod.started() >= 1
    })
    .await;
    a.kill9();
    let killed = Instant::now();
    let _ = post.await;
    prod.set_delay(Duration::ZERO);
    assert_eq!(prod.delivered(), 0, "A never got its answer");

    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let url = format!("{}v2/pushes", b.url());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut pending_replays = 0;
    let receipt: Value = loop {
        let resp = request(&client, "POST", &url, bytes.clone()).await;
        assert_eq!(resp.status, 200, "{}", resp.body);
        let v = resp.json();
        match v["targets"][hash16(&d)]["state"].as_str() {
            Some("accepted") => pending_replays += 1,
            _ => break v,
        }
        assert!(Instant::now() < deadline, "never taken over: {v}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let took = killed.elapsed();
    assert_eq!(
        receipt["targets"][hash16(&d)]["state"],
        "delivered",
        "{receipt}"
    );
    assert_eq!(receipt["state"], "settled");
    assert!(
        pending_replays > 0,
        "a replay within the lease sends nothing"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(prod.delivered(), 1, "delivered once");
    assert_eq!(prod.started(), 2, "A's lost attempt and B's");
    println!(
        "kill -9 between accept and record: {pending_replays} replays answered pending within the lease, taken over and delivered {took:?} after the kill (lease {lease_ms} ms)"
    );
}

/// A queued target is delivered by the retry worker while Redis refuses its scripts (an ACL
/// change stands in for a store that fails without running the command, as a reset
/// connection does), so the report of its settlement fails. The report is tried again until
/// the store takes it: the receipt ends `delivered`, not `queued` for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_targets_failed_report_is_retried() {
    let redis = RedisServer::start();
    let r = SignedRelay::start(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_REDIS_FAILURE", "reject"),
    )
    .await;
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let d = device(4);
    r.h.prod.reply_times(&d, Reply::new(503, None), 1);
    let resp = r
        .push(&ops.sign(ops.request(&rid(4), std::slice::from_ref(&d), Clock::System.now_ms())))
        .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(resp.json()["targets"][hash16(&d)]["state"], "queued");
    // The retry's APNs answer is held; Redis refuses scripts while it is in flight.
    r.h.prod.set_delay(Duration::from_millis(300));
    wait_until("the retry attempt", Duration::from_secs(15), || {
        r.h.prod.started() >= 2
    })
    .await;
    redis.cli(&["ACL", "SETUSER", "default", "-evalsha", "-eval"]);
    wait_until("the retry's answer", Duration::from_secs(10), || {
        r.h.prod.delivered() >= 1
    })
    .await;
    r.h.prod.set_delay(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let path = format!("/v2/pushes/{}", rid(4));
    redis.cli(&["ACL", "SETUSER", "default", "+@all"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let read = loop {
        let resp = r.read(&ops, &path, Clock::System.now_ms()).await;
        if resp.status == 200 && resp.json()["state"] == "settled" {
            break resp.json();
        }
        assert!(
            Instant::now() < deadline,
            "the receipt never settled: {}",
            resp.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(read["targets"][hash16(&d)]["state"], "delivered", "{read}");
    assert_eq!(r.h.prod.delivered(), 1);
}

fn resolutions(metrics: &str, result: &str) -> u64 {
    let prefix = format!("sealrelay_signed_resolutions_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

/// Background settlements are bounded: with `RELAY_SIGNED_MAX_SETTLEMENTS=1`, four pushes
/// whose receipt begins time out during one Redis stall (`CLIENT PAUSE`) all answer 503;
/// the replica settles one in the background and leaves the others to their clients'
/// replays (counted `left`); a replay of a left push, once its lease lapsed, takes it over
/// and it is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_settlements_are_capped_and_the_rest_left_to_replays() {
    let redis = RedisServer::start();
    let r = std::sync::Arc::new(
        SignedRelay::start(
            Options::default()
                .var("REDIS_URL", &redis.url())
                .var("RELAY_REDIS_TIMEOUT_MS", "150")
                .var("RELAY_RETRY_LEASE_MS", "2000")
                .var("APNS_REQUEST_TIMEOUT_MS", "900")
                .var("RELAY_SIGNED_MAX_SETTLEMENTS", "1"),
        )
        .await,
    );
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let mut n = 1u64;
    let bodies = loop {
        assert!(n < 60, "the stall never hit the receipts' creation");
        // Warm the signer cache so the stalled calls are the receipts'.
        let warm = ops.sign(ops.request(&rid(n), &[device(n as u32)], Clock::System.now_ms()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !matches!(r.push(&warm).await.status, 200 | 201) {
            assert!(
                Instant::now() < deadline,
                "the warm-up push never went through"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let now = Clock::System.now_ms();
        let bodies: Vec<Value> = (1..=4)
            .map(|k| ops.sign(ops.request(&rid(n + k), &[device((n + k) as u32)], now)))
            .collect();
        // A settlement an earlier attempt started (its stall hit something else too) may
        // still hold the one place: wait until every one started has ended.
        let deadline = Instant::now() + Duration::from_secs(20);
        let before = loop {
            let m = r.h.admin("/metrics").await.body;
            let ended: u64 = ["delivered", "settled", "abandoned"]
                .iter()
                .map(|k| resolutions(&m, k))
                .sum();
            if ended >= resolutions(&m, "started") {
                break m;
            }
            assert!(
                Instant::now() < deadline,
                "an earlier settlement never ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        redis.cli(&["CLIENT", "PAUSE", "800", "WRITE"]);
        let tasks: Vec<_> = bodies
            .iter()
            .cloned()
            .map(|b| {
                let r = r.clone();
                tokio::spawn(async move { r.push(&b).await })
            })
            .collect();
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap().status);
        }
        let after = r.h.admin("/metrics").await.body;
        let started = resolutions(&after, "started") - resolutions(&before, "started");
        let left = resolutions(&after, "left") - resolutions(&before, "left");
        n += 5;
        if statuses.iter().all(|&s| s == 503) && started + left == 4 {
            assert_eq!(started, 1, "one place, one settlement: {statuses:?}");
            assert_eq!(left, 3);
            break bodies;
        }
        // The stall hit something else (a signer read): wait out the pause and try again.
        tokio::time::sleep(Duration::from_millis(900)).await;
    };
    // Every push is delivered once: one by the settlement, the others by their replays
    // (which take over the lapsed lease).
    let deadline = Instant::now() + Duration::from_secs(20);
    for b in &bodies {
        loop {
            let again = r.push(b).await;
            if again.status == 200 && again.json()["state"] == "settled" {
                break;
            }
            assert!(Instant::now() < deadline, "{} {}", again.status, again.body);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for k in 1..=4u64 {
        let d = device((n - 5 + k) as u32);
        assert_eq!(r.h.prod.received_for(&d).len(), 1, "target {k} sent once");
    }
}

/// The sum of `sealrelay_store_errors_total{op="<op>"}` in a metrics page.
fn store_errors(metrics: &str, op: &str) -> u64 {
    let prefix = format!("sealrelay_store_errors_total{{op=\"{op}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

/// The record of a push's outcome whose reply is lost (`CLIENT PAUSE ... WRITE` from just
/// before APNs answers until after the relay gave up on the record, with
/// `RELAY_REDIS_TIMEOUT_MS=150`): the record ran all the same when the pause ended, and the
/// background retry of it changes nothing more. APNs gets the push once, the request
/// answers 201 with the target `delivered`, and the stored receipt holds one `target`
/// event for it and one `settled` event, not two of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_outcome_record_is_recorded_once() {
    let redis = RedisServer::start();
    let r = std::sync::Arc::new(
        SignedRelay::start(
            Options::default()
                .var("REDIS_URL", &redis.url())
                .var("RELAY_REDIS_TIMEOUT_MS", "150"),
        )
        .await,
    );
    let ops = Signer::new("ops");
    r.enroll(&ops, &[TOPIC]).await;
    let mut n = 1;
    let (d, id) = loop {
        // Up to 30 attempts: on a loaded machine the pause can still catch the retry
        // worker's poll in time to degrade the replica, or start after the record went
        // through.
        assert!(n < 60, "the stall never covered the outcome's record alone");
        // A first push caches the signer and loads every script of the path.
        let warm = ops.sign(ops.request(&rid(n), &[device(n as u32)], Clock::System.now_ms()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !matches!(r.push(&warm).await.status, 200 | 201) {
            assert!(
                Instant::now() < deadline,
                "the warm-up push never went through"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let d = device(n as u32 + 1);
        let body = ops.sign(ops.request(
            &rid(n + 1),
            std::slice::from_ref(&d),
            Clock::System.now_ms(),
        ));
        let before = r.h.admin("/metrics").await.body;
        // APNs holds its answer 400 ms; the pause begins 300 ms after it has the request
        // (the receipt and the admission are written by then) and lasts past the record and
        // its one immediate retry. Not at once: a background call the pause catches (the
        // retry worker polls every 100 ms) times out after 150 ms and degrades the replica,
        // and a degraded replica does not send the record at all; begun 100 ms before the
        // answer, such a timeout comes after the record is sent.
        r.h.prod.set_delay(Duration::from_millis(400));
        let started = r.h.prod.started();
        let post = {
            let (r, body) = (r.clone(), body.clone());
            tokio::spawn(async move { r.push(&body).await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while r.h.prod.started() <= started {
            assert!(Instant::now() < deadline, "the APNs request never started");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        redis.cli(&["CLIENT", "PAUSE", "1200", "WRITE"]);
        let answer = post.await.unwrap();
        r.h.prod.set_delay(Duration::ZERO);
        let after = r.h.admin("/metrics").await.body;
        let lost = store_errors(&after, "receipt_update") - store_errors(&before, "receipt_update");
        let other = store_errors(&after, "admit") - store_errors(&before, "admit");
        n += 2;
        if answer.status == 201 && lost >= 1 && other == 0 {
            let v = answer.json();
            assert_eq!(v["targets"][hash16(&d)]["state"], "delivered", "{v}");
            break (d, rid(n - 1));
        }
        // The pause caught something else (a signer read on a slow machine): again.
        tokio::time::sleep(Duration::from_millis(1300)).await;
    };
    // The background retry records the outcome again once the store answers: the stored
    // receipt then has the target delivered, one event of each kind.
    let path = format!("/v2/pushes/{id}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let read = loop {
        let v = r.read(&ops, &path, Clock::System.now_ms()).await;
        if v.status == 200 && v.json()["state"] == "settled" {
            break v.json();
        }
        assert!(Instant::now() < deadline, "{} {}", v.status, v.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(read["targets"][hash16(&d)]["state"], "delivered", "{read}");
    // The resolution ran (nothing left to deliver) before the events are counted.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let m = r.h.admin("/metrics").await.body;
        if m.lines().any(|l| {
            l.starts_with("sealrelay_signed_resolutions_total{result=\"settled\"}")
                && !l.ends_with(" 0")
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the background record never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = redis.cli(&["LRANGE", &format!("sealrelay:{{r:{id}}}:ev"), "0", "-1"]);
    let kinds: Vec<&str> = events.lines().filter_map(|e| e.split('|').nth(1)).collect();
    assert_eq!(kinds, ["accepted", "target", "settled"], "{events}");
    assert_eq!(r.h.prod.received_for(&d).len(), 1, "sent exactly once");
    println!(
        "lost outcome record (CLIENT PAUSE 1200 ms WRITE, timeout 150 ms): recorded once, sent once; stall {} of at most 30",
        (n - 1) / 2
    );
}

/// A signer revocation and an enrolment whose replies are lost (`CLIENT PAUSE 800 WRITE`,
/// `RELAY_REDIS_TIMEOUT_MS=150`) are answered 503 and ran all the same: within a second of
/// the pause's end the revoked signer's pushes are refused and the new signer's taken,
/// with nobody asking again. Asking again is safe: the revocation keeps its first time, the
/// enrolment answers 200 (updated) with its first creation time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signer_writes_whose_replies_are_lost_took_effect() {
    let redis = RedisServer::start();
    let r = SignedRelay::start(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_REDIS_TIMEOUT_MS", "150"),
    )
    .await;
    let ops = Signer::new("ops");
    let late = Signer::new("late");
    // Both scripts loaded first: an enrolment, and a revocation of a signer enrolled for it.
    let spare = Signer::new("spare");
    r.enroll(&ops, &[TOPIC]).await;
    r.enroll(&spare, &[TOPIC]).await;
    let (status, v) = r
        .admin_call(
            "POST",
            &format!("/admin/v1/signers/{}/revoke", spare.id),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let mut n = 1u64;
    let pushes = |s: &Signer, n: u64| {
        s.sign(s.request(&rid(n), &[device(n as u32)], Clock::System.now_ms()))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.push(&pushes(&ops, n)).await.status != 201 {
        assert!(Instant::now() < deadline, "ops never pushed");
        n += 1;
    }

    // The revocation's reply is lost.
    let asked = Clock::System.now_ms();
    redis.cli(&["CLIENT", "PAUSE", "800", "WRITE"]);
    let paused = Instant::now();
    let (status, v) = r
        .admin_call(
            "POST",
            &format!("/admin/v1/signers/{}/revoke", ops.id),
            None,
        )
        .await;
    assert_eq!(status, 503, "{v}");
    // The enrolment's too (the pause is still on: 150 ms per call).
    let (status, v) = r
        .admin_call(
            "PUT",
            &format!("/admin/v1/signers/{}", late.id),
            Some(serde_json::json!({"publicKey": late.public(), "topics": [TOPIC]})),
        )
        .await;
    assert_eq!(status, 503, "{v}");
    assert!(
        paused.elapsed() < Duration::from_millis(800),
        "both asked during the pause"
    );
    let ended = paused + Duration::from_millis(800);
    // Nobody asks again: within a second of the pause's end, both took effect.
    let (mut refused, mut taken) = (None, None);
    while refused.is_none() || taken.is_none() {
        assert!(
            Instant::now() < ended + Duration::from_secs(1),
            "a lost write had not taken effect a second after the pause: revoked {refused:?}, enrolled {taken:?}"
        );
        n += 1;
        if refused.is_none() {
            let resp = r.push(&pushes(&ops, n)).await;
            if resp.status == 403 {
                assert_error(&resp, 403, "revoked_signer");
                refused = Some(Instant::now().saturating_duration_since(ended));
            }
        }
        n += 1;
        if taken.is_none() && r.push(&pushes(&late, n)).await.status == 201 {
            taken = Some(Instant::now().saturating_duration_since(ended));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Asked again: the same revocation, the same enrolment.
    let (status, v) = r
        .admin_call(
            "POST",
            &format!("/admin/v1/signers/{}/revoke", ops.id),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let at = v["revokedAtMs"].as_i64().unwrap();
    assert!(
        at >= asked && at < asked + 800,
        "the first revocation's time: {v}"
    );
    let (status, v) = r
        .admin_call(
            "PUT",
            &format!("/admin/v1/signers/{}", late.id),
            Some(serde_json::json!({"publicKey": late.public(), "topics": [TOPIC]})),
        )
        .await;
    assert_eq!(status, 200, "updated, not created again: {v}");
    println!(
        "lost signer writes (CLIENT PAUSE 800 ms WRITE, timeout 150 ms): revocation effective {refused:?} after the pause, enrolment {taken:?}"
    );
}
