//! The retry queue on Redis against the in-process queue: the scripts bound to it, fencing,
//! sealing, move-aside, TTLs and the hand-over of a degraded replica's items.

use super::*;

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
            let memory = MemoryQueue::default();
            // Both through the contract they share.
            let mem: &dyn QueueBackend = &memory;
            let mut now = T0;
            // Claims as (memory's, Redis's), with the claims they superseded kept too.
            let mut claims: Vec<(Claimed, Claimed)> = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    QOp::Put { id, due_dt } => {
                        let item = pending(*id, now);
                        let a = rt
                            .block_on(mem.put(&item, now + due_dt, 0, now))
                            .map_err(|_| "full");
                        let b = rt
                            .block_on(red.put(&item, now + due_dt, 0, now))
                            .map_err(|_| "full");
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                    }
                    QOp::Claim { dt, lease, max } => {
                        now += dt;
                        let a = rt
                            .block_on(mem.claim(now, now + lease, *max))
                            .unwrap()
                            .items;
                        let b = rt
                            .block_on(red.claim_shard(0, now, now + lease, *max))
                            .unwrap();
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
                                rt.block_on(mem.ack(&ma.item.id, fa)).unwrap(),
                                rt.block_on(red.ack(&mb.item.id, fb)).unwrap(),
                            ),
                            QOp::Reschedule { due_dt, .. } => (
                                rt.block_on(mem.put(&ma.item, now + due_dt, fa, now))
                                    .unwrap(),
                                rt.block_on(red.put(&mb.item, now + due_dt, fb, now))
                                    .unwrap(),
                            ),
                            _ => unreachable!(),
                        };
                        prop_assert_eq!(a, b, "op {} {:?}", i, op);
                    }
                }
            }
            // The same numbers (every item lives in shard 0, and none was set aside).
            let (a, b) = (rt.block_on(mem.stats()), rt.block_on(red.stats()));
            prop_assert_eq!(a.unwrap(), b.unwrap());
            Ok(())
        })
        .unwrap();
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
        .claim_shard(shard, T0, T0 + 1_000, 10)
        .await
        .unwrap()
        .items
        .remove(0);
    // A's lease runs out while it stalls; B claims the item.
    let second = b
        .claim_shard(shard, T0 + 1_000, T0 + 2_000, 10)
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
        .claim_shard(shard, T0 + 1_500, T0 + 3_000, 10)
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
    // A second one settles a signed push's target: what it settles is kept in the clear
    // beside it, so the claim that cannot open it still names it.
    let signed = Pending {
        settles: Some(("push-9".into(), "0123456789abcdef".into())),
        ..pending(4, T0)
    };
    old.put(&signed, T0, 0, T0).await.unwrap();
    let refs_key = format!("aside:{{q{shard}}}:refs");
    assert_eq!(server.cli(&["HLEN", &refs_key]).trim(), "1");
    let got = new.claim_shard(shard, T0, T0 + 1_000, 10).await.unwrap();
    assert!(got.items.is_empty());
    assert_eq!(got.unopenable, 2);
    assert_eq!(
        got.set_aside,
        vec![Unopened {
            settles: ("push-9".into(), "0123456789abcdef".into()),
            expires_ms: signed.expires_ms(),
        }]
    );
    assert_eq!(server.cli(&["HLEN", &refs_key]).trim(), "0");
    let stats = new.stats().await.unwrap();
    assert_eq!((stats.depth, stats.aside), (0, 2));
    let aside_key = format!("aside:{{q{shard}}}:aside");
    assert_eq!(server.cli(&["HLEN", &aside_key]).trim(), "2");
    let pttl: i64 = server.cli(&["PTTL", &aside_key]).trim().parse().unwrap();
    assert!(pttl > 6 * 24 * 3_600_000, "kept for the operator: {pttl}");
    // The blob set aside is the sealed item, not the clear one.
    let blob = server.cli(&["HGET", &aside_key, &item.id]);
    assert!(!blob.contains("abab"), "no token in the clear");

    // TTLs: a queued item's keys live until its staleness window plus a margin.
    let live = Pending {
        settles: Some(("push-10".into(), "fedcba9876543210".into())),
        ..pending(3, T0)
    };
    old.put(&live, T0 + 100, 0, T0).await.unwrap();
    let s = RedisQueue::shard_of(&live.id);
    for k in ["due", "items", "born", "refs"] {
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
        let fanout = Fanout::redis(&s, redis.pool().clone(), crate::clock::Clock::System).unwrap();
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
    // B claims it from Redis (it sits in one of the shards; look through them all). The
    // put that failed may have run, so the item waits out the hold first.
    let at = T0 + crate::store::queue::UNSURE_HOLD_MS;
    let mut found = Vec::new();
    for _ in 0..crate::store::queue::redis::SHARDS {
        found.extend(b.queue().claim(at - 1, at + 1_000, 10).await.leases);
    }
    assert!(found.is_empty(), "{found:?}");
    for _ in 0..crate::store::queue::redis::SHARDS {
        found.extend(b.queue().claim(at, at + 1_000, 10).await.leases);
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].claimed.item, item);
    assert_eq!(found[0].origin, crate::store::queue::Origin::Shared);
}

