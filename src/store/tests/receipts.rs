//! Receipts and signers of signed pushes on Redis against the in-process store.

use super::*;

use crate::signed::receipt::lifecycle::{
    Begun, Changes, Claim, Guard, NewReceipt, State as RState, Update as RUpdate, Updated,
};
use crate::store::receipts::memory::MemoryReceipts;

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
        claim: CLAIM,
        kept: None,
    }
}

/// Changes to push `push_id`'s targets.
fn changes<'a>(push_id: &'a str, updates: &'a [RUpdate], guard: Guard, ttl_ms: i64) -> Changes<'a> {
    Changes {
        push_id,
        updates,
        guard,
        ttl_ms,
    }
}

const CLAIM: Claim<'static> = Claim {
    owner: "owner",
    lease_ms: 600_000,
};
use crate::store::receipts::{events_channel, ReceiptBackend, RedisReceipts};
use crate::store::signers::{signers_channel, RedisSigners, SignerBackend};

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

/// `receipt_begin.lua` and `receipt_update.lua` behave as [`crate::store::receipts`] through the
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
            let red = RedisReceipts::new(pool.pool().clone(), &prefix);
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
                        let new = NewReceipt {
                            claim,
                            kept: None,
                            ..new_receipt(&id, &h, &t, ttl)
                        };
                        let a = mem.begin(&new, now);
                        let b = rt.block_on(red.begin(&new, now)).unwrap();
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
                        let a = mem.update(&changes(&id, &u, guard, ttl), now).0;
                        let b = rt
                            .block_on(red.update(&changes(&id, &u, guard, ttl), now))
                            .unwrap();
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                        // And the receipt as stored after it.
                        let a = mem.get(&id, now);
                        let b = rt.block_on(red.get(&id, now)).unwrap();
                        prop_assert_eq!(a, b, "after op {} {:?}", i, op);
                    }
                    ROp::Get { push } => {
                        let id = push_id(*push);
                        let a = mem.get(&id, now);
                        let b = rt.block_on(red.get(&id, now)).unwrap();
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
    let red = RedisReceipts::new(store.pool().clone(), "lease:");
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
                .begin(
                    &NewReceipt {
                        claim,
                        kept: None,
                        ..new_receipt(&id, "sha256:x", &t, 600_000)
                    },
                    now,
                )
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
        red.update(&changes(&id, &[fail(&t[0])], Guard::Lapsed, 600_000), ahead)
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
        red.update(&changes(&id, &[deliver], Guard::Always, 600_000), T0)
            .await
            .unwrap(),
        Updated::Applied(1)
    );
    assert_eq!(
        red.update(&changes(&id, &[fail(&t[1])], Guard::Lapsed, 600_000), T0)
            .await
            .unwrap(),
        Updated::Held
    );
    assert_eq!(begin(claim("b", short), T0).await, Some(true));
    lapse().await;
    assert_eq!(
        red.update(&changes(&id, &[fail(&t[1])], Guard::Lapsed, 600_000), T0)
            .await
            .unwrap(),
        Updated::Applied(2)
    );
    // Settled: nobody takes a lease any more.
    assert_eq!(begin(claim("a", long), T0).await, Some(false));
    let r = red.get(&id, T0).await.unwrap().unwrap();
    assert!(r.settled);
}

/// A receipt's two keys and the signer keys all expire or are bounded, name no token, and
/// hold no token: only 16-hex target hashes.
#[tokio::test(flavor = "multi_thread")]
async fn receipt_keys_expire_and_hold_no_token() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "rk:", Policy::defaults()).await;
    let red = RedisReceipts::new(store.pool().clone(), "rk:");
    let device = token(7);
    let target = device.hash16();
    let id = push_id(1);
    let b = red
        .begin(
            &new_receipt(&id, "sha256:x", std::slice::from_ref(&target), 600_000),
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
        red.update(&changes(&id, &[update], Guard::Always, 600_000), T0 + 5)
            .await
            .unwrap(),
        Updated::Applied(1)
    );
    let r = red.get(&id, T0).await.unwrap().unwrap();
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
    let fan_b = Fanout::redis(&s, b.pool().clone(), crate::clock::Clock::System).unwrap();
    let red = RedisReceipts::new(a.pool().clone(), "cl:");
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
        let channel = events_channel("cl:", id);
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
            T0,
        )
        .await
        .unwrap();
        let u = RUpdate {
            target: t.clone(),
            state: RState::Delivered,
            detail: String::new(),
        };
        red.update(&changes(id, &[u], Guard::Always, 600_000), T0 + 1)
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
    let red = RedisSigners::new(a.pool().clone(), "cl:");
    let channel = signers_channel("cl:");
    let mut sub = fan_b.subscribe(&channel).await.unwrap();
    let (key, topics) = ("A".repeat(43), ["t".to_owned()]);
    let ops = crate::signed::enrolment::Enrolment {
        key_id: "ed25519:ops",
        public_key: &key,
        topics: &topics,
    };
    red.enroll(&ops, T0).await.unwrap();
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
