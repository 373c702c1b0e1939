//! The signal rendezvous (the spec's two signal tables) on one relay: `peer 1` and `peer 0`,
//! frames passed through unchanged, `ping`/`pong`, every close code (1003, 1009 with its
//! close frame, 4000 `replaced`, 1000 on erase, 1008 over the frame bucket, 1001 at stop),
//! frames dropped while the other side is away; and ICE through the route.

use std::time::Duration;

use crate::common::mailbox::*;
use crate::common::*;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message;

const APPS: &str = "chat:signal;nosig";
const WAIT: Duration = Duration::from_secs(5);

async fn relay() -> Harness {
    Harness::with(Options::default().var("RELAY_APPS", APPS)).await
}

/// The next binary frame within `wait`, skipping text; `None` on close or timeout.
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

fn metric_or_zero(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
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
    // The relay reads that frame on its own time: the companion comes back only once it has
    // been counted dropped, or the frame would (rightly) reach the returning side.
    let dropped = r#"sealrelay_signal_frames_total{result="dropped"}"#;
    let deadline = tokio::time::Instant::now() + WAIT;
    while metric_or_zero(&h.admin("/metrics").await.body, dropped) < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the frame sent with no one on the other side is never counted dropped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

/// Caps: with `RELAY_MAILBOX_MAX_SOCKETS=2` a third socket of one mailbox (watch or signal)
/// is 429 `rate_limited` with `Retry-After: 1`; with `RELAY_MAX_SOCKETS=3` a fourth socket
/// of the replica is 503 `unavailable` with `Retry-After: 1`; a socket that closes gives
/// its place back at once; both refusals are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_are_capped_per_mailbox_and_per_replica() {
    let h = Harness::with(
        Options::default()
            .var("RELAY_APPS", APPS)
            .var("RELAY_MAILBOX_MAX_SOCKETS", "2")
            .var("RELAY_MAX_SOCKETS", "3"),
    )
    .await;
    let a = Mb::new(h.addr(), "chat", &mailbox_id(40), &bearer(40));
    let b = Mb::new(h.addr(), "chat", &mailbox_id(41), &bearer(41));
    assert_eq!(a.claim().await, 201);
    assert_eq!(b.claim().await, 201);
    let a1 = a.watch("p2c").await;
    let a2 = side(&a, "primary").await;
    let e = a.socket("/c2p/watch", true).await.unwrap_err();
    let headers = match &e {
        tokio_tungstenite::tungstenite::Error::Http(r) => r.headers().clone(),
        other => panic!("{other}"),
    };
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        refused(e),
        (429, r#"{"error":"rate_limited","status":429}"#.to_owned())
    );
    let b1 = b.watch("p2c").await;
    let e = b.socket("/signal/companion", false).await.unwrap_err();
    let headers = match &e {
        tokio_tungstenite::tungstenite::Error::Http(r) => r.headers().clone(),
        other => panic!("{other}"),
    };
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        refused(e),
        (503, r#"{"error":"unavailable","status":503}"#.to_owned())
    );
    // A closed socket's place is free at once.
    let mut a1 = a1;
    a1.close(None).await.unwrap();
    while let Some(Ok(_)) = a1.next().await {}
    let deadline = std::time::Instant::now() + WAIT;
    let b2 = loop {
        match b.socket("/signal/companion", false).await {
            Ok((ws, _)) => break ws,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let metrics = h.admin("/metrics").await.body;
    assert!(
        metric(
            &metrics,
            r#"sealrelay_mailbox_sockets_refused_total{cap="mailbox"}"#
        ) >= 1
    );
    assert!(
        metric(
            &metrics,
            r#"sealrelay_mailbox_sockets_refused_total{cap="replica"}"#
        ) >= 1
    );
    drop((a2, b1, b2));
}

/// Liveness: with `RELAY_SOCKET_PING_S=1`, a watch and a signal socket whose client never
/// reads (so never answers a Ping) are closed with 1001 once two seconds pass without a
/// frame from them; sockets whose client reads (answering Pings) stay open past that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_are_closed_and_answering_ones_kept() {
    let h = Harness::with(
        Options::default()
            .var("RELAY_APPS", APPS)
            .var("RELAY_SOCKET_PING_S", "1"),
    )
    .await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(42), &bearer(42));
    assert_eq!(m.claim().await, 201);
    let opened = std::time::Instant::now();
    let silent_watch = SilentClient::open(&m, "/p2c/watch").await;
    let silent_signal = SilentClient::open(&m, "/signal/primary").await;
    let mut live = m.watch("c2p").await;
    // The answering client reads for 3.5 s: Pings (answered by the client library), no
    // close.
    let mut pings = 0;
    let until = tokio::time::Instant::now() + Duration::from_millis(3500);
    while let Ok(m) = tokio::time::timeout_at(until, live.next()).await {
        match m {
            Some(Ok(Message::Ping(_))) => pings += 1,
            other => panic!("an answering socket got {other:?}"),
        }
    }
    assert!(pings >= 2, "{pings} pings in 3.5 s at one a second");
    // The silent ones were closed with 1001 meanwhile (Pings, then the close frame, then
    // the connection); read now what they were sent.
    for (what, silent) in [("watch", silent_watch), ("signal", silent_signal)] {
        let (opcodes, code) = silent.frames_until_closed(WAIT).await;
        assert_eq!(code, Some(1001), "{what}: {opcodes:?}");
        let pings = opcodes.iter().filter(|&&o| o == 9).count();
        assert!((1..=3).contains(&pings), "{what}: {opcodes:?}");
    }
    assert!(opened.elapsed() >= Duration::from_secs(2));
    // And the answering one still works.
    assert_eq!(m.put("c2p", 1, b"x").await.status, 201);
    assert_eq!(next_text(&mut live, WAIT).await.as_deref(), Some("seq 1"));
}

