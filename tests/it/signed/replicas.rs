//! Signed pushes across replicas sharing one Redis (standalone and a real Cluster): a
//! revocation on one replica holds on the other within a second, a replay on another
//! replica sends nothing, and an event stream on one replica sees the events the other
//! produces (the retry queue settling a queued target); a live Cluster reshard under signed
//! traffic costs no error.

use std::time::{Duration, Instant};

use crate::common::signed::*;
use crate::common::*;
use sealrelay::clock::Clock;
use serde_json::json;

/// Two replicas of one deployment: one Redis, one queue key (each test relay has an APNs
/// key of its own, which would otherwise seal the shared queue differently).
async fn two(url: &str) -> (SignedRelay, SignedRelay) {
    let opts = || {
        Options::default().var("REDIS_URL", url).var(
            "RELAY_QUEUE_KEY",
            "signed-replicas-test-queue-key-0123456789",
        )
    };
    let a = SignedRelay::start(opts()).await;
    let b = SignedRelay::start(opts()).await;
    for r in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while r.h.admin("/readyz").await.status != 200 {
            assert!(Instant::now() < deadline, "a replica never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    (a, b)
}

/// Pushes by `ops` to `r` (request ids from `n` on, every `pause_ms`) until one is refused
/// as `revoked_signer`, each taken meanwhile; how long that took from the call, and the next
/// free request number. Fails once `within` has passed.
async fn until_revoked(
    r: &SignedRelay,
    ops: &Signer,
    mut n: u64,
    within: Duration,
    pause_ms: u64,
) -> (Duration, u64) {
    let revoked = Instant::now();
    loop {
        let resp = r
            .push(&ops.sign(ops.request(&rid(n), &[device(n as u32)], Clock::System.now_ms())))
            .await;
        if resp.status == 403 {
            assert_eq!(resp.json()["error"]["code"], "revoked_signer");
            return (revoked.elapsed(), n);
        }
        assert_eq!(resp.status, 201, "{}", resp.body);
        assert!(
            revoked.elapsed() < within,
            "the replica still takes the revoked signer after {within:?}"
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
}

async fn revocation_and_replay(url: &str) {
    let (a, b) = two(url).await;
    let ops = Signer::new("ops");
    a.enroll(&ops, &[TOPIC]).await;
    let now = Clock::System.now_ms();
    // Created on A; replayed on B: the stored receipt, nothing sent by B.
    let body = ops.sign(ops.request(&rid(1), &[device(1)], now));
    let first = a.push(&body).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let again = b.push(&body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json(), first.json());
    assert_eq!(a.h.prod.received().len() + b.h.prod.received().len(), 1);
    // B has the signer cached now; A revokes it.
    assert_eq!(
        b.push(&ops.sign(ops.request(&rid(2), &[device(2)], now)))
            .await
            .status,
        201
    );
    let (status, _) = a
        .admin_call(
            "POST",
            &format!("/admin/v1/signers/{}/revoke", ops.id),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (took, mut n) = until_revoked(&b, &ops, 3, Duration::from_secs(1), 10).await;
    println!("revocation effective on the other replica after {took:?}");
    // And enrolled again on B: A takes it again.
    b.enroll(&ops, &[TOPIC]).await;
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let resp = a
            .push(&ops.sign(ops.request(&rid(1000 + n), &[device(9)], Clock::System.now_ms())))
            .await;
        if resp.status == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "{}", resp.body);
        n += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_holds_on_every_replica_within_a_second() {
    let redis = RedisServer::start();
    revocation_and_replay(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_holds_on_every_replica_within_a_second_on_a_cluster() {
    let cluster = RedisCluster::start();
    revocation_and_replay(&cluster.url()).await;
}

/// Two replicas on `redis`; signer `ops` enrolled on A and cached on B (a push through B at
/// the returned instant took it).
async fn enrolled_on_a_cached_on_b(redis: &RedisServer) -> (SignedRelay, SignedRelay, Signer, i64) {
    let (a, b) = two(&redis.url()).await;
    let ops = Signer::new("ops");
    a.enroll(&ops, &[TOPIC]).await;
    let now = Clock::System.now_ms();
    assert_eq!(
        b.push(&ops.sign(ops.request(&rid(1), &[device(1)], now)))
            .await
            .status,
        201
    );
    (a, b, ops, now)
}

/// A revocation whose pub/sub message never arrives (written straight into the signer's
/// record, as if the PUBLISH had been lost) still holds on a replica that had the signer
/// cached: its cache reads the record again once an entry is 0.9 s old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_whose_message_is_lost_holds_within_a_second() {
    let redis = RedisServer::start();
    let (_a, b, ops, now) = enrolled_on_a_cached_on_b(&redis).await;
    let record = format!("sealrelay:{{signers}}:{}", ops.id);
    assert_eq!(redis.cli(&["HEXISTS", &record, "r"]).trim(), "0");
    redis.cli(&["HSET", &record, "r", &now.to_string()]);
    let (took, _) = until_revoked(&b, &ops, 2, Duration::from_secs(5), 20).await;
    println!("revocation with its message lost: effective on the caching replica after {took:?}");
}

/// A revocation made while every replica's pub/sub connection is cut (`CLIENT KILL TYPE
/// pubsub` just before it, so its message reaches no subscriber) still holds on a replica
/// that had the signer cached, within a second: pub/sub is a hint, the signer's record in
/// the store is the truth (the cache reads it again once an entry is 0.9 s old, and the
/// reconnect resyncs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_during_a_pubsub_cut_holds_within_a_second() {
    let redis = RedisServer::start();
    let (a, b, ops, _now) = enrolled_on_a_cached_on_b(&redis).await;
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let (status, _) = a
        .admin_call(
            "POST",
            &format!("/admin/v1/signers/{}/revoke", ops.id),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (took, _) = until_revoked(&b, &ops, 2, Duration::from_secs(1), 10).await;
    println!("revocation during a pub/sub cut: effective on the caching replica after {took:?}");
}

async fn stream_across(url: &str) {
    let (a, b) = two(url).await;
    let ops = Signer::new("ops");
    a.enroll(&ops, &[TOPIC]).await;
    // A's first attempt fails transiently; the shared retry queue settles it (on either
    // replica's worker; each has its own mock APNs that answers 200).
    a.h.prod.reply_times(&device(5), Reply::new(503, None), 1);
    let resp = a
        .push(&ops.sign(ops.request(&rid(5), &[device(5)], Clock::System.now_ms())))
        .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    let v = resp.json();
    assert_eq!(v["state"], "pending", "{v}");
    let last = v["events"].as_array().unwrap().len() as u64;
    let path = format!("/v2/pushes/{}/events?after={last}", rid(5));
    let auth = ops.read_auth(&path, Clock::System.now_ms());
    let mut s = Stream::open(b.h.addr(), &path, &[("authorization", auth)]).await;
    assert_eq!(s.status, 200);
    let Some(e) = s.next(Duration::from_secs(15)).await else {
        let read = b
            .read(
                &ops,
                &format!("/v2/pushes/{}", rid(5)),
                Clock::System.now_ms(),
            )
            .await;
        panic!(
            "the delivery was not seen on B; the receipt: {}; A sent {:?}, B sent {:?}",
            read.body,
            a.h.prod
                .received_for(&device(5))
                .iter()
                .map(|r| r.status)
                .collect::<Vec<_>>(),
            b.h.prod
                .received_for(&device(5))
                .iter()
                .map(|r| r.status)
                .collect::<Vec<_>>()
        );
    };
    assert_eq!((e.id, e.event.as_str()), (last + 1, "target"));
    assert_eq!(e.data["state"], "delivered");
    let e = s.next(Duration::from_secs(5)).await.expect("settled");
    assert_eq!(e.event, "settled");
    assert!(s.ends(Duration::from_secs(5)).await);
    let delivered =
        a.h.prod
            .received_for(&device(5))
            .iter()
            .filter(|r| r.status == 200)
            .count()
            + b.h
                .prod
                .received_for(&device(5))
                .iter()
                .filter(|r| r.status == 200)
                .count();
    assert_eq!(delivered, 1, "delivered once");
    let read = b
        .read(
            &ops,
            &format!("/v2/pushes/{}", rid(5)),
            Clock::System.now_ms(),
        )
        .await;
    assert_eq!(read.json()["state"], json!("settled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_one_replica_sees_events_from_another() {
    let redis = RedisServer::start();
    stream_across(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_one_replica_sees_events_from_another_on_a_cluster() {
    let cluster = RedisCluster::start();
    stream_across(&cluster.url()).await;
}

/// A live reshard under signed traffic on a real Cluster: every slot holding a key (the
/// signer, devices, receipts, the retry queue's shards) moves to another master, 300 ms
/// half-way each, while replica A takes a push every 30 ms (every third one's first APNs
/// attempt fails, so it goes through the shared retry queue) and replica B reads each
/// receipt. Every push is taken (201) and every read answered (200) with no store error on
/// either replica, and each push is delivered exactly once and its receipt settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_signed_traffic_costs_no_error() {
    let cluster = std::sync::Arc::new(RedisCluster::start());
    let (a, b) = two(&cluster.url()).await;
    let (a, b) = (std::sync::Arc::new(a), std::sync::Arc::new(b));
    let ops = std::sync::Arc::new(Signer::new("ops"));
    a.enroll(&ops, &[TOPIC]).await;
    let devices: Vec<String> = (60..64).map(device).collect();
    let push = {
        let (a, b, ops, devices) = (a.clone(), b.clone(), ops.clone(), devices.clone());
        move |n: u64| {
            let (a, b, ops, devices) = (a.clone(), b.clone(), ops.clone(), devices.clone());
            async move {
                let d = &devices[n as usize % devices.len()];
                if n.is_multiple_of(3) {
                    a.h.prod.reply_times(d, Reply::new(503, None), 1);
                }
                let mut failures = Vec::new();
                let body =
                    ops.sign(ops.request(&rid(n), std::slice::from_ref(d), Clock::System.now_ms()));
                let r = a.push(&body).await;
                if r.status != 201 {
                    failures.push(format!("push {n}: {} {}", r.status, r.body));
                }
                let path = format!("/v2/pushes/{}", rid(n));
                let r = b.read(&ops, &path, Clock::System.now_ms()).await;
                if r.status != 200 {
                    failures.push(format!("read {n}: {} {}", r.status, r.body));
                }
                failures
            }
        }
    };
    // Every kind of key exists before the slots move.
    for n in 0..6 {
        assert_eq!(push(n).await, Vec::<String>::new());
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut n = 6;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                failures.extend(push(n).await);
                n += 1;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            (n, failures)
        })
    };
    let slots = cluster.slots_in_use();
    for (slot, from) in slots {
        let moving = cluster.clone();
        tokio::task::spawn_blocking(move || {
            moving.move_slot(slot, (from + 1) % 3, Duration::from_millis(300))
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (pushes, failures) = traffic.await.unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
    println!("{pushes} signed pushes during the reshard");
    for r in [&a, &b] {
        assert_eq!(
            counter_sum(
                &r.h.admin("/metrics").await.body,
                "sealrelay_store_errors_total"
            ),
            0.0,
            "store errors during the reshard"
        );
    }
    // Every push settles, delivered once.
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in 0..pushes {
        let path = format!("/v2/pushes/{}", rid(n));
        loop {
            let v = b.read(&ops, &path, Clock::System.now_ms()).await.json();
            if v["state"] == "settled" {
                let targets = v["targets"].as_object().expect("targets");
                assert!(
                    targets.values().all(|t| t["state"] == "delivered"),
                    "push {n}: {v}"
                );
                break;
            }
            assert!(Instant::now() < deadline, "push {n} never settled: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let delivered: usize = devices
        .iter()
        .map(|d| {
            [&a, &b]
                .iter()
                .map(|r| {
                    r.h.prod
                        .received_for(d)
                        .iter()
                        .filter(|x| x.status == 200)
                        .count()
                })
                .sum::<usize>()
        })
        .sum();
    assert_eq!(delivered, pushes as usize, "each push delivered once");
}
