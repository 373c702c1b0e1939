//! The Redis store against a real `redis-server` (and a real Cluster where the point is
//! cluster behaviour), from the test kit:
//!
//! - differential property tests binding each Lua script to its Rust mirror: the device
//!   policy (`policy_admit.lua` & co. against [`crate::policy`] through the in-process store) with
//!   random policies, horizon-crossing time steps and pruning on both sides; the shared
//!   client bucket (`admission_client.lua`) against [`crate::policy::gcra_take`]; the queue scripts
//!   against the in-process queue. Failing cases persist in `proptest-regressions/`;
//! - one round trip per admission, a TTL on every key, no token in any key, the memory a
//!   device costs, the behaviour while Redis is away;
//! - the retry queue's fencing, sealing, move-aside, TTL and the hand-over of a degraded
//!   replica's items; the fan-out across replicas, standalone and on a Cluster.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, FileFailurePersistence, TestRunner};
use sealrelay_testkit::redis::{RedisCluster, RedisServer};

use super::memory::queue::MemoryQueue;
use super::memory::MemoryStore;
use super::queue::{Claimed, Fenced, Pending, QueueKey, Sealer};
use super::redis::fanout::RedisFanout;
use super::redis::queue::RedisQueue;
use super::redis::{RedisSettings, RedisStore};
use super::{Admission, RedisFailure, Store};
use crate::device::{DeviceToken, Environment};
use crate::policy::{gcra_take, DeadReason, Decision, Policy, Ticket};

const T0: i64 = 1_790_000_000_000;

fn settings(url: &str, prefix: &str) -> RedisSettings {
    RedisSettings {
        url: url.to_owned(),
        prefix: prefix.to_owned(),
        pool_size: 2,
        timeout: Duration::from_millis(2000),
    }
}

impl RedisStore {
    /// Waits until connected, at most `timeout`.
    pub(super) async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.ready() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

async fn redis_store(url: &str, prefix: &str, policy: Policy) -> RedisStore {
    let s = RedisStore::connect(&settings(url, prefix), policy).unwrap();
    assert!(
        s.wait_ready(Duration::from_secs(10)).await,
        "redis connected"
    );
    s
}

fn token(n: u8) -> DeviceToken {
    DeviceToken::parse(&format!("{n:02x}{}", "5e".repeat(31))).unwrap()
}

/// A runner whose failures are written to `proptest-regressions/<name>.txt` and replayed
/// first on the next run.
fn runner(name: &str, cases: u32) -> TestRunner {
    TestRunner::new(PtConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            format!("proptest-regressions/{name}.txt").into_boxed_str(),
        )))),
        ..PtConfig::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        dev: u8,
        cid: u8,
        flap: Option<u8>,
        dt: i64,
    },
    Rollback {
        pick: usize,
        dt: i64,
    },
    Remember {
        dev: u8,
        sandbox: bool,
    },
    Hold {
        dev: u8,
        cid: u8,
        for_ms: i64,
    },
    Release {
        dev: u8,
        cid: u8,
    },
    Bury {
        dev: u8,
    },
    /// Time jumps to just before, at, or just past the policy's horizon since now.
    Jump {
        offset_ms: i64,
    },
    /// The in-process store prunes every device (Redis prunes on every write in these
    /// tests, `set_prune_over(0)`).
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    let dt = prop_oneof![
        4 => Just(0i64),
        6 => 0i64..3_000,
        3 => 3_000i64..12_000,
        1 => 12_000i64..40_000,
        1 => -3_000i64..0, // a replica whose clock lags
    ];
    // Few devices and keys, so forwards collide on one flap key within one millisecond
    // (the case where a rollback must not uncool a key another forward cooled).
    let flap = prop_oneof![1 => Just(None), 3 => (0u8..4).prop_map(Some)];
    prop_oneof![
        10 => (0u8..4, 0u8..8, flap, dt.clone())
            .prop_map(|(dev, cid, flap, dt)| Op::Admit { dev, cid, flap, dt }),
        3 => (any::<usize>(), dt).prop_map(|(pick, dt)| Op::Rollback { pick, dt }),
        1 => (0u8..3, any::<bool>()).prop_map(|(dev, sandbox)| Op::Remember { dev, sandbox }),
        2 => (0u8..3, 0u8..16, 1i64..60_000).prop_map(|(dev, cid, for_ms)| Op::Hold { dev, cid, for_ms }),
        1 => (0u8..3, 0u8..16).prop_map(|(dev, cid)| Op::Release { dev, cid }),
        1 => (3u8..5).prop_map(|dev| Op::Bury { dev }),
        1 => (-2i64..=2).prop_map(|offset_ms| Op::Jump { offset_ms }),
        1 => Just(Op::Sweep),
    ]
}

/// Policies at their edges: flap max 1, capacity 1, refills as slow as the configuration
/// allows (0.001 tokens/s) and fast ones, windows of a second and of minutes.
fn policy() -> impl Strategy<Value = Policy> {
    (
        1u64..10,
        prop_oneof![Just(1u32), 2u32..5],
        1u64..30,
        1u64..20,
        1u64..40,
        prop_oneof![Just(1u32), 2u32..6],
        prop_oneof![Just(0.001f64), Just(0.05), Just(0.5), Just(2.0)],
    )
        .prop_map(|(d, fm, fw, cd, rs, cap, refill)| {
            Policy::from_seconds(d, fm, fw, cd, rs, cap, refill)
        })
}