/// A watch message longer than 4096 bytes is closed with 1003 and a close frame (not a
/// dropped connection), at 5000 bytes and past the read limit alike; 4096 bytes of other
/// text is 1003 too; the scheme of `Authorization` is case-insensitive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_watch_messages_close_1003_and_bearer_is_any_case() {
    let h = relay().await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(43), &bearer(43));
    assert_eq!(m.claim().await, 201);
    for len in [4096, 5000, 200_000] {
        let mut w = m.watch("p2c").await;
        send_text(&mut w, &"x".repeat(len)).await;
        assert_eq!(close_code(&mut w, WAIT).await, Some(1003), "{len} bytes");
    }
    for scheme in ["bearer", "BEARER"] {
        let req = format!(
            "GET {} HTTP/1.1\r\nhost: x\r\nauthorization: {scheme} {}\r\nconnection: close\r\n\r\n",
            m.path("/p2c"),
            bearer(43)
        );
        let answer = raw(h.addr(), req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{scheme}: {answer}");
    }
}

/// A receiver that stops reading is bounded in bytes: with `RELAY_SIGNAL_BUFFER_BYTES` at
/// its least (64 KiB), a side whose client reads nothing while the other side sends its
/// whole frame burst (400 frames of 64 KiB, 25 MiB) is closed with 1008 once its kernel
/// buffers and its 64 KiB are full; the sender is not closed: it hears `peer 0` and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_stops_reading_is_closed_1008_and_the_sender_goes_on() {
    let h = Harness::with(
        Options::default()
            .var("RELAY_APPS", APPS)
            .var("RELAY_SIGNAL_BUFFER_BYTES", "65536"),
    )
    .await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(44), &bearer(44));
    assert_eq!(m.claim().await, 201);
    let reader = SilentClient::open(&m, "/signal/companion").await;
    let mut sender = side(&m, "primary").await;
    assert_eq!(
        next_text(&mut sender, WAIT).await.as_deref(),
        Some("peer 1")
    );
    let frame = vec![7u8; 64 * 1024];
    let mut peer_0 = false;
    for _ in 0..400 {
        send_binary(&mut sender, frame.clone()).await;
    }
    // The sender is told its peer left, and its socket still answers.
    if let Some(t) = next_text(&mut sender, Duration::from_secs(20)).await {
        peer_0 = t == "peer 0";
    }
    assert!(peer_0, "the sender heard peer 0 when the reader was closed");
    send_text(&mut sender, "ping").await;
    assert_eq!(next_text(&mut sender, WAIT).await.as_deref(), Some("pong"));
    let (opcodes, code) = reader.frames_until_closed(WAIT).await;
    assert_eq!(code, Some(1008), "{} frames before", opcodes.len());
    assert!(
        opcodes.len() < 400,
        "not every frame reached it: {}",
        opcodes.len()
    );
    let metrics = h.admin("/metrics").await.body;
    assert!(metric(&metrics, r#"sealrelay_signal_closes_total{code="1008"}"#) >= 1);
}
