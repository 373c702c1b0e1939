//! The signal rendezvous (the spec's two signal tables) on one relay: `peer 1` and `peer 0`,
//! frames passed through unchanged, `ping`/`pong`, every close code (1003, 1009 with its
//! close frame, 4000 `replaced`, 1000 on erase, 1008 over the frame bucket, 1001 at stop),
//! frames dropped while the other side is away; and ICE through the route.

mod common;

use std::time::Duration;

use common::mailbox::*;
use common::*;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message;

const APPS: &str = "chat:signal;nosig";
const WAIT: Duration = Duration::from_secs(5);

async fn relay() -> Harness {
    Harness::with(Options::default().var("RELAY_APPS", APPS)).await
}

/// The next binary frame within `wait`, skipping text; `None` on close or timeout.
async fn next_binary(ws: &mut Ws, wait: Duration) -> Option<Vec<u8>> {
    loop {
        match tokio::time::timeout(wait, ws.next()).await.ok()?? {
            Ok(Message::Binary(b)) => return Some(b.to_vec()),
            Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_)) => continue,
            _ => return None,
        }
    }
}

async fn side(m: &Mb, s: &str) -> Ws {
    m.socket(&format!("/signal/{s}"), false)
        .await
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .0
}

async fn pair(m: &Mb) -> (Ws, Ws) {
    let mut p = side(m, "primary").await;
    let mut c = side(m, "companion").await;
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    (p, c)
}