/// Random event sequences under random policies (admissions on five devices, rollbacks,
/// remembered environments, holds and releases, dead tokens, time steps including a
/// lagging clock and jumps across the state horizon, pruning) give identical decisions,
/// Retry-After values and remembered environments in the in-process store and in Redis.
#[test]
fn same_decisions_in_memory_and_in_redis() {
    let server = RedisServer::start();
    let rt = runtime();
    let case = std::sync::atomic::AtomicU32::new(0);
    runner("store-policy-differential", 150)
        .run(
            &(policy(), proptest::collection::vec(op(), 1..120)),
            |(policy, ops)| {
                let case = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mem = MemoryStore::new(policy.clone());
                let mut red = rt.block_on(redis_store(
                    &server.url(),
                    &format!("case{case}:"),
                    policy.clone(),
                ));
                red.prune_over = 0;
                let mut now = T0;
                let mut tickets: Vec<(DeviceToken, String, String, Ticket)> = Vec::new();
                for (i, op) in ops.iter().enumerate() {
                    match op {
                        Op::Admit { dev, cid, flap, dt } => {
                            now += dt;
                            let d = token(*dev);
                            let c = format!("{cid:032x}");
                            let f =
                                flap.map_or(c.clone(), |f| format!("{:032x}", 1000 + u32::from(f)));
                            let a: Admission = mem.admit(&d, &c, &f, now);
                            let b = rt.block_on(red.admit(&d, &c, &f, now)).unwrap();
                            prop_assert_eq!(a, b, "op {} {:?}", i, op);
                            if let Decision::Forward(t) = a.decision {
                                tickets.push((d, c, f, t));
                            }
                        }
                        Op::Rollback { pick, dt } => {
                            if tickets.is_empty() {
                                continue;
                            }
                            now += dt;
                            let (d, c, f, t) = tickets.remove(pick % tickets.len());
                            mem.rollback(&d, &c, &f, &t, now);
                            rt.block_on(red.rollback(&d, &c, &f, &t, now)).unwrap();
                        }
                        Op::Hold { dev, cid, for_ms } => {
                            let c = format!("{cid:032x}");
                            mem.hold(&token(*dev), &c, now + for_ms, now);
                            rt.block_on(red.hold(&token(*dev), &c, now + for_ms, now))
                                .unwrap();
                        }
                        Op::Release { dev, cid } => {
                            let c = format!("{cid:032x}");
                            mem.release(&token(*dev), &c, now);
                            rt.block_on(red.hold(&token(*dev), &c, 0, now)).unwrap();
                        }
                        Op::Bury { dev } => {
                            let r = if dev % 2 == 0 {
                                DeadReason::Uninstalled
                            } else {
                                DeadReason::Expired
                            };
                            mem.bury(&token(*dev), r, now, 864_000_000);
                            rt.block_on(red.bury(&token(*dev), r, 864_000_000)).unwrap();
                        }
                        Op::Remember { dev, sandbox } => {
                            let env = if *sandbox {
                                Environment::Sandbox
                            } else {
                                Environment::Production
                            };
                            mem.remember_env(&token(*dev), env, now);
                            rt.block_on(red.remember_env(&token(*dev), env, now))
                                .unwrap();
                        }
                        Op::Jump { offset_ms } => now += policy.horizon_ms() + offset_ms,
                        Op::Sweep => {
                            mem.sweep(now);
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

/// Two forwards of one flap key in one millisecond, the second cooling it; the first is
/// refused and rolled back: the key must stay cooled in both stores (the rollback must not
/// uncool a key another forward of the same instant cooled).
#[tokio::test(flavor = "multi_thread")]
async fn a_same_millisecond_rollback_leaves_the_key_cooled_in_both_stores() {
    let server = RedisServer::start();
    let policy = Policy::from_seconds(75, 2, 1800, 1800, 7200, 60, 0.5);
    let mem = MemoryStore::new(policy.clone());
    let red = redis_store(&server.url(), "samems:", policy).await;
    let d = token(9);
    let (a, b, c, f) = (id(1), id(2), id(3), id(99));
    let mut tickets = Vec::new();
    for cid in [&a, &b] {
        let m = mem.admit(&d, cid, &f, T0);
        let r = red.admit(&d, cid, &f, T0).await.unwrap();
        assert_eq!(m, r);
        let Decision::Forward(t) = m.decision else {
            panic!("{m:?}")
        };
        tickets.push(t);
    }
    mem.rollback(&d, &a, &f, &tickets[0], T0);
    red.rollback(&d, &a, &f, &tickets[0], T0).await.unwrap();
    let m = mem.admit(&d, &c, &f, T0 + 1);
    let r = red.admit(&d, &c, &f, T0 + 1).await.unwrap();
    assert_eq!(m.decision, Decision::Suppressed);
    assert_eq!(r.decision, Decision::Suppressed);
}

fn id(n: u32) -> String {
    format!("{n:032x}")
}

/// `admission_client.lua` takes exactly the tokens `gcra_take` does, for random buckets and steps.
#[test]
fn the_shared_client_bucket_is_the_rust_gcra() {
    let server = RedisServer::start();
    let rt = runtime();
    let mut red = rt.block_on(redis_store(&server.url(), "client:", Policy::defaults()));
    // The logical clock runs far ahead of real time: keep the keys for the whole test.
    red.client_slack_ms = 3_600_000;
    let case = std::sync::atomic::AtomicU32::new(0);
    let steps = proptest::collection::vec(
        prop_oneof![4 => Just(0i64), 4 => 0i64..2_000, 1 => 2_000i64..120_000, 1 => -1_000i64..0],
        1..80,
    );
    let params = (
        prop_oneof![Just(1i64), 2i64..10, Just(600)],
        prop_oneof![
            Just(1_000i64),
            Just(50_000),
            Just(2_000_000),
            Just(1_000_000_000)
        ],
    );
    runner("store-client-differential", 120)
        .run(&(params, steps), |((capacity, emission_us), steps)| {
            let block = format!(
                "block-{}",
                case.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let mut model: i64 = 0;
            let mut now = T0;
            for (i, dt) in steps.iter().enumerate() {
                now += dt;
                let expected = match gcra_take(model, now * 1000, emission_us, capacity) {
                    Ok(tat) => {
                        model = tat;
                        None
                    }
                    Err(wait) => Some(wait),
                };
                let got = rt
                    .block_on(red.client_take(&block, now, capacity, emission_us))
                    .unwrap();
                prop_assert_eq!(got, expected, "step {}", i);
            }
            Ok(())
        })
        .unwrap();
}

#[derive(Debug, Clone)]
enum QOp {
    Put {
        id: u8,
        due_dt: i64,
    },
    Claim {
        dt: i64,
        lease: i64,
        max: usize,
    },
    Ack {
        pick: usize,
        stale: bool,
    },
    Reschedule {
        pick: usize,
        due_dt: i64,
        stale: bool,
    },
}

fn qop() -> impl Strategy<Value = QOp> {
    prop_oneof![
        4 => (0u8..8, -2_000i64..5_000).prop_map(|(id, due_dt)| QOp::Put { id, due_dt }),
        4 => (0i64..3_000, 1i64..4_000, 1usize..4).prop_map(|(dt, lease, max)| QOp::Claim { dt, lease, max }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, stale)| QOp::Ack { pick, stale }),
        2 => (any::<usize>(), 0i64..5_000, any::<bool>())
            .prop_map(|(pick, due_dt, stale)| QOp::Reschedule { pick, due_dt, stale }),
    ]
}

/// Ids of items that all live in queue shard 0, so the in-process queue (unsharded) and
/// one Redis shard see the same items.
fn shard0_id(n: u8) -> String {
    let ids: Vec<String> = (0u32..)
        .map(|i| format!("item-{i}"))
        .filter(|id| RedisQueue::shard_of(id) == 0)
        .take(usize::from(n) + 1)
        .collect();
    ids[usize::from(n)].clone()
}

fn pending(id: u8, accepted_ms: i64) -> Pending {
    Pending {
        id: shard0_id(id),
        device: "ab".repeat(32),
        collapse_id: "c".repeat(32),
        flap_key: "c".repeat(32),
        priority: 10,
        expiration_s: ((accepted_ms + 600_000) / 1000) as u64,
        body: "{}".into(),
        env: Environment::Production,
        attempts: 1,
        ticket: Ticket {
            at_ms: 5,
            kind: crate::policy::TicketKind::Counted { cooled: false },
        },
        topic: None,
        settles: None,
    }
}

/// The queue scripts behave as the in-process queue: the same items claimed in the same
/// order, and the same fenced outcomes for acknowledgements and reschedules by current and
/// by stale claimers.
#[test]
fn the_redis_queue_is_the_in_process_queue() {
    let server = RedisServer::start();
    let rt = runtime();
    let case = std::sync::atomic::AtomicU32::new(0);
    runner("store-queue-differential", 120)
        .run(&proptest::collection::vec(qop(), 1..60), |ops| {
            let prefix = format!(
                "q{}:",
                case.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let pool = rt.block_on(redis_store(&server.url(), &prefix, Policy::defaults()));
            let red = RedisQueue::new(
                pool.pool().clone(),
                &prefix,
                Sealer::new(&QueueKey::derive(b"differential")),
            );
            let mem = MemoryQueue::default();
            let mut now = T0;
            // Claims as (memory's, Redis's), with the claims they superseded kept too.
            let mut claims: Vec<(Claimed, Claimed)> = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    QOp::Put { id, due_dt } => {
                        let item = pending(*id, now);
                        let a = mem.put(item.clone(), now + due_dt, 0).map_err(|_| "full");
                        let b = rt
                            .block_on(red.put(&item, now + due_dt, 0, now))
                            .map_err(|_| "full");
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                    }
                    QOp::Claim { dt, lease, max } => {
                        now += dt;
                        let a = mem.claim(now, now + lease, *max);
                        let b = rt.block_on(red.claim(0, now, now + lease, *max)).unwrap();
                        prop_assert_eq!(b.unopenable, 0);
                        let ids =
                            |v: &[Claimed]| v.iter().map(|c| c.item.id.clone()).collect::<Vec<_>>();
                        prop_assert_eq!(ids(&a), ids(&b.items), "op {} {:?}", i, op);
                        claims.extend(a.into_iter().zip(b.items));
                    }
                    QOp::Ack { pick, stale } | QOp::Reschedule { pick, stale, .. } => {
                        if claims.is_empty() {
                            continue;
                        }
                        let (ma, mb) = &claims[pick % claims.len()];
                        let (fa, fb) = if *stale {
                            (ma.fence + 1_000_000, mb.fence + 1_000_000)
                        } else {
                            (ma.fence, mb.fence)
                        };
                        let (a, b) = match op {
                            QOp::Ack { .. } => (
                                mem.ack(&ma.item.id, fa),
                                rt.block_on(red.ack(&mb.item.id, fb)).unwrap(),
                            ),
                            QOp::Reschedule { due_dt, .. } => (
                                mem.put(ma.item.clone(), now + due_dt, fa).unwrap(),
                                rt.block_on(red.put(&mb.item, now + due_dt, fb, now))
                                    .unwrap(),
                            ),
                            _ => unreachable!(),
                        };
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// The happy path costs exactly one Redis call: one EVALSHA per admission, nothing else
/// from the client. (Commands the script runs inside Redis are counted under their own
/// names; none of them is a client call.)
#[tokio::test(flavor = "multi_thread")]
async fn one_round_trip_per_admission() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "rt:", Policy::defaults()).await;
    // Load the script once (the first call may be EVALSHA + SCRIPT LOAD + EVALSHA).
    store
        .admit(&token(200), &format!("{:032x}", 0), "f", T0)
        .await
        .unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let n = 100;
    for i in 0..n {
        let d = token((i % 50) as u8);
        let a = store
            .admit(&d, &format!("{i:032x}"), &format!("{i:032x}"), T0 + 1)
            .await
            .unwrap();
        assert!(matches!(a.decision, Decision::Forward(_)));
    }
    let calls = server.command_calls();
    assert_eq!(calls.get("evalsha"), Some(&n), "{calls:?}");
    let script_internal = [
        "get", "hmget", "hset", "pexpire", "hlen", "hgetall", "hdel", "del",
    ];
    let client_calls: u64 = calls
        .iter()
        .filter(|(k, _)| {
            !script_internal.contains(&k.as_str()) && !k.starts_with("config") && *k != "info"
        })
        .map(|(_, v)| v)
        .sum();
    assert_eq!(client_calls, n, "only EVALSHA from the client: {calls:?}");
}

/// Every key has a TTL, and no key names a token.
#[tokio::test(flavor = "multi_thread")]
async fn every_key_expires_and_names_no_token() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "ttl:", Policy::defaults()).await;
    for i in 0..40u8 {
        let d = token(i);
        for j in 0..8 {
            let c = format!("{j:032x}");
            if let Decision::Forward(t) = store
                .admit(&d, &c, &c, T0 + i64::from(j) * 100)
                .await
                .unwrap()
                .decision
            {
                if j % 3 == 0 {
                    store.rollback(&d, &c, &c, &t, T0 + 50_000).await.unwrap();
                }
            }
        }
        store
            .remember_env(&d, Environment::Sandbox, T0 + 60_000)
            .await
            .unwrap();
    }
    let keys = server.cli(&["--scan", "--pattern", "*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 40);
    for k in keys {
        assert!(
            k.starts_with("ttl:{") && k.ends_with('}') && k.len() == "ttl:{}".len() + 32,
            "{k}"
        );
        assert!(!k.contains("5e5e5e"), "token in key {k}");
        let pttl: i64 = server.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(
            pttl > 0 && pttl <= Policy::defaults().horizon_ms() + 60_000,
            "{k}: {pttl}"
        );
    }
}

/// Redis memory per active device holding one live alert id. Prints the figure.
#[tokio::test(flavor = "multi_thread")]
async fn memory_per_device_with_one_live_alert() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "sealrelay:", Policy::defaults()).await;
    let used = |s: &RedisServer| -> i64 {
        s.cli(&["INFO", "memory"])
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = used(&server);
    let n = 20_000u32;
    for i in 0..n {
        let d = DeviceToken::parse(&format!("{i:08x}{}", "ab".repeat(28))).unwrap();
        let c = format!("{:032x}", u128::from(i) * 7919);
        store.admit(&d, &c, &c, T0).await.unwrap();
    }
    let per_device = (used(&server) - before) as f64 / f64::from(n);
    println!("redis memory per device with one live alert id: {per_device:.0} bytes ({n} devices)");
    assert!(per_device < 512.0, "{per_device} bytes per device");
}

/// Redis unreachable at start-up: the store keeps retrying, requests fail fast with the
/// store error (503 at the HTTP layer) within the timeout, and it serves once Redis is up.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_redis_fails_fast_then_recovers() {
    let mut server = RedisServer::start();
    server.stop();
    let mut s = settings(&server.url(), "down:");
    s.timeout = Duration::from_millis(200);
    let store = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(!store.ready());
    let started = std::time::Instant::now();
    let r = store
        .admit(&token(1), &format!("{:032x}", 1), "f", T0)
        .await;
    assert!(r.is_err());
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    server.restart();
    assert!(
        store.wait_ready(Duration::from_secs(15)).await,
        "reconnected"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match store
            .admit(&token(1), &format!("{:032x}", 1), "f", T0)
            .await
        {
            Ok(a) => {
                assert!(matches!(a.decision, Decision::Forward(_)));
                break;
            }
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn queue_on(server: &RedisServer, prefix: &str, key: &[u8]) -> RedisQueue {
    let pool = redis_store(&server.url(), prefix, Policy::defaults()).await;
    RedisQueue::new(
        pool.pool().clone(),
        prefix,
        Sealer::new(&QueueKey::derive(key)),
    )
}

/// Two replicas race for one item: the one whose lease ran out can neither delete nor
/// resurrect it once the other has claimed it; the current claimer settles it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_claimer_cannot_delete_or_resurrect_an_item() {
    let server = RedisServer::start();
    let a = queue_on(&server, "fence:", b"k").await;
    let b = queue_on(&server, "fence:", b"k").await;
    let item = pending(1, T0);
    let shard = RedisQueue::shard_of(&item.id);
    a.put(&item, T0, 0, T0).await.unwrap();
    let first = a
        .claim(shard, T0, T0 + 1_000, 10)
        .await
        .unwrap()
        .items
        .remove(0);
    // A's lease runs out while it stalls; B claims the item.
    let second = b
        .claim(shard, T0 + 1_000, T0 + 2_000, 10)
        .await
        .unwrap()
        .items
        .remove(0);
    assert_ne!(first.fence, second.fence);
    assert_eq!(a.ack(&item.id, first.fence).await.unwrap(), Fenced::Stale);
    assert_eq!(
        a.put(&item, T0 + 500, first.fence, T0).await.unwrap(),
        Fenced::Stale,
        "a stale reschedule changes nothing"
    );
    // Still leased to B: not due for anyone before B's lease ends.
    assert!(b
        .claim(shard, T0 + 1_500, T0 + 3_000, 10)
        .await
        .unwrap()
        .items
        .is_empty());
    assert_eq!(b.ack(&item.id, second.fence).await.unwrap(), Fenced::Done);
    assert_eq!(b.stats().await.unwrap().depth, 0);
    // Gone: the stale claimer cannot bring it back.
    assert_eq!(
        a.put(&item, T0, first.fence, T0).await.unwrap(),
        Fenced::Stale
    );
    assert_eq!(a.stats().await.unwrap().depth, 0);
}

/// An item sealed under another key is moved aside, counted, never delivered and never
/// silently deleted; every queue key carries a TTL that follows the newest item.
#[tokio::test(flavor = "multi_thread")]
async fn unopenable_items_are_moved_aside_and_every_key_expires() {
    let server = RedisServer::start();
    let old = queue_on(&server, "aside:", b"old key").await;
    let new = queue_on(&server, "aside:", b"new key").await;
    let item = pending(2, T0);
    let shard = RedisQueue::shard_of(&item.id);
    old.put(&item, T0, 0, T0).await.unwrap();
    let got = new.claim(shard, T0, T0 + 1_000, 10).await.unwrap();
    assert!(got.items.is_empty());
    assert_eq!(got.unopenable, 1);
    let stats = new.stats().await.unwrap();
    assert_eq!((stats.depth, stats.aside), (0, 1));
    let aside_key = format!("aside:{{q{shard}}}:aside");
    assert_eq!(server.cli(&["HLEN", &aside_key]).trim(), "1");
    let pttl: i64 = server.cli(&["PTTL", &aside_key]).trim().parse().unwrap();
    assert!(pttl > 6 * 24 * 3_600_000, "kept for the operator: {pttl}");
    // The blob set aside is the sealed item, not the clear one.
    let blob = server.cli(&["HGET", &aside_key, &item.id]);
    assert!(!blob.contains("abab"), "no token in the clear");

    // TTLs: a queued item's keys live until its staleness window plus a margin.
    let live = pending(3, T0);
    old.put(&live, T0 + 100, 0, T0).await.unwrap();
    let s = RedisQueue::shard_of(&live.id);
    for k in ["due", "items", "born"] {
        let key = format!("aside:{{q{s}}}:{k}");
        let pttl: i64 = server.cli(&["PTTL", &key]).trim().parse().unwrap();
        assert!(pttl > 600_000 && pttl <= 1_200_000, "{key}: {pttl}");
    }
}

/// A replica that queued in process while degraded hands its items to Redis when Redis
/// answers again, and every other replica can then claim them.
#[tokio::test(flavor = "multi_thread")]
async fn a_degraded_replicas_queue_is_handed_to_redis() {
    let mut server = RedisServer::start();
    let key = QueueKey::derive(b"hand-over");
    let build = |url: &str| {
        let settings = settings(url, "hand:");
        let mut s = settings.clone();
        s.timeout = Duration::from_millis(300);
        let redis = RedisStore::connect(&s, Policy::defaults()).unwrap();
        let queue = RedisQueue::new(redis.pool().clone(), "hand:", Sealer::new(&key));
        let fanout = RedisFanout::connect(&s, redis.pool().clone()).unwrap();
        Store::redis(
            redis,
            Some(queue),
            fanout,
            Policy::defaults(),
            RedisFailure::Degrade,
        )
    };
    let a = build(&server.url());
    let b = build(&server.url());
    while !(a.ready() && b.ready()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop();
    // The first failure degrades A; the item waits in A's memory.
    let item = pending(4, T0);
    a.queue().enqueue(&item, T0, T0).await.unwrap();
    assert!(a.degraded());
    assert_eq!(a.queue().local_len(), 1);
    server.restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !a.queue().take_recovered() {
        assert!(
            std::time::Instant::now() < deadline,
            "A never saw Redis again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.queue().flush_local(T0).await, 1);
    assert_eq!(a.queue().local_len(), 0);
    // B claims it from Redis (it sits in one of the shards; look through them all).
    let mut found = Vec::new();
    for _ in 0..super::redis::queue::SHARDS {
        found.extend(b.queue().claim(T0 + 1, T0 + 1_000, 10).await);
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].claimed.item, item);
    assert_eq!(found[0].origin, super::retry::Origin::Shared);
}

/// A shared admission (signed pushes) is never decided in a replica's memory: with Redis
/// down it fails, while the v1 admission beside it degrades and decides in process; once
/// degraded, the shared one answers `Degraded` without trying.
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_admission_never_degrades() {
    let mut server = RedisServer::start();
    let mut s = settings(&server.url(), "shared:");
    s.timeout = Duration::from_millis(300);
    let redis = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(redis.wait_ready(Duration::from_secs(10)).await);
    let fanout = RedisFanout::connect(&s, redis.pool().clone()).unwrap();
    let store = Store::redis(
        redis,
        None,
        fanout,
        Policy::defaults(),
        RedisFailure::Degrade,
    );
    let (d, now) = (token(5), T0);
    let a = store
        .policy()
        .admit_in(true, &d, "c1", "f", now)
        .await
        .unwrap();
    assert!(matches!(a.decision, Decision::Forward(_)), "{a:?}");
    server.stop();
    assert!(store
        .policy()
        .admit_in(true, &d, "c2", "f", now)
        .await
        .is_err());
    assert!(
        store.degraded(),
        "the failure still degrades the replica for v1"
    );
    let v1 = store.policy().admit(&d, "c3", "f", now).await.unwrap();
    assert!(matches!(v1.decision, Decision::Forward(_)), "{v1:?}");
    assert!(matches!(
        store.policy().admit_in(true, &d, "c4", "f", now).await,
        Err(super::StoreError::Degraded)
    ));
}

async fn two_fanouts(url: &str) -> (super::fanout::Fanout, super::fanout::Fanout) {
    let s = settings(url, "fan:");
    let mut out = Vec::new();
    for _ in 0..2 {
        let redis = RedisStore::connect(&s, Policy::defaults()).unwrap();
        assert!(redis.wait_ready(Duration::from_secs(10)).await);
        out.push(RedisFanout::connect(&s, redis.pool().clone()).unwrap());
    }
    let b = out.pop().unwrap();
    (out.pop().unwrap(), b)
}

async fn fanout_between_replicas(url: &str, channels: &[super::fanout::Channel]) {
    let (a, b) = two_fanouts(url).await;
    // Held to the end: a channel is released with its last subscriber.
    let mut held = Vec::new();
    for c in channels {
        let mut sub = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                // The subscriber connects in the background: retry until it takes.
                match b.subscribe(c).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await
        .expect("subscribed");
        let mut other = b.subscribe(c).await.unwrap();
        a.publish(c, b"hello", T0).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .unwrap_or_else(|_| panic!("message arrives on the other replica: {c:?}"));
        assert_eq!(got.as_deref(), Some(&b"hello"[..]), "{c:?}");
        let got = tokio::time::timeout(Duration::from_secs(5), other.recv())
            .await
            .unwrap();
        assert_eq!(got.as_deref(), Some(&b"hello"[..]));
        held.push((sub, other));
    }
    assert_eq!(b.channels(), channels.len());
    drop(held);
    assert_eq!(b.channels(), 0, "released with the last subscriber");
}

/// A message published on one replica reaches subscribers on another: sharded channels
/// (a hash tag) and a global one, on one Redis.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_reaches_another_replica_on_redis() {
    let server = RedisServer::start();
    let channels = [
        super::fanout::Channel::sharded("fan:{m:abc}:events".into()),
        super::fanout::Channel::sharded("fan:{m:def}:events".into()),
        super::fanout::Channel::global("fan:signers".into()),
    ];
    fanout_between_replicas(&server.url(), &channels).await;
}

/// The same on a real three-master Cluster, with sharded channels whose tags live on every
/// master.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_reaches_another_replica_on_a_cluster() {
    let cluster = RedisCluster::start();
    let mut channels = Vec::new();
    let mut masters = std::collections::HashSet::new();
    for i in 0..200 {
        let name = format!("fan:{{m:{i}}}:events");
        if masters.insert(cluster.node_of(&format!("{{m:{i}}}"))) {
            channels.push(super::fanout::Channel::sharded(name));
        }
        if masters.len() == 3 {
            break;
        }
    }
    assert_eq!(channels.len(), 3, "a channel on every master");
    channels.push(super::fanout::Channel::global("fan:signers".into()));
    fanout_between_replicas(&cluster.url(), &channels).await;
}

/// After the subscriber's connection drops, it subscribes again by itself and the resync
/// counter grows, so consumers know to re-read what they may have missed.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_resubscribes_after_a_reconnect() {
    let mut server = RedisServer::start();
    let (a, b) = two_fanouts(&server.url()).await;
    let c = super::fanout::Channel::sharded("fan:{m:re}:events".into());
    let mut sub = loop {
        match b.subscribe(&c).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let mut resyncs = b.resyncs();
    let before = *resyncs.borrow();
    server.restart();
    tokio::time::timeout(Duration::from_secs(20), async {
        while *resyncs.borrow() == before {
            resyncs.changed().await.unwrap();
        }
    })
    .await
    .expect("resynced after the reconnect");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let _ = a.publish(&c, b"after", T0).await;
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
            assert_eq!(&m[..], b"after");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never received after the reconnect"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Receipts and signers of signed pushes.

use super::receipts::MemoryReceipts;
use crate::signed::receipt::lifecycle::{
    Begun, Claim, Guard, NewReceipt, State as RState, Update as RUpdate, Updated,
};

/// A push to begin on the tests' topic and signer, kept `ttl_ms`.
fn new_receipt<'a>(
    id: &'a str,
    hash: &'a str,
    targets: &'a [String],
    ttl_ms: i64,
) -> NewReceipt<'a> {
    NewReceipt {
        push_id: id,
        hash,
        signer: "ed25519:k",
        topic: "t",
        targets,
        ttl_ms,
    }
}

const CLAIM: Claim<'static> = Claim {
    owner: "owner",
    lease_ms: 600_000,
};
use super::redis::signed::Signed as RedisSigned;

#[derive(Debug, Clone)]
enum ROp {
    Begin {
        push: u8,
        hash: u8,
        owner: u8,
        targets: Vec<u8>,
    },
    Update {
        push: u8,
        dt: i64,
        guarded: bool,
        updates: Vec<(u8, usize, bool)>,
    },
    Get {
        push: u8,
    },
}

fn rop() -> impl Strategy<Value = ROp> {
    prop_oneof![
        (
            0u8..4,
            0u8..2,
            0u8..2,
            proptest::collection::btree_set(0u8..5, 1..5)
        )
            .prop_map(|(push, hash, owner, t)| ROp::Begin {
                push,
                hash,
                owner,
                targets: t.into_iter().collect()
            }),
        (
            0u8..4,
            0i64..5_000,
            any::<bool>(),
            proptest::collection::vec((0u8..6, 0usize..10, any::<bool>()), 0..6)
        )
            .prop_map(|(push, dt, guarded, updates)| ROp::Update {
                push,
                dt,
                guarded,
                updates
            }),
        (0u8..4).prop_map(|push| ROp::Get { push }),
    ]
}

fn push_id(n: u8) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

fn rtarget(n: u8) -> String {
    format!("{n:016x}")
}

/// `receipt_begin.lua` and `receipt_update.lua` behave as [`super::receipts`] through the
/// in-process store: the same new/replay/conflict answers, the same receipts, the same
/// event sequences, the same lease decisions (two owners; leases that outlast the case, so
/// the two clocks, a test's and Redis's, never disagree on one), for random interleavings
/// of pushes, replays, reused ids, guarded and unguarded updates and (allowed, repeated
/// and forbidden) target transitions. Lapsing leases are bound by
/// `a_lapsed_lease_is_taken_over_by_redis_time`.
#[test]
fn redis_receipts_are_the_in_process_receipts() {
    let server = RedisServer::start();
    let rt = runtime();
    let case = std::sync::atomic::AtomicU32::new(0);
    runner("store-receipts-differential", 120)
        .run(&proptest::collection::vec(rop(), 1..40), |ops| {
            let prefix = format!(
                "r{}:",
                case.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let pool = rt.block_on(redis_store(&server.url(), &prefix, Policy::defaults()));
            let red = RedisSigned::new(pool.pool().clone(), &prefix);
            let mem = MemoryReceipts::default();
            let ttl = 86_400_000;
            let mut now = T0;
            for (i, op) in ops.iter().enumerate() {
                match op {
                    ROp::Begin {
                        push,
                        hash,
                        owner,
                        targets,
                    } => {
                        let t: Vec<String> = targets.iter().map(|n| rtarget(*n)).collect();
                        let h = format!("sha256:{hash}");
                        let id = push_id(*push);
                        let owner = format!("owner{owner}");
                        let claim = Claim {
                            owner: &owner,
                            lease_ms: ttl,
                        };
                        let new = new_receipt(&id, &h, &t, ttl);
                        let a = mem.begin(&new, &claim, now);
                        let b = rt.block_on(red.begin(&new, &claim, now)).unwrap();
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                    }
                    ROp::Update {
                        push,
                        dt,
                        guarded,
                        updates,
                    } => {
                        now += dt;
                        let u: Vec<RUpdate> = updates
                            .iter()
                            .map(|(t, s, detailed)| RUpdate {
                                target: rtarget(*t),
                                state: crate::signed::receipt::lifecycle::STATES[*s],
                                detail: if *detailed {
                                    r#""retryAfterS":3"#.to_owned()
                                } else {
                                    String::new()
                                },
                            })
                            .collect();
                        let id = push_id(*push);
                        let guard = if *guarded {
                            Guard::Lapsed
                        } else {
                            Guard::Always
                        };
                        let a = mem.update(&id, &u, guard, now, ttl).0;
                        let b = rt.block_on(red.update(&id, &u, guard, now, ttl)).unwrap();
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                        // And the receipt as stored after it.
                        let a = mem.get(&id, now);
                        let b = rt.block_on(red.get(&id)).unwrap();
                        prop_assert_eq!(a, b, "after op {} {:?}", i, op);
                    }
                    ROp::Get { push } => {
                        let id = push_id(*push);
                        let a = mem.get(&id, now);
                        let b = rt.block_on(red.get(&id)).unwrap();
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A push's lease in Redis is timed by Redis's clock, not the caller's: a bidder whose clock
/// runs an hour ahead (or one whose clock lags) gets the lease exactly when Redis says it
/// lapsed; the owner's own replay renews it; a guarded update waits for it to lapse.
#[tokio::test(flavor = "multi_thread")]
async fn a_lapsed_lease_is_taken_over_by_redis_time() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "lease:", Policy::defaults()).await;
    let red = RedisSigned::new(store.pool().clone(), "lease:");
    let id = push_id(9);
    let t = vec![rtarget(1), rtarget(2)];
    // Long leases where a check needs one to hold (so a slow machine cannot fail it),
    // short ones where it needs one to lapse.
    let (long, short) = (10_000, 300);
    let claim = |owner: &'static str, lease_ms: i64| Claim { owner, lease_ms };
    let ahead = T0 + 3_600_000;
    let begin = |claim: Claim<'static>, now: i64| {
        let (red, id, t) = (&red, id.clone(), t.clone());
        async move {
            match red
                .begin(&new_receipt(&id, "sha256:x", &t, 600_000), &claim, now)
                .await
                .unwrap()
            {
                Begun::New(_) => None,
                Begun::Replay { owned, .. } => Some(owned),
                Begun::Conflict => panic!("conflict"),
            }
        }
    };
    let lapse = || tokio::time::sleep(Duration::from_millis(short as u64 + 200));
    assert_eq!(begin(claim("a", long), T0).await, None);
    let fail = |target: &str| RUpdate {
        target: target.to_owned(),
        state: RState::Failed,
        detail: String::new(),
    };
    // While A's lease runs (whatever B's clock says): B gets the receipt, not the lease;
    // a guarded update is held; A's own replay renews it (here to a short one).
    assert_eq!(begin(claim("b", long), ahead).await, Some(false));
    assert_eq!(
        red.update(&id, &[fail(&t[0])], Guard::Lapsed, ahead, 600_000)
            .await
            .unwrap(),
        Updated::Held
    );
    assert_eq!(begin(claim("a", short), T0).await, Some(true));
    // Lapsed by Redis's clock: B takes it over (its clock an hour behind), and A (its
    // clock an hour ahead) waits.
    lapse().await;
    assert_eq!(begin(claim("b", long), T0 - 3_600_000).await, Some(true));
    assert_eq!(begin(claim("a", long), ahead).await, Some(false));
    // B records one target; the guard holds for the other while B's lease runs, and
    // applies once it lapsed.
    let deliver = RUpdate {
        target: t[0].clone(),
        state: RState::Delivered,
        detail: String::new(),
    };
    assert_eq!(
        red.update(&id, &[deliver], Guard::Always, T0, 600_000)
            .await
            .unwrap(),
        Updated::Applied(1)
    );
    assert_eq!(
        red.update(&id, &[fail(&t[1])], Guard::Lapsed, T0, 600_000)
            .await
            .unwrap(),
        Updated::Held
    );
    assert_eq!(begin(claim("b", short), T0).await, Some(true));
    lapse().await;
    assert_eq!(
        red.update(&id, &[fail(&t[1])], Guard::Lapsed, T0, 600_000)
            .await
            .unwrap(),
        Updated::Applied(2)
    );
    // Settled: nobody takes a lease any more.
    assert_eq!(begin(claim("a", long), T0).await, Some(false));
    let r = red.get(&id).await.unwrap().unwrap();
    assert!(r.settled);
}

/// A receipt's two keys and the signer keys all expire or are bounded, name no token, and
/// hold no token: only 16-hex target hashes.
#[tokio::test(flavor = "multi_thread")]
async fn receipt_keys_expire_and_hold_no_token() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "rk:", Policy::defaults()).await;
    let red = RedisSigned::new(store.pool().clone(), "rk:");
    let device = token(7);
    let target = device.hash16();
    let id = push_id(1);
    let b = red
        .begin(
            &new_receipt(&id, "sha256:x", std::slice::from_ref(&target), 600_000),
            &CLAIM,
            T0,
        )
        .await
        .unwrap();
    assert!(matches!(b, Begun::New(_)), "{b:?}");
    let update = RUpdate {
        target: target.clone(),
        state: RState::Delivered,
        detail: String::new(),
    };
    assert_eq!(
        red.update(&id, &[update], Guard::Always, T0 + 5, 600_000)
            .await
            .unwrap(),
        Updated::Applied(1)
    );
    let r = red.get(&id).await.unwrap().unwrap();
    assert!(r.settled);
    assert_eq!(
        r.events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let keys = server.cli(&["KEYS", "rk:*"]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for k in &keys {
        assert!(!k.contains(device.expose()), "{k}");
        let ttl: i64 = server.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(ttl > 0 && ttl <= 600_000, "{k}: {ttl}");
        let dump = server.cli(&["DUMP", k]);
        assert!(!dump.contains(device.expose()), "{k}");
    }
}

/// On a real Cluster, the events a receipt update publishes from inside its script (one
/// SPUBLISH on the push's slot) reach another replica's subscriber, for pushes on every
/// master; a signer change reaches it on the global channel.
#[tokio::test(flavor = "multi_thread")]
async fn receipt_events_are_published_from_the_script_on_a_cluster() {
    let cluster = RedisCluster::start();
    let s = settings(&cluster.url(), "cl:");
    let a = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(a.wait_ready(Duration::from_secs(10)).await);
    let b = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(b.wait_ready(Duration::from_secs(10)).await);
    let fan_b = RedisFanout::connect(&s, b.pool().clone()).unwrap();
    let red = RedisSigned::new(a.pool().clone(), "cl:");
    let mut masters = std::collections::HashSet::new();
    let mut ids = Vec::new();
    for n in 0..=255u8 {
        if masters.insert(cluster.node_of(&format!("{{r:{}}}", push_id(n)))) {
            ids.push(push_id(n));
        }
        if masters.len() == 3 {
            break;
        }
    }
    assert_eq!(ids.len(), 3, "a push on every master");
    for id in &ids {
        let channel = super::fanout::Channel::sharded(red.events_channel(id));
        let mut sub = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match fan_b.subscribe(&channel).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await
        .expect("subscribed");
        let t = rtarget(1);
        red.begin(
            &new_receipt(id, "sha256:x", std::slice::from_ref(&t), 600_000),
            &CLAIM,
            T0,
        )
        .await
        .unwrap();
        let u = RUpdate {
            target: t.clone(),
            state: RState::Delivered,
            detail: String::new(),
        };
        red.update(id, &[u], Guard::Always, T0 + 1, 600_000)
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .expect("the script's message reaches the other replica");
        let got = String::from_utf8(got.expect("an event message").to_vec()).unwrap();
        let events: Vec<_> = got
            .lines()
            .map(|l| {
                crate::signed::receipt::lifecycle::Event::decode(l).unwrap_or_else(|| panic!("{l}"))
            })
            .collect();
        let seqs: Vec<u64> = events.iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, vec![2, 3], "{got}");
    }
    // Signers: enrolled on A, announced to B.
    let channel = super::fanout::Channel::global(red.signers_channel());
    let mut sub = fan_b.subscribe(&channel).await.unwrap();
    red.enroll("ed25519:ops", &"A".repeat(43), &["t".to_owned()], T0)
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .expect("the signer change reaches the other replica");
    assert_eq!(got.as_deref(), Some(&b"ed25519:ops"[..]));
    let listed = red.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    let revoked = red.revoke("ed25519:ops", T0 + 100).await.unwrap().unwrap();
    assert_eq!(revoked.revoked_ms, Some(T0 + 100));
    assert!(red.revoke("ed25519:none", T0).await.unwrap().is_none());
}

// ---------------------------------------------------------------------------------------
// Mailboxes.

use super::mailbox::MemoryMailboxes;
use super::redis::mailbox::RedisMailboxes;
use crate::mailbox::state::{Answer as MAnswer, Dir, Limits as MLimits, Name, Op as MOp};

fn mop() -> impl Strategy<Value = (u8, i64, MOp)> {
    let dir = prop_oneof![Just(Dir::P2c), Just(Dir::C2p)];
    let data = prop_oneof![
        Just(bytes::Bytes::from_static(b"a")),
        Just(bytes::Bytes::from_static(b"bb")),
        Just(bytes::Bytes::from_static(b"\x00\xff\n|")),
    ];
    let sealed = prop_oneof![
        Just(bytes::Bytes::from_static(b"reg-1")),
        Just(bytes::Bytes::from_static(b"reg-2\x00")),
    ];
    let op = prop_oneof![
        3 => Just(MOp::Claim),
        1 => Just(MOp::Erase),
        6 => (dir.clone(), 1u64..8, data, any::<bool>()).prop_map(|(dir, seq, data, notify)| MOp::Put { dir, seq, data, notify }),
        2 => (dir.clone(), 0u64..8, 1usize..4).prop_map(|(dir, after, limit)| MOp::List { dir, after, limit }),
        2 => (dir.clone(), 1u64..8).prop_map(|(dir, seq)| MOp::Get { dir, seq }),
        1 => dir.clone().prop_map(|dir| MOp::Head { dir }),
        1 => (dir.clone(), 0u64..8).prop_map(|(dir, upto)| MOp::Prune { dir, upto }),
        1 => (dir.clone(), 0u64..8).prop_map(|(dir, upto)| MOp::PruneMore { dir, upto }),
        2 => (dir.clone(), sealed.clone()).prop_map(|(dir, sealed)| MOp::Register { dir, sealed }),
        1 => dir.clone().prop_map(|dir| MOp::Unregister { dir }),
        1 => (dir.clone(), sealed).prop_map(|(dir, sealed)| MOp::Forget { dir, sealed }),
        1 => Just(MOp::Socket),
        1 => prop_oneof![Just(crate::mailbox::state::Side::Primary), Just(crate::mailbox::state::Side::Companion)]
            .prop_map(|side| MOp::SignalOpen { side }),
        1 => (prop_oneof![Just(crate::mailbox::state::Side::Primary), Just(crate::mailbox::state::Side::Companion)], 0i64..3_000_000_000_000_000)
            .prop_map(|(side, tat_us)| MOp::SignalClose { side, tat_us }),
        1 => dir.clone().prop_map(|dir| MOp::Ping { dir }),
        1 => dir.prop_map(|dir| MOp::Unping { dir }),
        1 => Just(MOp::Check),
        2 => Just(MOp::Ice),
    ];
    (0u8..3, prop_oneof![4 => Just(0i64), 1 => 0i64..60_000], op)
}

/// `mailbox.lua` behaves as [`super::mailbox`] through the in-process store: the same
/// answers (bearers, buckets and their waits, same/conflict/full, lists cut by limit, prune,
/// the push decision with the foreground and the registration) for random request
/// sequences by two bearers on two mailboxes.
#[test]
fn redis_mailboxes_are_the_in_process_mailboxes() {
    let server = RedisServer::start();
    let rt = runtime();
    let case = std::sync::atomic::AtomicU32::new(0);
    let limits = MLimits {
        idle_ms: 86_400_000,
        max_envelopes: 4,
    };
    runner("store-mailbox-differential", 150)
        .run(&proptest::collection::vec(mop(), 1..80), |ops| {
            let prefix = format!(
                "m{}:",
                case.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            );
            let pool = rt.block_on(redis_store(&server.url(), &prefix, Policy::defaults()));
            let red = RedisMailboxes::new(pool.pool().clone(), &prefix);
            let mem = MemoryMailboxes::default();
            let names = [
                Name::of("chat", "mailbox-one-0000"),
                Name::of("chat", "mailbox-two-0000"),
            ];
            let mut now = T0;
            for (i, (who, dt, op)) in ops.iter().enumerate() {
                now += dt;
                let name = &names[(*who as usize) % 2];
                let bearer = if *who == 2 { "bearer-b" } else { "bearer-a" };
                let a = mem.apply(name, bearer, op, now, limits);
                let b = rt
                    .block_on(red.apply(name, bearer, op, now, limits))
                    .unwrap();
                prop_assert_eq!(a, b, "op {} {:?} by {}", i, op, who);
            }
            Ok(())
        })
        .unwrap();
}

/// Every key of a mailbox shares its hash tag, names no id and no bearer, and expires
/// `idle` after the last write or claim; an erase removes them all at once.
#[tokio::test(flavor = "multi_thread")]
async fn mailbox_keys_share_a_tag_expire_and_name_nothing() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "mk:", Policy::defaults()).await;
    let red = RedisMailboxes::new(store.pool().clone(), "mk:");
    let id = "secret-mailbox-id-0001";
    let bearer_hex = "f".repeat(64);
    let name = Name::of("chat", id);
    let limits = MLimits {
        idle_ms: 5_000,
        max_envelopes: 10,
    };
    assert_eq!(
        red.apply(&name, &bearer_hex, &MOp::Claim, T0, limits)
            .await
            .unwrap(),
        MAnswer::Created
    );
    for dir in [Dir::P2c, Dir::C2p] {
        let put = MOp::Put {
            dir,
            seq: 1,
            data: bytes::Bytes::from_static(b"sealed"),
            notify: false,
        };
        red.apply(&name, &bearer_hex, &put, T0, limits)
            .await
            .unwrap();
    }
    let keys = server.cli(&["KEYS", "mk:*"]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(keys.len(), 5, "{keys:?}");
    let tag = format!("{{mb:{}}}", name.as_str());
    for k in &keys {
        assert!(k.contains(&tag), "{k}");
        assert!(!k.contains(id) && !k.contains(&bearer_hex[..16]), "{k}");
        let ttl: i64 = server.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(ttl > 0 && ttl <= 5_000, "{k}: {ttl}");
    }
    assert_eq!(
        red.apply(&name, &bearer_hex, &MOp::Erase, T0, limits)
            .await
            .unwrap(),
        MAnswer::Done
    );
    assert_eq!(server.cli(&["KEYS", "mk:*"]).trim(), "");
    // Idle expiry by Redis's own clock.
    red.apply(
        &name,
        &bearer_hex,
        &MOp::Claim,
        T0,
        MLimits {
            idle_ms: 300,
            ..limits
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        red.apply(&name, &bearer_hex, &MOp::Head { dir: Dir::P2c }, T0, limits)
            .await
            .unwrap(),
        MAnswer::NotFound
    );
}

/// The script runs unchanged on a real Cluster, for mailboxes on every master, and its
/// `seq` and `erase` messages reach another replica's subscriber.
#[tokio::test(flavor = "multi_thread")]
async fn mailboxes_on_a_cluster_publish_from_the_script() {
    let cluster = RedisCluster::start();
    let s = settings(&cluster.url(), "mc:");
    let a = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(a.wait_ready(Duration::from_secs(10)).await);
    let b = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(b.wait_ready(Duration::from_secs(10)).await);
    let fan_b = RedisFanout::connect(&s, b.pool().clone()).unwrap();
    let red = RedisMailboxes::new(a.pool().clone(), "mc:");
    let limits = MLimits {
        idle_ms: 60_000,
        max_envelopes: 10,
    };
    let mut masters = std::collections::HashSet::new();
    let mut names = Vec::new();
    for i in 0..200 {
        let n = Name::of("chat", &format!("mailbox-{i:010}"));
        if masters.insert(cluster.node_of(&format!("{{mb:{}}}", n.as_str()))) {
            names.push(n);
        }
        if masters.len() == 3 {
            break;
        }
    }
    assert_eq!(names.len(), 3);
    for n in &names {
        let channel = super::fanout::Channel::sharded(red.channel(n));
        let mut sub = fan_b.subscribe(&channel).await.unwrap();
        assert_eq!(
            red.apply(n, "b", &MOp::Claim, T0, limits).await.unwrap(),
            MAnswer::Created
        );
        let put = MOp::Put {
            dir: Dir::C2p,
            seq: 7,
            data: bytes::Bytes::from_static(b"x"),
            notify: true,
        };
        assert!(matches!(
            red.apply(n, "b", &put, T0, limits).await.unwrap(),
            MAnswer::Stored(_)
        ));
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .unwrap();
        let generation = format!("@{T0}");
        assert_eq!(
            got.as_deref(),
            Some(format!("seq c2p 7 {generation}").as_bytes())
        );
        red.apply(n, "b", &MOp::Erase, T0, limits).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .unwrap();
        assert_eq!(
            got.as_deref(),
            Some(format!("erase {generation}").as_bytes())
        );
    }
}

/// A list stops before 1 MiB of stored bytes, the same way in both stores.
#[tokio::test(flavor = "multi_thread")]
async fn lists_stop_before_a_mebibyte_in_both_stores() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "ml:", Policy::defaults()).await;
    let red = RedisMailboxes::new(store.pool().clone(), "ml:");
    let mem = MemoryMailboxes::default();
    let name = Name::of("chat", "mailbox-big-0000");
    let limits = MLimits {
        idle_ms: 60_000,
        max_envelopes: 10,
    };
    let big = bytes::Bytes::from(vec![7u8; 400 * 1024]);
    let mut ops = vec![MOp::Claim];
    for seq in 1..=4 {
        ops.push(MOp::Put {
            dir: Dir::P2c,
            seq,
            data: big.clone(),
            notify: false,
        });
    }
    ops.push(MOp::List {
        dir: Dir::P2c,
        after: 0,
        limit: 64,
    });
    ops.push(MOp::List {
        dir: Dir::P2c,
        after: 2,
        limit: 64,
    });
    let mut answers = Vec::new();
    for op in &ops {
        let a = mem.apply(&name, "b", op, T0, limits);
        let b = red.apply(&name, "b", op, T0, limits).await.unwrap();
        assert_eq!(a, b, "{op:?}");
        answers.push(a);
    }
    let MAnswer::Listed {
        envelopes,
        last,
        more,
    } = &answers[5]
    else {
        panic!("{:?}", answers[5]);
    };
    assert_eq!((envelopes.len(), *last, *more), (2, 4, true));
    let MAnswer::Listed {
        envelopes, more, ..
    } = &answers[6]
    else {
        panic!("{:?}", answers[6]);
    };
    assert_eq!((envelopes.len(), *more), (2, false));
}
