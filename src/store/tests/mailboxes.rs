//! Mailboxes on Redis against the in-process store: the script bound to the rules, keys,
//! events published from the script on a Cluster, list limits.

use super::*;

use crate::mailbox::state::{Answer as MAnswer, Dir, Limits as MLimits, Name, Op as MOp};
use crate::store::mailbox::memory::MemoryMailboxes;
use crate::store::mailbox::{MailboxBackend, RedisMailboxes};

/// One request on Redis, every part an argument (the shape these tests read best).
async fn run(
    red: &RedisMailboxes,
    name: &Name,
    bearer: &str,
    op: &MOp,
    now_ms: i64,
    limits: MLimits,
) -> Result<MAnswer, crate::store::StoreError> {
    let req = crate::mailbox::state::Request {
        name,
        bearer,
        op,
        limits,
    };
    red.apply(&req, now_ms).await
}

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
        2 => prop_oneof![Just(crate::mailbox::state::Side::Primary), Just(crate::mailbox::state::Side::Companion)]
            .prop_map(|side| MOp::SignalOpen { side }),
        2 => (prop_oneof![Just(crate::mailbox::state::Side::Primary), Just(crate::mailbox::state::Side::Companion)], 0u64..4, prop_oneof![Just(0u64), 1u64..40, 40u64..500, Just(900u64)])
            .prop_map(|(side, socket, relayed)| MOp::SignalSpend { side, socket, relayed }),
        1 => dir.clone().prop_map(|dir| MOp::Ping { dir }),
        1 => dir.prop_map(|dir| MOp::Unping { dir }),
        1 => Just(MOp::Check),
        2 => Just(MOp::Ice),
    ];
    (0u8..3, prop_oneof![4 => Just(0i64), 1 => 0i64..60_000], op)
}

