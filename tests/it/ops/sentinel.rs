//! Redis Sentinel, for real: a primary, a replica and three sentinels (quorum 2) on
//! loopback, the relay on a `redis-sentinel://` URL naming only the sentinels, and a
//! `SENTINEL FAILOVER` in the middle of continuous v1 traffic. Every alert answered 202
//! reaches the mock APNs, every other answer is 503, and afterwards the relay writes to the
//! promoted replica.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use sealrelay_testkit::sentinel::SentinelSet;

const PREFIX: &str = "sen:";

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

fn evalsha_calls(set: &SentinelSet, server: usize) -> u64 {
    set.servers[server]
        .command_calls()
        .get("evalsha")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_failover_during_traffic_loses_no_accepted_alert() {
    failover_during_traffic("degrade").await;
}

/// The same with `RELAY_REDIS_FAILURE=reject`: answers during the switch are 503, never a
/// lost 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_failover_in_reject_mode_answers_503_and_loses_nothing() {
    failover_during_traffic("reject").await;
}

async fn failover_during_traffic(mode: &str) {
    let started = Instant::now();
    let set = Arc::new(blocking(|| SentinelSet::start(3, 2)).await);
    let (old, new) = (0usize, 1usize);
    assert_eq!(set.primary(), old);
    println!("sentinels converged after {:?}", started.elapsed());

    let h = Arc::new(
        Harness::with(
            Options::default()
                .var("REDIS_URL", &set.url())
                .var("RELAY_REDIS_PREFIX", PREFIX)
                .var("RELAY_REDIS_FAILURE", mode)
                .var("RELAY_REDIS_TIMEOUT_MS", "500")
                .var("APNS_ENVIRONMENT", "production")
                // One test client stands in for many daemons here.
                .var("RELAY_IP_RATE_CAPACITY", "0"),
        )
        .await,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !h.relay.store_ready() {
        assert!(Instant::now() < deadline, "the relay never reached Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One alert before the failover: it is on the old primary, found through the sentinels.
    assert_eq!(h.post(&envelope(&device(1), &id(1))).await.status, 202);
    assert!(evalsha_calls(&set, old) > 0);

    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4u32 {
        let h = h.clone();
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let mut out: Vec<(String, u16, String, Duration)> = Vec::new();
            let t0 = Instant::now();
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) && i < 3000 {
                let d = device(10_000 + w * 100_000 + i);
                // Every fourth alert meets a transient APNs failure on its first attempt,
                // so it is queued (in Redis) and delivered by the retry worker.
                if i.is_multiple_of(4) {
                    h.prod
                        .reply_times(&d, Reply::new(503, Some("ServiceUnavailable")), 1);
                }
                let at = t0.elapsed();
                let r = h.post(&envelope(&d, &id(i))).await;
                out.push((d, r.status, r.body, at));
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            out
        }));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // How long the relay spends off Redis (degraded), sampled every 10 ms from here on.
    let sampler = {
        let h = h.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut off = 0u32;
            while !stop.load(Ordering::SeqCst) {
                if h.relay.degraded() {
                    off += 1;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Duration::from_millis(10 * off as u64)
        })
    };
    let before = evalsha_calls(&set, new);
    let failover_at = Instant::now();
    {
        let set = set.clone();
        blocking(move || set.failover()).await;
    }
    let switched = {
        let set = set.clone();
        blocking(move || set.wait_primary(new, Duration::from_secs(20))).await
    };
    println!("sentinels name the new primary {switched:?} after SENTINEL FAILOVER");
    // The relay writes to the promoted replica.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut relay_on_new = None;
    let mut old_demoted = None;
    while relay_on_new.is_none() || old_demoted.is_none() {
        if relay_on_new.is_none() && evalsha_calls(&set, new) > before {
            relay_on_new = Some(failover_at.elapsed());
            println!(
                "relay on the new primary {:?} after the failover",
                failover_at.elapsed()
            );
        }
        if old_demoted.is_none() && set.role(old) == "slave" {
            old_demoted = Some(failover_at.elapsed());
            println!(
                "old primary demoted {:?} after the failover",
                failover_at.elapsed()
            );
        }
        assert!(
            Instant::now() < deadline,
            "relay_on_new {relay_on_new:?} old_demoted {old_demoted:?}; degraded {}",
            h.relay.degraded()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::SeqCst);
    let degraded_for = sampler.await.unwrap();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let mut statuses: HashMap<u16, u32> = HashMap::new();
    let mut outcomes: HashMap<String, u32> = HashMap::new();
    for (_, s, b, _) in &all {
        *statuses.entry(*s).or_default() += 1;
        *outcomes.entry(b.clone()).or_default() += 1;
    }
    println!("{mode}: statuses {statuses:?} outcomes {outcomes:?}");
    // Every answer is 202 (forwarded or queued: distinct devices, nothing coalesces) or 503.
    for (d, s, b, at) in &all {
        match s {
            202 => assert!(
                b == r#"{"v":1,"outcome":"forwarded"}"# || b == r#"{"v":1,"outcome":"queued"}"#,
                "{d} at {at:?}: {b}"
            ),
            503 => assert_ne!(mode, "degrade", "{d} at {at:?}: 503 {b} in degrade mode"),
            // In reject mode an alert whose first APNs attempt failed (the mock's scripted
            // 503) cannot be queued while Redis is switching: the relay passes the APNs
            // error on, unaccepted (two faults at once; the sender retries).
            502 if mode == "reject" && b.contains(r#""apnsStatus":503"#) => {}
            _ => panic!("{d} at {at:?}: {s} {b}"),
        }
    }
    // Traffic ran before, during and after the switch.
    let last_at = all.iter().map(|(_, _, _, at)| *at).max().unwrap();
    assert!(last_at > Duration::from_secs(3), "{last_at:?}");
    let accepted: Vec<&String> = all
        .iter()
        .filter(|(_, s, _, _)| *s == 202)
        .map(|(d, _, _, _)| d)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let missing = loop {
        let delivered: HashSet<String> = h
            .prod
            .received()
            .into_iter()
            .filter(|r| r.status == 200)
            .map(|r| r.token)
            .collect();
        let missing: Vec<&String> = accepted
            .iter()
            .copied()
            .filter(|d| !delivered.contains(*d))
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (d, s, b, at) in &all {
        if missing.contains(&d) {
            println!("missing {d} {s} {b} at {at:?}");
        }
    }
    println!(
        "{mode}: sent {}, accepted {}, delivered {}, missing {}; the sentinels switched {switched:?} after SENTINEL FAILOVER, the relay wrote to the new primary {:?} after it (degraded about {degraded_for:?}), the old primary was demoted {:?} after it; whole test {:?}",
        all.len(),
        accepted.len(),
        accepted.len() - missing.len(),
        missing.len(),
        relay_on_new.unwrap(),
        old_demoted.unwrap(),
        started.elapsed()
    );
    assert!(
        missing.is_empty(),
        "{} accepted alerts never reached APNs",
        missing.len()
    );
    // The roles swapped, and the relay writes to the promoted replica: a new device's key
    // is there, written by a script run on it.
    assert_eq!(set.role(new), "master");
    assert_eq!(set.role(old), "slave");
    let calls = evalsha_calls(&set, new);
    let d = device(999_999);
    assert_eq!(h.post(&envelope(&d, &id(1))).await.status, 202);
    assert!(evalsha_calls(&set, new) > calls);
    let keys = set.servers[new].cli(&["--scan", "--pattern", &format!("{PREFIX}*")]);
    assert!(
        keys.lines().count() > 100,
        "{} keys on the new primary",
        keys.lines().count()
    );
    assert!(!h.relay.degraded());
}
