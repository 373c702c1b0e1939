//! The device policy on Redis against the in-process store: the admission, rollback and
//! client-bucket scripts bound to their Rust mirrors, one round trip per admission, a TTL on
//! every key and no token in any, the memory a device costs, and Redis away.

use super::*;

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
                            let a: Admission = mem.admit(AlertKey::new(&d, &c, &f), now);
                            let b = rt
                                .block_on(red.admit(AlertKey::new(&d, &c, &f), now))
                                .unwrap();
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
                            mem.rollback(AlertKey::new(&d, &c, &f), &t, now);
                            rt.block_on(red.rollback(AlertKey::new(&d, &c, &f), &t, now))
                                .unwrap();
                        }
                        Op::Hold { dev, cid, for_ms } => {
                            let c = format!("{cid:032x}");
                            let hold = Mark::Hold {
                                collapse_id: &c,
                                until_ms: now + for_ms,
                            };
                            mem.mark(&token(*dev), hold, now);
                            rt.block_on(red.mark(&token(*dev), hold, now)).unwrap();
                        }
                        Op::Release { dev, cid } => {
                            let c = format!("{cid:032x}");
                            let release = Mark::Release { collapse_id: &c };
                            mem.mark(&token(*dev), release, now);
                            rt.block_on(red.mark(&token(*dev), release, now)).unwrap();
                        }
                        Op::Bury { dev } => {
                            let r = if dev % 2 == 0 {
                                DeadReason::Uninstalled
                            } else {
                                DeadReason::Expired
                            };
                            let dead = Mark::Dead {
                                reason: r,
                                ttl_ms: 864_000_000,
                            };
                            mem.mark(&token(*dev), dead, now);
                            rt.block_on(red.mark(&token(*dev), dead, now)).unwrap();
                        }
                        Op::Remember { dev, sandbox } => {
                            let env = if *sandbox {
                                Environment::Sandbox
                            } else {
                                Environment::Production
                            };
                            mem.mark(&token(*dev), Mark::Env(env), now);
                            rt.block_on(red.mark(&token(*dev), Mark::Env(env), now))
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
        let m = mem.admit(AlertKey::new(&d, cid, &f), T0);
        let r = red.admit(AlertKey::new(&d, cid, &f), T0).await.unwrap();
        assert_eq!(m, r);
        let Decision::Forward(t) = m.decision else {
            panic!("{m:?}")
        };
        tickets.push(t);
    }
    mem.rollback(AlertKey::new(&d, &a, &f), &tickets[0], T0);
    red.rollback(AlertKey::new(&d, &a, &f), &tickets[0], T0)
        .await
        .unwrap();
    let m = mem.admit(AlertKey::new(&d, &c, &f), T0 + 1);
    let r = red.admit(AlertKey::new(&d, &c, &f), T0 + 1).await.unwrap();
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
                    .block_on(red.client_take(
                        &block,
                        now,
                        crate::policy::Bucket {
                            capacity,
                            emission_us,
                        },
                    ))
                    .unwrap();
                prop_assert_eq!(got, expected, "step {}", i);
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
        .admit(AlertKey::new(&token(200), &format!("{:032x}", 0), "f"), T0)
        .await
        .unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let n = 100;
    for i in 0..n {
        let d = token((i % 50) as u8);
        let a = store
            .admit(
                AlertKey::new(&d, &format!("{i:032x}"), &format!("{i:032x}")),
                T0 + 1,
            )
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

/// The write system calls this process has made (`syscw` of `/proc/self/io`: `write` and
/// `writev` alike). nextest runs each test in a process of its own.
fn writes_so_far() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("syscw: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("syscw in /proc/self/io")
}

/// Admissions in flight together on one connection share a write (the vendored fred's
/// fourth patch: scripts flushed when nothing waits behind them): 64 of them, all waiting
/// when the client's task runs, cost at most a few `writev`s, not one each, and every one
/// of them is answered.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_admissions_share_a_write() {
    let server = RedisServer::start();
    let mut s = settings(&server.url(), "batch:");
    s.pool_size = 1;
    let store = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(store.wait_ready(Duration::from_secs(10)).await);
    // Load the script once, so that every call below is one EVALSHA.
    store
        .admit(AlertKey::new(&token(200), &format!("{:032x}", 0), "f"), T0)
        .await
        .unwrap();
    let n = 64u32;
    let keys: Vec<_> = (0..n)
        .map(|i| (token(i as u8), format!("{i:032x}")))
        .collect();
    let before = writes_so_far();
    let admitted = futures_util::future::join_all(
        keys.iter()
            .map(|(d, id)| store.admit(AlertKey::new(d, id, id), T0 + 1)),
    )
    .await;
    let writes = writes_so_far() - before;
    for a in admitted {
        assert!(matches!(a.unwrap().decision, Decision::Forward(_)));
    }
    assert!(
        writes <= 4,
        "{n} concurrent admissions took {writes} writes (one each before the patch)"
    );
}