/// `mailbox.lua` behaves as [`crate::store::mailbox`] through the in-process store: the same
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
            let red = RedisMailboxes::timed(pool.pool().clone(), &prefix, true);
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
                    .block_on(run(&red, name, bearer, op, now, limits))
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
    let red = RedisMailboxes::timed(store.pool().clone(), "mk:", true);
    let id = "secret-mailbox-id-0001";
    let bearer_hex = "f".repeat(64);
    let name = Name::of("chat", id);
    let limits = MLimits {
        idle_ms: 5_000,
        max_envelopes: 10,
    };
    assert_eq!(
        run(&red, &name, &bearer_hex, &MOp::Claim, T0, limits)
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
        run(&red, &name, &bearer_hex, &put, T0, limits)
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
        run(&red, &name, &bearer_hex, &MOp::Erase, T0, limits)
            .await
            .unwrap(),
        MAnswer::Done
    );
    assert_eq!(server.cli(&["KEYS", "mk:*"]).trim(), "");
    // Idle expiry by Redis's own clock.
    run(
        &red,
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
        run(
            &red,
            &name,
            &bearer_hex,
            &MOp::Head { dir: Dir::P2c },
            T0,
            limits
        )
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
    let fan_b = Fanout::redis(&s, b.pool().clone(), crate::clock::Clock::System).unwrap();
    let red = RedisMailboxes::timed(a.pool().clone(), "mc:", true);
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
        let channel = crate::store::fanout::Channel::sharded(red.channel(n));
        let mut sub = fan_b.subscribe(&channel).await.unwrap();
        assert_eq!(
            run(&red, n, "b", &MOp::Claim, T0, limits).await.unwrap(),
            MAnswer::Created
        );
        let put = MOp::Put {
            dir: Dir::C2p,
            seq: 7,
            data: bytes::Bytes::from_static(b"x"),
            notify: true,
        };
        assert!(matches!(
            run(&red, n, "b", &put, T0, limits).await.unwrap(),
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
        run(&red, n, "b", &MOp::Erase, T0, limits).await.unwrap();
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
    let red = RedisMailboxes::timed(store.pool().clone(), "ml:", true);
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
        let b = run(&red, &name, "b", op, T0, limits).await.unwrap();
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

/// The relay's mailboxes are timed by the store's clock, not the caller's (issue 35: a
/// replica whose clock is two minutes ahead saw a spent bucket as full). 120 envelopes
/// spend the bucket at one caller's instant; 20 more from a caller two minutes ahead find
/// it as spent (at most the one or two tokens the real elapsed time refills).
#[tokio::test(flavor = "multi_thread")]
async fn mailbox_buckets_run_on_the_store_clock() {
    let server = RedisServer::start();
    let store = redis_store(&server.url(), "sc:", Policy::defaults()).await;
    let red = RedisMailboxes::new(store.pool().clone(), "sc:");
    let name = Name::of("chat", "mailbox-skew-0000");
    let limits = MLimits {
        idle_ms: 600_000,
        max_envelopes: 1_000,
    };
    let now = crate::clock::Clock::System.now_ms();
    assert_eq!(
        run(&red, &name, "b", &MOp::Claim, now, limits)
            .await
            .unwrap(),
        MAnswer::Created
    );
    let put = |seq: u64| MOp::Put {
        dir: Dir::C2p,
        seq,
        data: bytes::Bytes::from_static(b"x"),
        notify: false,
    };
    let mut stored = 0;
    for seq in 1..=125 {
        if let MAnswer::Stored(_) = run(&red, &name, "b", &put(seq), now, limits).await.unwrap() {
            stored += 1;
        }
    }
    assert!((120..=121).contains(&stored), "{stored} stored at first");
    let ahead = now + 120_000;
    let mut more = 0;
    for seq in 200..220 {
        if let MAnswer::Stored(_) = run(&red, &name, "b", &put(seq), ahead, limits)
            .await
            .unwrap()
        {
            more += 1;
        }
    }
    assert!(
        more <= 2,
        "{more} of 20 stored by a caller two minutes ahead"
    );
    // A claim's generation is the store's instant too, not the caller's.
    let g: i64 = server
        .cli(&["HGET", &red.keys(&name)[0], "g"])
        .trim()
        .parse()
        .unwrap();
    assert!((g - now).abs() < 60_000, "generation {g} against {now}");
}

/// A signal spend whose reply is lost (`CLIENT PAUSE ... WRITE` while it is sent: the caller
/// gives up after 300 ms, Redis runs it when the pause ends) and is sent again charges its
/// frames once: a socket sends its running count, and the store charges only what it has
/// not charged that socket yet. 300 frames spent, lost, sent again, then 100 more: all fit
/// in the bucket of 400 (charged twice, 700 would not, with about 60 refilled meanwhile).
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_spend_sent_again_after_a_lost_reply_charges_once() {
    use crate::mailbox::state::Side;
    let server = RedisServer::start();
    let mut s = settings(&server.url(), "ss:");
    s.timeout = Duration::from_millis(300);
    let store = RedisStore::connect(&s, Policy::defaults()).unwrap();
    assert!(store.wait_ready(Duration::from_secs(10)).await);
    let red = RedisMailboxes::new(store.pool().clone(), "ss:");
    let name = Name::of("chat", "mailbox-spend-000");
    let limits = MLimits {
        idle_ms: 600_000,
        max_envelopes: 1_000,
    };
    let now = crate::clock::Clock::System.now_ms();
    assert_eq!(
        run(&red, &name, "b", &MOp::Claim, now, limits)
            .await
            .unwrap(),
        MAnswer::Created
    );
    let opened = run(
        &red,
        &name,
        "b",
        &MOp::SignalOpen {
            side: Side::Primary,
        },
        now,
        limits,
    )
    .await
    .unwrap();
    let MAnswer::SignalOpened { socket, generation } = opened else {
        panic!("{opened:?}");
    };
    let spend = |relayed| MOp::SignalSpend {
        side: Side::Primary,
        socket,
        relayed,
    };
    server.cli(&["CLIENT", "PAUSE", "700", "WRITE"]);
    let lost = run(&red, &name, "b", &spend(300), now, limits).await;
    assert!(lost.is_err(), "the spend's reply is lost: {lost:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        run(&red, &name, "b", &spend(300), now, limits)
            .await
            .unwrap(),
        MAnswer::Opened(generation)
    );
    assert_eq!(
        run(&red, &name, "b", &spend(400), now, limits)
            .await
            .unwrap(),
        MAnswer::Opened(generation),
        "the lost spend was charged twice"
    );
    // The bucket is spent all the same: 100 more do not fit.
    assert!(matches!(
        run(&red, &name, "b", &spend(500), now, limits)
            .await
            .unwrap(),
        MAnswer::RateLimited(_)
    ));
}
