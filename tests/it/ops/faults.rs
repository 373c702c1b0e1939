//! Fault tests: APNs down for a while, a replica killed mid-attempt, Redis stopped under
//! load, hostile and slow clients, overload. Each is bounded in time and stays on loopback;
//! each prints the figures it measured.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::process::RelayProcess;

use crate::common::*;
use sealrelay::clock::Clock;

async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// APNs answers 503 for a while, then recovers: every accepted alert reaches APNs exactly
/// once, with the same apns-id and apns-expiration on every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apns_outage_then_recovery_delivers_every_alert_once() {
    let h = Harness::with(Options::default().var("APNS_ENVIRONMENT", "production")).await;
    h.prod
        .reply_default(Some(Reply::new(503, Some("ServiceUnavailable"))));
    let n = 30u32;
    for i in 0..n {
        let r = h.post(&envelope(&device(i), &id(i))).await;
        assert_eq!(r.body, r#"{"v":1,"outcome":"queued"}"#);
        // A duplicate from another cluster node while queued: coalesced, not queued twice.
        assert_eq!(
            h.post(&envelope(&device(i), &id(i))).await.body,
            r#"{"v":1,"outcome":"coalesced"}"#
        );
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    h.prod.reply_default(None);
    let started = Instant::now();
    wait_until("every alert delivered", Duration::from_secs(30), || {
        h.prod.delivered() == n as usize
    })
    .await;
    let recovery = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut per_token: HashMap<String, Vec<_>> = HashMap::new();
    for r in h.prod.received() {
        per_token.entry(r.token.clone()).or_default().push(r);
    }
    assert_eq!(per_token.len(), n as usize);
    let mut attempts = 0;
    for (token, reqs) in &per_token {
        assert_eq!(
            reqs.iter().filter(|r| r.status == 200).count(),
            1,
            "{token}: delivered once"
        );
        assert_eq!(reqs.last().unwrap().status, 200);
        let ids: std::collections::HashSet<_> = reqs
            .iter()
            .map(|r| r.header("apns-id").to_owned())
            .collect();
        let exps: std::collections::HashSet<_> = reqs
            .iter()
            .map(|r| r.header("apns-expiration").to_owned())
            .collect();
        assert_eq!(
            (ids.len(), exps.len()),
            (1, 1),
            "same apns-id and expiration on every attempt"
        );
        attempts += reqs.len();
    }
    println!("APNs outage: accepted {n}, delivered {} exactly once each, {attempts} attempts, all delivered {:?} after recovery", h.prod.delivered(), recovery);
}

/// An item whose staleness window closes is never delivered late: it is counted as
/// expired and its forward record rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_items_expire_after_the_staleness_window() {
    let clock = Clock::manual(T0);
    let h = Harness::with(
        Options::default()
            .clock(clock.clone())
            .var("APNS_ENVIRONMENT", "production"),
    )
    .await;
    h.prod.reply_default(Some(Reply::new(503, None)));
    let e = envelope(&device(1), &id(1));
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"queued"}"#);
    clock.advance_ms(300_000);
    assert_eq!(
        h.post(&e).await.body,
        r#"{"v":1,"outcome":"coalesced"}"#,
        "held while queued"
    );
    // Past the window (acceptance + 600 s): the worker gives up.
    clock.advance_ms(301_000);
    h.prod.reply_default(None);
    wait_until("expiry counted", Duration::from_secs(10), || {
        expired_counted(&h)
    })
    .await;
    assert_eq!(h.prod.delivered(), 0, "never delivered late");
    // Rolled back: the alert is eligible again.
    assert_eq!(h.post(&e).await.body, r#"{"v":1,"outcome":"forwarded"}"#);
}

