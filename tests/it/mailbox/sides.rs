//! A signal side's state lives in the store: which socket is the side's (a number the open
//! script counts, so the newest socket wins on every replica whatever their clocks say, and
//! the older one learns it from the store when the hello is lost), and the side's frame
//! bucket (spent in batches, so a replica killed mid-burst hands no fresh burst on).

use std::time::{Duration, Instant};

use super::replicas::{one_on, public_addr, two_clocks, two_signal_processes};
use crate::common::mailbox::*;
use crate::common::*;
use sealrelay::clock::Clock;

const WAIT: Duration = Duration::from_secs(5);

/// Waits for `peer 1` on `ws`, skipping anything else.
async fn peer_1(ws: &mut Ws) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match next_text(ws, left).await.as_deref() {
            Some("peer 1") => return,
            Some(_) => continue,
            None => panic!("no peer 1"),
        }
    }
}

/// The newest socket of a side wins though its replica's clock is two minutes behind the
/// replica of the socket it replaces. (Before, the older opening instant lost: the new
/// socket on the replica behind was the one closed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_socket_wins_on_a_replica_two_minutes_behind() {
    let redis = RedisServer::start();
    let behind = Clock::manual(Clock::System.now_ms() - 120_000);
    let (a, b) = two_clocks(&redis.url(), behind).await;
    let m = Mb::new(a.addr(), "chat", &mailbox_id(120), &bearer(120));
    assert_eq!(m.claim().await, 201);
    let mut c = m.socket("/signal/companion", true).await.unwrap().0;
    let mut p1 = m.socket("/signal/primary", true).await.unwrap().0;
    peer_1(&mut c).await;
    peer_1(&mut p1).await;
    let mut p2 = m
        .at(b.addr())
        .socket("/signal/primary", true)
        .await
        .unwrap()
        .0;
    assert_eq!(
        close_code(&mut p1, WAIT).await,
        Some(4000),
        "the older socket"
    );
    peer_1(&mut p2).await;
    send_binary(&mut p2, vec![7, 7]).await;
    assert_eq!(next_binary(&mut c, WAIT).await, Some(vec![7, 7]));
    send_binary(&mut c, vec![8]).await;
    assert_eq!(next_binary(&mut p2, WAIT).await, Some(vec![8]));
}

/// A replacement whose hello is lost (Redis refuses `SPUBLISH` while the new socket opens)
/// still closes the older socket with 4000, within one ping interval (1 s): its periodic
/// spend asks the store, which counted the new socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_hello_still_replaces_within_a_ping_interval() {
    let redis = RedisServer::start();
    let h = one_on(&redis.url(), &[("RELAY_SOCKET_PING_S", "1")]).await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(121), &bearer(121));
    assert_eq!(m.claim().await, 201);
    let mut p1 = m.socket("/signal/primary", true).await.unwrap().0;
    send_text(&mut p1, "ping").await;
    assert_eq!(next_text(&mut p1, WAIT).await.as_deref(), Some("pong"));

    redis.cli(&["ACL", "SETUSER", "default", "-spublish"]);
    let mut p2 = m.socket("/signal/primary", true).await.unwrap().0;
    let opened = Instant::now();
    send_text(&mut p2, "ping").await;
    assert_eq!(next_text(&mut p2, WAIT).await.as_deref(), Some("pong"));
    redis.cli(&["ACL", "SETUSER", "default", "+spublish"]);
    let code = close_code(&mut p1, Duration::from_secs(3)).await;
    let took = opened.elapsed();
    assert_eq!(code, Some(4000), "the older socket, after {took:?}");
    println!("replaced {took:?} after the new socket opened, its hello lost");
    // One ping interval, with 0.5 s for the scheduler.
    assert!(took <= Duration::from_millis(1500), "{took:?}");
    send_text(&mut p2, "ping").await;
    assert_eq!(next_text(&mut p2, WAIT).await.as_deref(), Some("pong"));
}

/// Sends `n` 4-byte frames as fast as the socket takes them; how many were sent before the
/// relay closed it.
async fn burst(ws: &mut Ws, n: u32) -> u32 {
    for i in 0..n {
        if futures_util::SinkExt::send(
            ws,
            tokio_tungstenite::tungstenite::Message::Binary(i.to_be_bytes().to_vec().into()),
        )
        .await
        .is_err()
        {
            return i;
        }
    }
    n
}