/// A queue whose calls give up after 300 ms, as a replica's do.
async fn impatient_queue(server: &RedisServer, prefix: &str) -> RedisQueue {
    let mut s = settings(&server.url(), prefix);
    s.timeout = Duration::from_millis(300);
    let store = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(store.wait_ready(Duration::from_secs(10)).await);
    RedisQueue::new(
        store.pool().clone(),
        prefix,
        Sealer::new(&QueueKey::derive(b"k")),
    )
}

/// A claim or a put whose reply is lost ran all the same (`CLIENT PAUSE ... WRITE` while
/// it is sent: the caller gives up, Redis runs it when the pause ends). A lost claim
/// leased its items: no other claimer gets them before the lease runs out, and the
/// claimer whose reply was lost gets them, once, at its next claim of the shard (the claim
/// asked again). A lost put queued its item, and sending it again (the same id) leaves one
/// item, not two.
#[tokio::test(flavor = "multi_thread")]
async fn claims_and_puts_whose_replies_are_lost_ran_once() {
    let server = RedisServer::start();
    let lost = impatient_queue(&server, "lostq:").await;
    let other = queue_on(&server, "lostq:", b"k").await;
    let item = pending(5, T0);
    let shard = RedisQueue::shard_of(&item.id);
    // Each script loaded first, so the paused call is the script itself.
    lost.put(&item, T0, 0, T0).await.unwrap();
    assert_eq!(lost.stats().await.unwrap().depth, 1);
    let loaded = lost.claim_shard(shard, T0, T0 + 10, 10).await.unwrap();
    assert_eq!(loaded.items.len(), 1);

    server.cli(&["CLIENT", "PAUSE", "800", "WRITE"]);
    let r = lost.claim_shard(shard, T0 + 100, T0 + 30_000, 10).await;
    assert!(r.is_err(), "the claim's reply is lost: {r:?}");
    // Once the pause ends the claim has run: the item is leased, and no other claimer gets
    // it before the lease ends.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before = other
        .claim_shard(shard, T0 + 29_999, T0 + 60_000, 10)
        .await
        .unwrap();
    assert!(before.items.is_empty(), "leased by the lost claim");
    // The claimer whose reply was lost gets what its claim leased at its next claim of the
    // shard (before, the item waited out the lease: 30 s of a page's delay).
    let again = lost
        .claim_shard(shard, T0 + 1_000, T0 + 60_000, 10)
        .await
        .unwrap();
    assert_eq!(
        again.items.len(),
        1,
        "the lost claim's item, taken up again"
    );
    assert_eq!(again.items[0].item.id, item.id);
    // Once only: the claim is not asked again.
    let twice = lost
        .claim_shard(shard, T0 + 1_100, T0 + 60_000, 10)
        .await
        .unwrap();
    assert!(twice.items.is_empty(), "{:?}", twice.items.len());
    assert_eq!(
        lost.ack(&item.id, again.items[0].fence).await.unwrap(),
        Fenced::Done
    );
    assert_eq!(other.stats().await.unwrap().depth, 0);

    // A put whose reply is lost, sent again with the same id: one item.
    server.cli(&["CLIENT", "PAUSE", "800", "WRITE"]);
    let r = lost.put(&item, T0 + 1_000, 0, T0).await;
    assert!(r.is_err(), "the put's reply is lost: {r:?}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(other.stats().await.unwrap().depth, 1, "the lost put ran");
    assert_eq!(
        lost.put(&item, T0 + 1_000, 0, T0).await.unwrap(),
        Fenced::Done
    );
    assert_eq!(other.stats().await.unwrap().depth, 1);
    let got = other
        .claim_shard(shard, T0 + 1_000, T0 + 60_000, 10)
        .await
        .unwrap();
    assert_eq!(got.items.len(), 1);
}