fn metric(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_frames_ping_and_peer_0() {
    let h = relay().await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(1), &bearer(1));
    // Upgrades are checked like watch.
    assert_eq!(
        refused(m.socket("/signal/primary", true).await.unwrap_err()).0,
        404
    );
    assert_eq!(m.claim().await, 201);
    assert_eq!(
        refused(
            m.with_bearer(&bearer(2))
                .socket("/signal/primary", true)
                .await
                .unwrap_err()
        )
        .0,
        403
    );
    let other = Mb::new(h.addr(), "nosig", &mailbox_id(1), &bearer(1));
    assert_eq!(
        refused(other.socket("/signal/primary", true).await.unwrap_err()).0,
        404
    );
    let (resp_ws, resp) = m.socket("/signal/primary", false).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "zerobyte.v1");
    drop(resp_ws);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (mut p, mut c) = pair(&m).await;
    // Frames pass through unchanged, both ways, up to 64 KiB.
    let frame: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    send_binary(&mut p, frame.clone()).await;
    assert_eq!(next_binary(&mut c, WAIT).await, Some(frame));
    let big = vec![0xA5u8; 64 * 1024];
    send_binary(&mut c, big.clone()).await;
    assert_eq!(next_binary(&mut p, WAIT).await, Some(big));
    send_binary(&mut p, Vec::new()).await;
    assert_eq!(next_binary(&mut c, WAIT).await, Some(Vec::new()));
    send_text(&mut c, "ping").await;
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("pong"));
    // The other side leaves: peer 0 to the side left; its frames are dropped now.
    drop(c);
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 0"));
    send_binary(&mut p, b"into the void".to_vec()).await;
    let mut c = side(&m, "companion").await;
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 1"));
    send_binary(&mut c, b"after".to_vec()).await;
    assert_eq!(
        next_binary(&mut p, WAIT).await.as_deref(),
        Some(&b"after"[..]),
        "the dropped frame never arrives"
    );
    let metrics = h.admin("/metrics").await.body;
    assert!(
        metric(
            &metrics,
            r#"sealrelay_signal_frames_total{result="dropped"}"#
        ) >= 1
    );
    assert!(
        metric(
            &metrics,
            r#"sealrelay_signal_frames_total{result="relayed"}"#
        ) >= 4
    );
    assert!(metric(&metrics, "sealrelay_signal_bytes_total") >= 1000 + 64 * 1024 + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_close_code() {
    let h = relay().await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(2), &bearer(2));
    assert_eq!(m.claim().await, 201);

    // Other text: 1003.
    let (mut p, mut c) = pair(&m).await;
    send_text(&mut p, "hello").await;
    assert_eq!(close_code(&mut p, WAIT).await, Some(1003));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 0"));

    // A larger frame: 1009, with its close frame.
    let mut p = side(&m, "primary").await;
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    send_binary(&mut p, vec![0u8; 64 * 1024 + 1]).await;
    assert_eq!(close_code(&mut p, WAIT).await, Some(1009));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 0"));
    // Also over tungstenite's read limit (1 MiB), which stops reading the frame part way.
    let mut p = side(&m, "primary").await;
    assert_eq!(next_text(&mut p, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    let _ = futures_util::SinkExt::send(&mut p, Message::Binary(vec![0u8; 2 * 1024 * 1024].into()))
        .await;
    assert_eq!(close_code(&mut p, WAIT).await, Some(1009));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 0"));

    // A second socket for a side replaces the first: 4000 replaced; the other side sees a
    // new peer.
    let mut p1 = side(&m, "primary").await;
    assert_eq!(next_text(&mut p1, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    let mut p2 = side(&m, "primary").await;
    let closed = tokio::time::timeout(WAIT, p1.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match closed {
        Message::Close(Some(f)) => {
            assert_eq!(u16::from(f.code), 4000);
            assert_eq!(f.reason.as_str(), "replaced");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(next_text(&mut p2, WAIT).await.as_deref(), Some("peer 1"));
    assert_eq!(next_text(&mut c, WAIT).await.as_deref(), Some("peer 1"));
    send_binary(&mut c, b"to the new one".to_vec()).await;
    assert_eq!(
        next_binary(&mut p2, WAIT).await.as_deref(),
        Some(&b"to the new one"[..])
    );

    // Over the frame bucket (400, 50 per second): 1008.
    let mut closed_at = None;
    for i in 0..600u32 {
        if futures_util::SinkExt::send(&mut p2, Message::Binary(i.to_be_bytes().to_vec().into()))
            .await
            .is_err()
        {
            break;
        }
        if i == 450 {
            closed_at = close_code(&mut p2, WAIT).await;
            break;
        }
    }
    assert_eq!(closed_at, Some(1008));
    let mut got = 0;
    while let Some(f) = next_binary(&mut c, Duration::from_millis(500)).await {
        assert_eq!(f.len(), 4);
        got += 1;
    }
    assert!(
        (395..=410).contains(&got),
        "{got} frames passed before the 1008"
    );
    // The bucket is the side's, not the socket's: a new socket has only what refilled
    // since (50 a second), not a fresh 400.
    let mut p3 = side(&m, "primary").await;
    let started = std::time::Instant::now();
    for i in 0..200u32 {
        if futures_util::SinkExt::send(&mut p3, Message::Binary(i.to_be_bytes().to_vec().into()))
            .await
            .is_err()
        {
            break;
        }
    }
    assert_eq!(close_code(&mut p3, WAIT).await, Some(1008));
    let mut again = 0;
    while next_binary(&mut c, Duration::from_millis(500))
        .await
        .is_some()
    {
        again += 1;
    }
    let refilled = (started.elapsed().as_millis() as u64 + 1500) / 20 + 2;
    assert!(
        again < 200 && (again as u64) <= refilled,
        "{again} frames on the new socket (refill allows {refilled})"
    );

    // Erase closes both sides with 1000.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut p4 = side(&m, "primary").await;
    assert_eq!(m.erase().await, 204);
    assert_eq!(close_code(&mut p4, WAIT).await, Some(1000));
    assert_eq!(close_code(&mut c, WAIT).await, Some(1000));
    let metrics = h.admin("/metrics").await.body;
    for code in ["1000", "1003", "1008", "1009", "4000"] {
        assert!(
            metric(
                &metrics,
                &format!(r#"sealrelay_signal_closes_total{{code="{code}"}}"#)
            ) >= 1,
            "{code}"
        );
    }
}

/// The relay stopping closes signal and watch sockets with 1001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_says_going_away() {
    let h = relay().await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(3), &bearer(3));
    assert_eq!(m.claim().await, 201);
    let (mut p, _c) = pair(&m).await;
    let mut w = m.watch("p2c").await;
    let stopping = tokio::spawn(h.relay.shutdown());
    assert_eq!(close_code(&mut p, WAIT).await, Some(1001));
    assert_eq!(close_code(&mut w, WAIT).await, Some(1001));
    tokio::time::timeout(WAIT, stopping).await.unwrap().unwrap();
}
