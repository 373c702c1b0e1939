//! Mailboxes across two replicas sharing one Redis, standalone and a real three-master
//! Cluster: a claim seen by both, buckets shared (N replicas do not grant N times the
//! limit), a watch on one replica sees a write on the other, a push asked on one replica is
//! sent with the registration made on the other, the signal sides on different replicas
//! (presence, frames, replacement), and an erase closing every socket on both.

use std::time::{Duration, Instant};

use crate::common::mailbox::*;
use crate::common::process::RelayProcess;
use crate::common::*;
use futures_util::StreamExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

pub(super) async fn two(url: &str) -> (Harness, Harness) {
    two_clocks(url, sealrelay::clock::Clock::System).await
}

/// Two replicas on one Redis, the second on clock `b`.
pub(super) async fn two_clocks(url: &str, b: sealrelay::clock::Clock) -> (Harness, Harness) {
    let opts = || {
        Options::default()
            .var("REDIS_URL", url)
            .var("RELAY_APPS", "chat:push=com.example.cronstable,signal")
            .var(
                "RELAY_QUEUE_KEY",
                "mailbox-replicas-test-queue-key-0123456789",
            )
    };
    let a = Harness::with(opts()).await;
    let b = Harness::with(opts().clock(b)).await;
    for h in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while h.admin("/readyz").await.status != 200 {
            assert!(Instant::now() < deadline, "a replica never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    (a, b)
}

async fn across(url: &str, n: u32) {
    let (a, b) = two(url).await;
    let ma = Mb::new(a.addr(), "chat", &mailbox_id(n), &bearer(n));
    let mb = ma.at(b.addr());

    // A claim on A holds on B.
    assert_eq!(ma.claim().await, 201);
    assert_eq!(mb.claim().await, 204);
    assert_eq!(mb.with_bearer(&bearer(n + 1)).claim().await, 403);

    // The envelope bucket is shared: 120 between both replicas, plus what refilled (2 a
    // second) while the writes went on.
    let mut stored = 0;
    let started = Instant::now();
    for seq in 1..=140u64 {
        let m = if seq % 2 == 0 { &ma } else { &mb };
        let r = m.put("c2p", seq, b"x").await;
        match r.status {
            201 => stored += 1,
            429 => assert_eq!(r.body, r#"{"error":"rate_limited","status":429}"#),
            s => panic!("{s} {}", r.body),
        }
    }
    let refilled = started.elapsed().as_millis() as u64 / 500;
    assert!(
        (120..=121 + refilled).contains(&stored),
        "{stored} stored across two replicas ({refilled} refilled while writing)"
    );

    // A watch on A sees a write on B.
    // (The bucket refills 2 a second: wait for the writes below.)
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let mut w = ma.watch("p2c").await;
    assert_eq!(mb.put("p2c", 1, b"hello").await.status, 201);
    assert_eq!(next_text(&mut w, WAIT).await.as_deref(), Some("seq 1"));

    // Registered on A, asked on B: B opens the registration with the bearer and pushes.
    let token = device(900 + n);
    let reg =
        json!({"service": "apns", "token": token, "environment": "production", "tag": "tag-x"});
    assert_eq!(ma.register("p2c", &reg).await.status, 204);
    assert_eq!(mb.put_notify("p2c", 2, b"x", "alert").await.status, 201);
    let deadline = Instant::now() + WAIT;
    while b.prod.received_for(&token).is_empty() {
        assert!(Instant::now() < deadline, "B never pushed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(a.prod.received_for(&token).is_empty());
    assert_eq!(next_text(&mut w, WAIT).await.as_deref(), Some("seq 2"));

    // Signal sides on different replicas.
    let mut p = ma.socket("/signal/primary", true).await.unwrap().0;
    let mut c = mb.socket("/signal/companion", true).await.unwrap().0;
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    send_binary(&mut p, vec![1, 2, 3]).await;
    assert_eq!(next_binary(&mut c, WAIT).await, Some(vec![1, 2, 3]));
    send_binary(&mut c, vec![9; 4096]).await;
    assert_eq!(next_binary(&mut p, WAIT).await, Some(vec![9; 4096]));
    // The primary moves to B: the one on A is replaced.
    let mut p2 = mb.socket("/signal/primary", true).await.unwrap().0;
    assert_eq!(close_code(&mut p, WAIT).await, Some(4000));
    assert_eq!(next_text(&mut p2, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    let mut cw = ma.watch("c2p").await;

    // An erase on B closes every socket on both replicas with 1000.
    assert_eq!(mb.erase().await, 204);
    for (name, ws) in [
        ("watch on A", &mut w),
        ("watch on A (c2p)", &mut cw),
        ("primary on B", &mut p2),
        ("companion on B", &mut c),
    ] {
        assert_eq!(close_code(ws, WAIT).await, Some(1000), "{name}");
    }
    assert_eq!(ma.list("p2c", "").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_redis() {
    let redis = RedisServer::start();
    across(&redis.url(), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_a_cluster() {
    let cluster = RedisCluster::start();
    // Mailboxes on several masters.
    for n in [1, 2, 3] {
        across(&cluster.url(), n * 10).await;
    }
}

/// Two relay processes on `redis` serving the `chat` app's signal rendezvous (a dry run).
pub(super) fn two_signal_processes(redis: &RedisServer) -> (RelayProcess, RelayProcess) {
    let vars: Vec<(String, String)> = [
        ("REDIS_URL", redis.url()),
        ("RELAY_APPS", "chat:signal".to_owned()),
        ("RELAY_DRY_RUN", "true".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    tokio::task::block_in_place(|| (RelayProcess::spawn(&vars), RelayProcess::spawn(&vars)))
}

/// A relay process's public listener.
pub(super) fn public_addr(p: &RelayProcess) -> std::net::SocketAddr {
    format!("127.0.0.1:{}", p.port).parse().unwrap()
}

/// A replica that dies while a side is connected leaves that side marked present no
/// longer than the peer timeout: the other side, on a surviving replica, gets `peer 0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_leaves_no_side_present() {
    let redis = RedisServer::start();
    let (one, mut two) = two_signal_processes(&redis);
    let m1 = Mb::new(public_addr(&one), "chat", &mailbox_id(7), &bearer(7));
    let m2 = m1.at(public_addr(&two));
    assert_eq!(m1.claim().await, 201);
    let mut c = m1.socket("/signal/companion", true).await.unwrap().0;
    let mut p = m2.socket("/signal/primary", true).await.unwrap().0;
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 1"));
    let killed = Instant::now();
    two.kill9();
    // The bound: 15 s without a heartbeat, checked every second.
    let got = next_text(&mut c, Duration::from_secs(25)).await;
    assert_eq!(got.as_deref(), Some("peer 0"));
    let took = killed.elapsed();
    println!("peer 0 after the other side's replica died: {took:?}");
    // 16 s is the stated bound; the slack is for a loaded machine.
    assert!(took <= Duration::from_secs(20), "{took:?}");
}

/// Pub/sub is a hint, the store the truth. The fan-out's subscriber loses its connection
/// (`CLIENT KILL TYPE pubsub`) and, coming back, is refused `SUBSCRIBE` for a while (an ACL
/// change) while an envelope is stored; then the store refuses the watch's read of the head
/// for a while. The subscriber keeps trying until it is subscribed again, the watch keeps
/// reading until the store answers, and the reader gets the `seq` it missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_recovers_a_missed_seq_through_refused_subscribes_and_reads() {
    let redis = RedisServer::start();
    let (h, _other) = two(&redis.url()).await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(70), &bearer(70));
    assert_eq!(m.claim().await, 201);
    let mut w = m.watch("p2c").await;
    assert_eq!(m.put("p2c", 1, b"a").await.status, 201);
    assert_eq!(next_text(&mut w, WAIT).await.as_deref(), Some("seq 1"));

    redis.cli(&["ACL", "SETUSER", "default", "-subscribe", "-ssubscribe"]);
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Stored while no subscriber listens: its message is lost.
    assert_eq!(m.put("p2c", 2, b"b").await.status, 201);
    redis.cli(&["ACL", "SETUSER", "default", "-evalsha", "-eval"]);
    redis.cli(&["ACL", "SETUSER", "default", "+subscribe", "+ssubscribe"]);
    // Subscribed again within one retry (at most 2 s); the head cannot be read yet.
    assert_eq!(
        next_text(&mut w, Duration::from_millis(2500)).await,
        None,
        "nothing can be known while the store refuses the read"
    );
    redis.cli(&["ACL", "SETUSER", "default", "+@all"]);
    assert_eq!(
        next_text(&mut w, Duration::from_secs(8)).await.as_deref(),
        Some("seq 2"),
        "the missed seq arrives once the store answers"
    );
    // And the watch hears new writes again.
    assert_eq!(m.put("p2c", 3, b"c").await.status, 201);
    assert_eq!(next_text(&mut w, WAIT).await.as_deref(), Some("seq 3"));
}

/// An erase whose message is lost while the fan-out's subscriber is away (killed, then
/// refused `SUBSCRIBE` until after the erase) still closes the signal socket with 1000: on
/// the resync the socket asks the store whether its mailbox is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_socket_closes_on_an_erase_whose_message_was_lost() {
    let redis = RedisServer::start();
    let (h, _other) = two(&redis.url()).await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(71), &bearer(71));
    assert_eq!(m.claim().await, 201);
    let mut p = m.socket("/signal/primary", true).await.unwrap().0;
    // Opened and subscribed.
    send_text(&mut p, "ping").await;
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("pong"));

    redis.cli(&["ACL", "SETUSER", "default", "-subscribe", "-ssubscribe"]);
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.erase().await, 204);
    redis.cli(&["ACL", "SETUSER", "default", "+subscribe", "+ssubscribe"]);
    assert_eq!(
        close_code(&mut p, Duration::from_secs(8)).await,
        Some(1000),
        "the socket of an erased mailbox is closed"
    );
}

/// The shard channels (sharded pub/sub) Redis holds subscriptions for, all replicas
/// together.
fn shard_channels(redis: &RedisServer) -> Vec<String> {
    let mut v: Vec<String> = redis
        .cli(&["PUBSUB", "SHARDCHANNELS"])
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

/// Polls until Redis's shard channels are `want` again (releases are sent as the last
/// socket closes, so they land within a round trip or two).
async fn shard_channels_return_to(redis: &RedisServer, want: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let now = shard_channels(redis);
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Redis still holds {} shard channels, {} before: {now:?}",
            now.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The caller first: 200 watch and signal upgrades refused (a wrong bearer on a claimed
/// mailbox: 403; an id nobody claimed: 404; no bearer: 401) leave Redis with exactly the
/// subscriptions it had, and no place held (a mailbox whose places were tried 100 times
/// still opens its sockets). And subscriptions are counted per channel: 100 watches opened
/// on 100 mailboxes, then closed, hand every subscription back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_closed_sockets_leave_no_subscription() {
    let redis = RedisServer::start();
    let (h, _other) = two(&redis.url()).await;
    let owned = Mb::new(h.addr(), "chat", &mailbox_id(80), &bearer(80));
    assert_eq!(owned.claim().await, 201);
    // Settle what the replicas subscribe to for themselves (revocations and the like).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = shard_channels(&redis);

    for n in 0..50u32 {
        let stranger = owned.with_bearer(&bearer(1000 + n));
        for rest in ["/p2c/watch", "/signal/primary"] {
            let (status, _) = refused(stranger.socket(rest, true).await.unwrap_err());
            assert_eq!(status, 403, "{rest}");
        }
        let unclaimed = Mb::new(h.addr(), "chat", &mailbox_id(2000 + n), &bearer(2000 + n));
        for rest in ["/c2p/watch", "/signal/companion"] {
            let (status, _) = refused(unclaimed.socket(rest, true).await.unwrap_err());
            assert_eq!(status, 404, "{rest}");
        }
    }
    assert_eq!(
        shard_channels(&redis),
        before,
        "a refused upgrade subscribed to something"
    );
    // No place was kept by the refusals: the owner's sockets open.
    let mut w = owned.watch("p2c").await;
    assert_eq!(owned.put("p2c", 1, b"a").await.status, 201);
    assert_eq!(next_text(&mut w, WAIT).await.as_deref(), Some("seq 1"));
    drop(w);
    shard_channels_return_to(&redis, &before).await;

    let mut mailboxes = Vec::new();
    for n in 0..100u32 {
        let m = Mb::new(h.addr(), "chat", &mailbox_id(3000 + n), &bearer(3000 + n));
        assert_eq!(m.claim().await, 201);
        mailboxes.push(m);
    }
    let mut watches = Vec::new();
    for m in &mailboxes {
        watches.push(m.watch("c2p").await);
    }
    let open = shard_channels(&redis);
    assert_eq!(open.len(), before.len() + 100, "one channel per mailbox");
    for mut w in watches {
        w.close(None).await.unwrap();
        // Read to the end so the close completes both ways.
        while let Some(Ok(_)) = w.next().await {}
    }
    shard_channels_return_to(&redis, &before).await;
}

/// The hash tag a mailbox's keys and channels carry.
pub(super) fn mailbox_tag(app: &str, id: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{app}/{id}").as_bytes());
    let name: String = d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{{mb:{name}}}")
}

/// The Cluster node (index) a mailbox's keys and channels live on.
fn node_of_mailbox(cluster: &RedisCluster, app: &str, id: &str) -> usize {
    cluster.node_of(&mailbox_tag(app, id))
}

/// A stall on one Cluster node holds only the upgrades of mailboxes on that node: with
/// one master paused for 2 s (`CLIENT PAUSE`), a watch upgrade for a mailbox on it waits,
/// while one for a mailbox on another master opens within a second and hears its writes.
/// (Before, every upgrade subscribed first under one replica-wide lock, so one stalled
/// SSUBSCRIBE held every upgrade of the replica.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_node_holds_only_its_own_mailboxes_upgrades() {
    let cluster = RedisCluster::start();
    let (h, _other) = two(&cluster.url()).await;
    let pick = |node: usize| {
        (100..400u32)
            .find(|&n| node_of_mailbox(&cluster, "chat", &mailbox_id(n)) == node)
            .expect("a mailbox on every node")
    };
    let (nx, ny) = (pick(0), pick(1));
    let x = Mb::new(h.addr(), "chat", &mailbox_id(nx), &bearer(nx));
    let y = Mb::new(h.addr(), "chat", &mailbox_id(ny), &bearer(ny));
    // Claimed (the script is loaded on both nodes); no socket yet, so each upgrade below
    // subscribes to its mailbox's channel anew.
    for m in [&x, &y] {
        assert_eq!(m.claim().await, 201);
    }
    cluster.nodes[0].cli(&["CLIENT", "PAUSE", "2000", "ALL"]);
    let paused = Instant::now();
    let stalled = {
        let x = x.at(h.addr());
        tokio::spawn(async move { x.socket("/p2c/watch", true).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let opened = Instant::now();
    let mut w = y.watch("p2c").await;
    let took = opened.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the watch on another node waited {took:?} for the paused node"
    );
    assert!(
        paused.elapsed() < Duration::from_secs(2),
        "the pause was over before the check"
    );
    assert!(!stalled.is_finished(), "the paused node's upgrade waits");
    assert_eq!(y.put("p2c", 1, b"a").await.status, 201);
    assert_eq!(next_text(&mut w, WAIT).await.as_deref(), Some("seq 1"));
    let _ = stalled.await;
}

pub(super) async fn one_on(url: &str, vars: &[(&str, &str)]) -> Harness {
    let mut opts = Options::default()
        .var("REDIS_URL", url)
        .var("RELAY_APPS", "chat:signal");
    for (k, v) in vars {
        opts = opts.var(k, v);
    }
    let h = Harness::with(opts).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.admin("/readyz").await.status != 200 {
        assert!(Instant::now() < deadline, "the replica never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h
}

/// Sockets are bound to their claim: a mailbox that reaches idle expiry in Redis (2 s)
/// closes its watch and signal sockets with 1008 within one ping interval (1 s) of the
/// expiry, though their clients answer every Ping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_expiry_closes_sockets_within_a_ping_interval() {
    let redis = RedisServer::start();
    let h = one_on(
        &redis.url(),
        &[("RELAY_MAILBOX_IDLE_S", "2"), ("RELAY_SOCKET_PING_S", "1")],
    )
    .await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(90), &bearer(90));
    assert_eq!(m.claim().await, 201);
    let claimed = Instant::now();
    let w = m.watch("p2c").await;
    let s = m.socket("/signal/primary", true).await.unwrap().0;
    let closes: Vec<_> = [w, s]
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                let code = close_code(&mut ws, Duration::from_secs(6)).await;
                (code, claimed.elapsed())
            })
        })
        .collect();
    for (what, c) in ["watch", "signal"].into_iter().zip(closes) {
        let (code, after) = c.await.unwrap();
        assert_eq!(code, Some(1008), "{what}");
        // Expired at 2 s; closed at the first ping after it (1 s), with 0.5 s of slack for
        // the scheduler.
        assert!(
            after >= Duration::from_secs(2) && after <= Duration::from_millis(3500),
            "{what}: closed {after:?} after the claim"
        );
    }
}

/// After idle expiry, another bearer's claim of the same id is a new mailbox: the old
/// owner's watch (still open: its ping interval is long) hears nothing of the new owner's
/// envelopes, while the new owner's own watch does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_claim_is_not_heard_by_the_old_claims_sockets() {
    let redis = RedisServer::start();
    let h = one_on(&redis.url(), &[("RELAY_MAILBOX_IDLE_S", "1")]).await;
    let old = Mb::new(h.addr(), "chat", &mailbox_id(91), &bearer(91));
    assert_eq!(old.claim().await, 201);
    let mut old_watch = old.watch("p2c").await;
    // Expired by Redis's clock.
    let deadline = Instant::now() + Duration::from_secs(5);
    while old.list("p2c", "").await.status != 404 {
        assert!(Instant::now() < deadline, "the mailbox never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let new = old.with_bearer(&bearer(92));
    assert_eq!(new.claim().await, 201, "a new mailbox");
    let mut new_watch = new.watch("p2c").await;
    assert_eq!(new.put("p2c", 1, b"new owner's").await.status, 201);
    assert_eq!(
        next_text(&mut new_watch, WAIT).await.as_deref(),
        Some("seq 1")
    );
    assert_eq!(
        next_text(&mut old_watch, Duration::from_secs(1)).await,
        None,
        "the old claim's watch heard the new claim's envelope"
    );
}

/// A replica whose clock is two minutes ahead decides nothing (issue 35): the mailbox's
/// buckets run on the store's clock. Right after 120 envelopes spend the bucket through the
/// replica on the true clock, the one ahead stores at most the token or two the real
/// elapsed time refills (it stored 20 of 20 when each replica used its own clock); and its
/// socket opens leave the other replica's next upgrade unthrottled (a 429 before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_two_minutes_ahead_decides_no_bucket() {
    let server = sealrelay_testkit::redis::RedisServer::start();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ahead = sealrelay::clock::Clock::manual(now + 120_000);
    let (a, b) = two_clocks(&server.url(), ahead).await;
    let ma = Mb::new(a.addr(), "chat", &mailbox_id(40), &bearer(40));
    let mb = ma.at(b.addr());
    assert_eq!(ma.claim().await, 201);
    let mut stored = 0;
    for seq in 1..=125u64 {
        if ma.put("c2p", seq, b"x").await.status == 201 {
            stored += 1;
        }
    }
    assert!(
        (120..=121).contains(&stored),
        "{stored} stored on the true clock"
    );
    let mut more = 0;
    for seq in 200..220u64 {
        match mb.put("c2p", seq, b"x").await.status {
            201 => more += 1,
            429 => {}
            s => panic!("{s}"),
        }
    }
    assert!(more <= 2, "{more} of 20 stored by the replica ahead");

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(mb.watch("p2c").await);
    }
    let opened = ma.socket("/p2c/watch", true).await;
    assert!(
        opened.is_ok(),
        "the true clock's upgrade after the replica ahead opened sockets: {:?}",
        opened.err().map(refused)
    );
}