fn expired_counted(h: &Harness) -> bool {
    let addr = h.relay.admin_addr;
    let body = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .join()
    .unwrap();
    body.contains(r#"sealrelay_retry_attempts_total{result="expired"} 1"#)
}

/// `kill -9` of the replica holding a leased item: another replica delivers it once the
/// lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_leased_item_is_delivered_by_another() {
    let redis = RedisServer::start();
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    vars.retain(|(k, _)| k != "RELAY_LISTEN" && k != "RELAY_ADMIN_LISTEN");
    for (k, v) in [
        ("REDIS_URL", redis.url()),
        ("APNS_ENVIRONMENT", "production".into()),
        ("APNS_REQUEST_TIMEOUT_MS", "1000".into()),
        ("RELAY_RETRY_LEASE_MS", "2500".into()),
    ] {
        vars.push((k.into(), v));
    }
    let d = device(1);
    // First attempt fails; the retry hangs (the mock answers after 30 s), so the replica
    // holding the lease is mid-attempt when it dies.
    prod.reply_times(&d, Reply::new(503, None), 1);
    let mut a = RelayProcess::spawn(&vars);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let r = request(
        &client,
        "POST",
        &a.url(),
        serde_json::to_vec(&envelope(&d, &id(1))).unwrap(),
    )
    .await;
    assert_eq!(r.body, r#"{"v":1,"outcome":"queued"}"#);
    prod.set_delay(Duration::from_secs(30));
    wait_until(
        "the retry attempt to start",
        Duration::from_secs(10),
        || prod.started() >= 2,
    )
    .await;
    a.kill9();
    let killed = Instant::now();
    prod.set_delay(Duration::ZERO);
    let b = RelayProcess::spawn(&vars);
    wait_until(
        "another replica to deliver",
        Duration::from_secs(20),
        || prod.delivered() >= 1,
    )
    .await;
    println!("kill -9 mid-attempt: accepted 1, delivered {} by the surviving replica {:?} after the kill", prod.delivered(), killed.elapsed());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(prod.delivered(), 1);
    drop(b);
}

/// Redis stopped under load in degrade mode: no 5xx, decisions continue, and shared state
/// resumes after Redis restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_under_load_degrades_without_5xx() {
    let redis = Arc::new(std::sync::Mutex::new(RedisServer::start()));
    let url = redis.lock().unwrap().url();
    let h = Arc::new(
        Harness::with(
            Options::default()
                .var("REDIS_URL", &url)
                .var("RELAY_REDIS_TIMEOUT_MS", "200")
                // One test client stands in for many daemons here.
                .var("RELAY_IP_RATE_CAPACITY", "0"),
        )
        .await,
    );
    wait_until("ready", Duration::from_secs(20), || h.relay.store_ready()).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4u32 {
        let h = h.clone();
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let mut statuses: HashMap<u16, u32> = HashMap::new();
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let r = h.post(&envelope(&device(w * 100_000 + i), &id(i))).await;
                *statuses.entry(r.status).or_default() += 1;
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            statuses
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = Instant::now();
    redis.lock().unwrap().stop();
    wait_until("degraded", Duration::from_secs(5), || h.relay.degraded()).await;
    let to_degraded = stopped.elapsed();
    let r = h.admin("/readyz").await;
    assert_eq!(r.status, 200, "readyz stays 200 while degraded");
    assert!(r.body.contains("degraded"), "{}", r.body);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let restarted = Instant::now();
    redis.lock().unwrap().restart();
    wait_until("recovered", Duration::from_secs(20), || !h.relay.degraded()).await;
    let to_recovered = restarted.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total: HashMap<u16, u32> = HashMap::new();
    for w in workers {
        for (s, c) in w.await.unwrap() {
            *total.entry(s).or_default() += c;
        }
    }
    assert!(
        total.keys().all(|s| *s < 500),
        "no 5xx under a Redis outage: {total:?}"
    );
    // Shared state resumed: a new device lands in Redis again.
    assert_eq!(
        h.post(&envelope(&device(999_999), &id(1))).await.status,
        202
    );
    let keys = redis.lock().unwrap().cli(&["DBSIZE"]);
    assert!(
        keys.trim().parse::<u64>().unwrap() > 0,
        "state written to Redis after recovery"
    );
    println!(
        "Redis outage under load: statuses {total:?}; degraded {to_degraded:?} after the stop, back on Redis {to_recovered:?} after the restart"
    );
}

/// A client trickling its headers is cut off by the header timeout; one that stalls its
/// body gets 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::with(
        Options::default()
            .var("RELAY_HEADER_TIMEOUT_MS", "500")
            .var("RELAY_BODY_TIMEOUT_MS", "500"),
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "connection still open after 5 s");
    let cut = started.elapsed();
    assert!(cut < Duration::from_secs(3), "{cut:?}");

    let mut s = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"v\":")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "connection still open after 5 s");
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    println!("slow-loris: headers cut off after {cut:?}; stalled body answered 408");
}