/// The frame bucket is the side's, in the store, spent in batches: 300 frames relayed by a
/// replica that is then killed (kill -9) are spent, so the side's next socket, on another
/// replica, is closed with 1008 after what is left (100, what refilled, a batch or two), not a
/// fresh 400. (Before, the spending was written back only at close, and a kill lost it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_hands_no_fresh_frame_burst_on() {
    let redis = RedisServer::start();
    let (mut one, two) = two_signal_processes(&redis);
    let m1 = Mb::new(public_addr(&one), "chat", &mailbox_id(122), &bearer(122));
    let m2 = m1.at(public_addr(&two));
    assert_eq!(m1.claim().await, 201);
    let mut c = m2.socket("/signal/companion", true).await.unwrap().0;
    let mut p = m1.socket("/signal/primary", true).await.unwrap().0;
    peer_1(&mut c).await;
    peer_1(&mut p).await;
    assert_eq!(burst(&mut p, 300).await, 300);
    let mut got = 0;
    while got < 300 {
        assert!(
            next_binary(&mut c, WAIT).await.is_some(),
            "{got} of 300 relayed"
        );
        got += 1;
    }
    // Killed with its last batch (10 frames) perhaps not yet spent: a kill loses at most
    // one batch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    one.kill9();
    let started = Instant::now();
    let mut p2 = m2.socket("/signal/primary", true).await.unwrap().0;
    let sent = burst(&mut p2, 250).await;
    assert_eq!(
        close_code(&mut p2, WAIT).await,
        Some(1008),
        "{sent} frames sent without a 1008"
    );
    let mut again = 0u64;
    while next_binary(&mut c, Duration::from_millis(500))
        .await
        .is_some()
    {
        again += 1;
    }
    // 100 left, 50 a second refilled since the burst began, the killed replica's last batch
    // and one batch relayed on credit.
    let bound = 100 + (started.elapsed().as_millis() as u64 + 1000) / 20 + 20;
    println!("{again} frames relayed by the next socket (bound {bound})");
    assert!(
        again <= bound,
        "{again} frames relayed after the kill (bound {bound})"
    );
}

/// A reply that did not arrive is not a command that did not run. Each mailbox write is sent
/// while Redis is paused for writes (`CLIENT PAUSE 600 WRITE`, longer than the relay's
/// 150 ms timeout), so its script runs after the relay answered 503; the client's retry of
/// the same request is then answered as a retry of a write that was made (the claim is
/// the bearer's: 204; the same bytes at the same seq: 204; the registration: 204) and the
/// mailbox holds each write once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mailbox_write_whose_reply_is_lost_is_safe_to_retry() {
    let redis = RedisServer::start();
    let h = one_on(
        &redis.url(),
        &[
            ("RELAY_REDIS_TIMEOUT_MS", "150"),
            ("RELAY_APPS", "chat:push=com.example.cronstable,signal"),
        ],
    )
    .await;
    // The script is loaded (a paused EVALSHA that finds no script would not run).
    let warm = Mb::new(h.addr(), "chat", &mailbox_id(130), &bearer(130));
    assert_eq!(warm.claim().await, 201);
    let m = Mb::new(h.addr(), "chat", &mailbox_id(131), &bearer(131));
    let paused = |what: &'static str| {
        redis.cli(&["CLIENT", "PAUSE", "600", "WRITE"]);
        what
    };
    let settle = || tokio::time::sleep(Duration::from_millis(800));

    let what = paused("claim");
    assert_eq!(m.claim().await, 503, "{what}");
    settle().await;
    assert_eq!(
        m.claim().await,
        204,
        "the lost claim was made: the retry finds it"
    );

    let what = paused("put");
    assert_eq!(m.put("p2c", 1, b"once").await.status, 503, "{what}");
    settle().await;
    let again = m.put("p2c", 1, b"once").await;
    assert_eq!(
        again.status, 204,
        "the same bytes are there: {}",
        again.body
    );
    let list = m.list("p2c", "").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["envelopes"].as_array().unwrap().len(), 1);

    let reg = serde_json::json!({"service": "apns", "token": device(131), "environment": "production", "tag": "t"});
    let what = paused("register");
    assert_eq!(m.register("p2c", &reg).await.status, 503, "{what}");
    settle().await;
    assert_eq!(m.register("p2c", &reg).await.status, 204);

    let what = paused("erase");
    assert_eq!(m.erase().await, 503, "{what}");
    settle().await;
    assert_eq!(
        m.list("p2c", "").await.status,
        404,
        "the lost erase was made"
    );
    // Erasing again: nothing is there (404), and nothing else changed.
    assert_eq!(m.erase().await, 404);
}
