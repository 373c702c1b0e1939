//! The Redis store against a real `redis-server`: the same decisions as the in-process
//! store (differential property test), one round trip per admission, a TTL on every key, no
//! token in any key, the memory a device costs, and the behaviour while Redis is away.

mod common;

use std::time::Duration;

use common::redis::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use sealrelay::envelope::DeviceToken;
use sealrelay::policy::{DeadReason, Decision, Environment, Policy, Ticket};
use sealrelay::store::memory::MemoryStore;
use sealrelay::store::redis::{RedisSettings, RedisStore};
use sealrelay::store::Admission;

const T0: i64 = 1_790_000_000_000;

fn small_policy() -> Policy {
    Policy::from_seconds(5, 3, 20, 10, 30, 4, 0.5)
}

fn settings(url: &str, prefix: &str) -> RedisSettings {
    RedisSettings {
        url: url.to_owned(),
        prefix: prefix.to_owned(),
        pool_size: 2,
        timeout: Duration::from_millis(2000),
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
}

fn op() -> impl Strategy<Value = Op> {
    let dt = prop_oneof![
        4 => Just(0i64),
        6 => 0i64..3_000,
        3 => 3_000i64..12_000,
        1 => 12_000i64..40_000,
        1 => -3_000i64..0, // a replica whose clock lags
    ];
    prop_oneof![
        10 => (0u8..5, 0u8..16, proptest::option::of(0u8..16), dt.clone())
            .prop_map(|(dev, cid, flap, dt)| Op::Admit { dev, cid, flap, dt }),
        2 => (any::<usize>(), dt).prop_map(|(pick, dt)| Op::Rollback { pick, dt }),
        1 => (0u8..3, any::<bool>()).prop_map(|(dev, sandbox)| Op::Remember { dev, sandbox }),
        2 => (0u8..3, 0u8..16, 1i64..60_000).prop_map(|(dev, cid, for_ms)| Op::Hold { dev, cid, for_ms }),
        1 => (0u8..3, 0u8..16).prop_map(|(dev, cid)| Op::Release { dev, cid }),
        1 => (3u8..5).prop_map(|dev| Op::Bury { dev }),
    ]
}

/// Random event sequences (admissions on five devices, rollbacks, remembered environments,
/// holds and releases of queued alerts, dead tokens, time steps including a lagging clock)
/// give identical decisions, Retry-After values and remembered environments in the
/// in-process store and in Redis.
#[test]
fn same_decisions_in_memory_and_in_redis() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(PtConfig {
        cases: 150,
        failure_persistence: None,
        ..PtConfig::default()
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    runner
        .run(&proptest::collection::vec(op(), 1..120), |ops| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let policy = small_policy();
            let mem = MemoryStore::new(policy.clone());
            let red = rt.block_on(redis_store(&server.url(), &format!("case{case}:"), policy));
            let mut now = T0;
            let mut tickets: Vec<(DeviceToken, String, String, Ticket)> = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::Admit { dev, cid, flap, dt } => {
                        now += dt;
                        let d = token(*dev);
                        let c = format!("{cid:032x}");
                        let f = flap.map_or(c.clone(), |f| format!("{:032x}", 1000 + u32::from(f)));
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
                            DeadReason::Unregistered
                        } else {
                            DeadReason::ExpiredToken
                        };
                        mem.bury(&token(*dev), r, now, 86_400_000);
                        rt.block_on(red.bury(&token(*dev), r, 86_400_000)).unwrap();
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
    let port = common::redis::free_port();
    let mut s = settings(&format!("redis://127.0.0.1:{port}"), "down:");
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
    let _server = RedisServer::start_with(port, &[]);
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