/// Beyond RELAY_MAX_INFLIGHT requests are shed with 503 and Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_shed_with_503() {
    let h = Arc::new(Harness::with(Options::default().var("RELAY_MAX_INFLIGHT", "2")).await);
    h.prod.set_delay(Duration::from_millis(800));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            h.post(&envelope(&device(i), &id(i))).await
        }));
    }
    let mut shed = 0;
    let mut forwarded = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            202 => forwarded += 1,
            503 => {
                assert_eq!(r.body, r#"{"v":1,"error":"relay overloaded"}"#);
                assert_eq!(r.header("retry-after"), Some("1"));
                shed += 1;
            }
            s => panic!("unexpected {s}: {}", r.body),
        }
    }
    assert_eq!(forwarded, 2);
    assert_eq!(shed, 4);
}

/// A client over its address bucket gets 429; behind a trusted proxy each forwarded client
/// has its own bucket; a daemon's fan-out of 100 devices passes with the defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_address_buckets() {
    let h = Harness::start().await;
    for i in 0..100 {
        assert_eq!(
            h.post(&envelope(&device(i), &id(1))).await.status,
            202,
            "fan-out {i}"
        );
    }

    let h = Harness::with(
        Options::default()
            .var("RELAY_IP_RATE_CAPACITY", "3")
            .var("RELAY_IP_RATE_REFILL_PER_S", "0.1")
            .var("RELAY_TRUSTED_PROXIES", "127.0.0.1/32"),
    )
    .await;
    let post_as = |client: &'static str, n: u32| {
        let body = serde_json::to_vec(&envelope(&device(n), &id(n))).unwrap();
        let addr = h.addr();
        async move {
            let req = format!(
                "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Forwarded-For: {client}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let mut bytes = req.into_bytes();
            bytes.extend_from_slice(&body);
            raw(addr, &bytes).await
        }
    };
    for n in 0..3 {
        assert!(post_as("198.51.100.1", n).await.starts_with("HTTP/1.1 202"));
    }
    let r = post_as("198.51.100.1", 3).await;
    assert!(r.starts_with("HTTP/1.1 429"), "{r}");
    assert!(r.contains("retry-after: 10"), "{r}");
    assert!(
        r.ends_with(r#"{"v":1,"error":"client is rate limited"}"#),
        "{r}"
    );
    // Another client behind the same proxy is not affected.
    assert!(post_as("198.51.100.2", 4).await.starts_with("HTTP/1.1 202"));
}

