//! The relay on Redis over HTTP: one Redis call per forwarded request, and clear 503s
//! (never a hang) while Redis is unreachable.

use std::time::{Duration, Instant};

use crate::common::*;

async fn wait_ready(h: &Harness) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.admin("/readyz").await.status != 200 {
        assert!(Instant::now() < deadline, "relay never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redis_call_per_forwarded_request() {
    let redis = RedisServer::start();
    let h = Harness::with(Options::default().var("REDIS_URL", &redis.url())).await;
    wait_ready(&h).await;
    // Warm up: the first call loads the script.
    assert_eq!(
        h.post(&envelope(&device(9999), &id(9999))).await.status,
        202
    );
    // And the background work has run once, so its scripts are loaded.
    background_scripts_loaded(&redis).await;
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let n = 50u64;
    for i in 0..n as u32 {
        let r = h.post(&envelope(&device(i), &id(i))).await;
        assert_eq!(r.body, r#"{"v":1,"outcome":"forwarded"}"#);
    }
    let calls = redis.command_calls();
    // The retry worker polls the queue in the background: each poll is one EVALSHA of
    // claim.lua, which runs exactly one ZRANGEBYSCORE, and the queue gauges read each shard
    // with one EVALSHA of queue_stats.lua, which runs exactly one ZCARD. What is left is the
    // requests' own.
    let evalsha = calls.get("evalsha").copied().unwrap_or(0);
    let polls =
        calls.get("zrangebyscore").copied().unwrap_or(0) + calls.get("zcard").copied().unwrap_or(0);
    assert_eq!(evalsha - polls, n, "{calls:?}");
    for forbidden in [
        "eval",
        "script|load",
        "set",
        "multi",
        "exec",
        "hget",
        "zadd",
        "zrem",
        "evalsha_ro",
    ] {
        assert!(!calls.contains_key(forbidden), "{forbidden}: {calls:?}");
    }
    assert_eq!(h.prod.delivered() as u64, n + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_mode_answers_503_within_the_timeout() {
    // A port that is ours: a server started there, stopped before the relay starts.
    let mut redis = RedisServer::start();
    redis.stop();
    let h = Harness::with(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_REDIS_TIMEOUT_MS", "200")
            .var("RELAY_REDIS_FAILURE", "reject"),
    )
    .await;
    // Not reachable at start-up: not ready, and requests fail fast with 503.
    let r = h.admin("/readyz").await;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("policy store"), "{}", r.body);
    let started = Instant::now();
    let r = h.post(&envelope(&device(1), &id(1))).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (503, r#"{"v":1,"error":"relay state unavailable"}"#)
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(h.prod.received().is_empty());

    // Redis comes up: the relay connects by itself and serves.
    redis.restart();
    wait_ready(&h).await;
    assert_eq!(h.post(&envelope(&device(1), &id(1))).await.status, 202);

    // Redis dies under the relay: 503 within the timeout, never a hang.
    redis.stop();
    let started = Instant::now();
    let r = h.post(&envelope(&device(2), &id(2))).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );

    // And back: the scripts are reloaded transparently into the new, empty server.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = h.post(&envelope(&device(3), &id(3))).await;
        if r.status == 202 {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With `RELAY_REDIS_FAILURE=reject`, an admission whose reply is lost (`CLIENT PAUSE ...
/// WRITE` while it is sent, `RELAY_REDIS_TIMEOUT_MS=150`) is answered 503 and Redis runs it
/// when the pause ends, recording a forward that was never sent. The daemon sends the same
/// alert again, as the 503 asks: it is forwarded, not coalesced away as that forward's
/// duplicate, whether the retry reaches another replica a second later (the first replica
/// has rolled the record back in the background) or the same replica at once (it rolls it
/// back before admitting). Before, both retries answered `coalesced` and nothing was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_admission_reply_is_forwarded() {
    let redis = RedisServer::start();
    let replica = || {
        Harness::with(
            Options::default()
                .var("REDIS_URL", &redis.url())
                .var("RELAY_REDIS_TIMEOUT_MS", "150")
                .var("RELAY_REDIS_FAILURE", "reject"),
        )
    };
    let (h, other) = (replica().await, replica().await);
    wait_ready(&h).await;
    wait_ready(&other).await;
    // Warm up: the first call loads the script.
    for r in [&h, &other] {
        assert_eq!(
            r.post(&envelope(&device(9999), &id(9999))).await.status,
            202
        );
    }
    let (a, b) = (envelope(&device(1), &id(1)), envelope(&device(2), &id(2)));
    redis.cli(&["CLIENT", "PAUSE", "800", "WRITE"]);
    let paused = Instant::now();
    for alert in [&a, &b] {
        let r = h.post(alert).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (503, r#"{"v":1,"error":"relay state unavailable"}"#)
        );
    }
    assert!(
        paused.elapsed() < Duration::from_millis(800),
        "answered during the pause"
    );
    // The same replica, as soon as Redis answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        let r = h.post(&b).await;
        if r.status == 202 {
            break r;
        }
        assert!(Instant::now() < deadline, "never answered: {}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(again.body, r#"{"v":1,"outcome":"forwarded"}"#);
    // Another replica, after Retry-After.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = other.post(&a).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (202, r#"{"v":1,"outcome":"forwarded"}"#)
    );
    assert_eq!(h.prod.received_for(&device(2)).len(), 1);
    assert_eq!(other.prod.received_for(&device(1)).len(), 1);
    assert!(h.prod.received_for(&device(1)).is_empty());
}