/// A script sent after a `QUIT` with commands queued behind it, and a reconnection, is
/// answered at once. The router drops the commands still queued when it ends; fred did not
/// count them out of its queued-commands counter, which then never read zero again, and
/// with scripts flushed only when nothing is queued (the vendored fred's fourth patch) the
/// next script waited in the buffer for 200 more commands. The store's clients are built
/// like this one (`fail_fast` off), and the store sends `QUIT` at a Sentinel's
/// `+try-failover` under traffic.
#[tokio::test(flavor = "current_thread")]
async fn a_script_after_a_quit_with_commands_behind_it_is_answered() {
    use fred::prelude::*;
    let server = RedisServer::start();
    let mut config = Config::from_url(&server.url()).unwrap();
    config.fail_fast = false;
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .with_connection_config(|c| c.max_command_attempts = 1)
        .set_policy(ReconnectPolicy::new_constant(0, 50))
        .build()
        .unwrap();
    let step = Duration::from_secs(5);
    let connect = || {
        // The router's task, detached: it ends with the client's `QUIT`.
        drop(client.connect());
        tokio::time::timeout(step, client.wait_for_connect())
    };
    connect().await.expect("connected").unwrap();
    let script = || client.eval::<i64, _, _, _>("return 1", (), Vec::<String>::new());
    // On this one thread the router runs only once all of these are queued: `QUIT` first,
    // then 100 scripts behind it, which it drops.
    let (quit, behind) = tokio::time::timeout(step, async {
        tokio::join!(
            client.quit(),
            futures_util::future::join_all((0..100).map(|_| script()))
        )
    })
    .await
    .expect("QUIT and the scripts behind it end");
    quit.unwrap();
    assert!(behind.iter().all(Result::is_err), "{behind:?}");
    connect().await.expect("reconnected").unwrap();
    let lone = tokio::time::timeout(step, script()).await;
    assert!(matches!(lone, Ok(Ok(1))), "{lone:?}");
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
                .admit(AlertKey::new(&d, &c, &c), T0 + i64::from(j) * 100)
                .await
                .unwrap()
                .decision
            {
                if j % 3 == 0 {
                    store
                        .rollback(AlertKey::new(&d, &c, &c), &t, T0 + 50_000)
                        .await
                        .unwrap();
                }
            }
        }
        store
            .mark(&d, Mark::Env(Environment::Sandbox), T0 + 60_000)
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
        store.admit(AlertKey::new(&d, &c, &c), T0).await.unwrap();
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
        .admit(AlertKey::new(&token(1), &format!("{:032x}", 1), "f"), T0)
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
            .admit(AlertKey::new(&token(1), &format!("{:032x}", 1), "f"), T0)
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
    let fanout = Fanout::redis(&s, redis.pool().clone(), crate::clock::Clock::System).unwrap();
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
        .admit_in(true, AlertKey::new(&d, "c1", "f"), now)
        .await
        .unwrap();
    assert!(matches!(a.decision, Decision::Forward(_)), "{a:?}");
    server.stop();
    assert!(store
        .policy()
        .admit_in(true, AlertKey::new(&d, "c2", "f"), now)
        .await
        .is_err());
    assert!(
        store.degraded(),
        "the failure still degrades the replica for v1"
    );
    let v1 = store
        .policy()
        .admit(AlertKey::new(&d, "c3", "f"), now)
        .await
        .unwrap();
    assert!(matches!(v1.decision, Decision::Forward(_)), "{v1:?}");
    assert!(matches!(
        store
            .policy()
            .admit_in(true, AlertKey::new(&d, "c4", "f"), now)
            .await,
        Err(crate::store::StoreError::Degraded)
    ));
}