/// A busy client is limited across replicas by its bucket in Redis: two replicas let it
/// through a quarter of their own bucket each without asking Redis, then one shared bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_clients_bucket_is_shared_in_redis() {
    let redis = RedisServer::start();
    let opts = || {
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_IP_RATE_CAPACITY", "8")
            .var("RELAY_IP_RATE_REFILL_PER_S", "0.01")
    };
    let a = Harness::with(opts()).await;
    let b = Harness::with(opts()).await;
    wait_until("ready", Duration::from_secs(20), || {
        a.relay.store_ready() && b.relay.store_ready()
    })
    .await;
    let mut accepted = 0;
    let mut limited = 0;
    for i in 0..20u32 {
        let h = if i % 2 == 0 { &a } else { &b };
        let r = h.post(&envelope(&device(i), &id(i))).await;
        match r.status {
            202 => accepted += 1,
            429 => {
                assert_eq!(r.body, r#"{"v":1,"error":"client is rate limited"}"#);
                limited += 1;
            }
            s => panic!("{s}: {}", r.body),
        }
    }
    // 2 free per replica + 8 from the shared bucket; replica-local buckets alone would
    // have let 16 through.
    assert_eq!((accepted, limited), (12, 8));
    let keys = redis.cli(&["--scan", "--pattern", "sealrelay:{c:*"]);
    let key = keys.lines().next().expect("a shared client bucket");
    assert!(!key.contains("127.0.0.1"), "no address in the key");
    let pttl: i64 = redis.cli(&["PTTL", key]).trim().parse().unwrap();
    assert!(pttl > 0);
}

fn gauge(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .map(|v| v.trim().parse().unwrap())
}

/// The shared queue's depth is reported with `scope="shared"` by every replica alike (so a
/// dashboard takes the max, never the sum), with the oldest item's age; when Redis fails,
/// the gauge keeps its last value instead of reporting an empty queue, and the items this
/// replica queues meanwhile show under `scope="local"`. Two relay processes, so each has its
/// own metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_queue_gauge_is_not_multiplied_nor_zeroed_by_a_redis_error() {
    let mut redis = RedisServer::start();
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    // APNs fails transiently for everyone: the notification waits in the shared queue.
    prod.reply_default(Some(Reply::new(503, Some("ServiceUnavailable"))));
    sandbox.reply_default(Some(Reply::new(503, Some("ServiceUnavailable"))));
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    vars.retain(|(k, _)| k != "RELAY_LISTEN" && k != "RELAY_ADMIN_LISTEN");
    vars.push(("REDIS_URL".into(), redis.url()));
    vars.push(("RELAY_REDIS_TIMEOUT_MS".into(), "200".into()));
    let a = RelayProcess::spawn(&vars);
    let b = RelayProcess::spawn(&vars);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let scrape = |p: &RelayProcess| {
        let url = format!("http://127.0.0.1:{}/metrics", p.admin);
        let client = client.clone();
        async move { request(&client, "GET", &url, vec![]).await.body }
    };
    let post = |p: &RelayProcess, n: u32| {
        let url = p.url();
        let client = client.clone();
        async move {
            request(
                &client,
                "POST",
                &url,
                serde_json::to_vec(&envelope(&device(n), &id(n))).unwrap(),
            )
            .await
        }
    };
    assert_eq!(post(&a, 1).await.status, 202);
    let shared = r#"sealrelay_retry_queue_depth{scope="shared"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ba, bb) = (scrape(&a).await, scrape(&b).await);
        if gauge(&ba, shared) == Some(1.0) && gauge(&bb, shared) == Some(1.0) {
            let age = gauge(
                &ba,
                r#"sealrelay_retry_queue_oldest_age_seconds{scope="shared"}"#,
            )
            .unwrap();
            assert!((0.0..600.0).contains(&age), "{age}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "both replicas report the one shared item: {:?} {:?}",
            gauge(&ba, shared),
            gauge(&bb, shared)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    redis.stop();
    // A request now degrades A; the next item waits in A's own queue.
    let r = post(&a, 2).await;
    assert_eq!(r.status, 202, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let ba = scrape(&a).await;
    assert_eq!(gauge(&ba, "sealrelay_degraded"), Some(1.0));
    assert_eq!(gauge(&ba, shared), Some(1.0), "kept, not zeroed:\n{ba}");
    assert_eq!(
        gauge(&ba, r#"sealrelay_retry_queue_depth{scope="local"}"#),
        Some(1.0),
        "{ba}"
    );
}
