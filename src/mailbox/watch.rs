//! `GET .../<dir>/watch`: a WebSocket that tells the reader of `<dir>` when an envelope
//! was stored there by any replica.
//!
//! The upgrade ([`super::socket::accept`]): the bearer (header or `zerobyte.bearer.<token>`
//! subprotocol, never echoed; 401), a place (503 for the replica, 429 for the mailbox),
//! one store round trip that checks the bearer (404, 403) and takes a token of the sockets'
//! bucket (429), and only then the mailbox's fan-out channel; subprotocol `zerobyte.v1` is
//! selected.
//!
//! On the socket: text `seq <n>` for each envelope stored on `<dir>`; `pong` for a `ping`,
//! which also marks the reader as in the foreground for 45 s on every replica (written to
//! the store at most once a second per socket; cleared when the socket closes); any other text or a binary frame closes
//! with 1003 (with a close frame, whatever its length); an erase of the mailbox closes with
//! 1000; the relay stopping closes with 1001, and so does a client from which nothing (no
//! message, no Pong to the relay's Pings every `RELAY_SOCKET_PING_S`) came for two intervals.
//! The socket belongs to the claim it opened under: events of another claim (the mailbox
//! expired and was claimed again) are not its own, and with each Ping the store is asked
//! whether the claim is still there (1008 once it is not).
//! After the fan-out lost messages (a Redis reconnect), the socket reads the direction's
//! highest seq and sends it if it is new, trying again until the store answers; after 10 s
//! without an answer it closes with 1011 (the client reconnects and lists). A socket that
//! fell behind its local fan-out buffer (and so lost messages) does the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use axum::extract::{Request, State};
use axum::response::Response;

use super::auth::Bearer;
use super::close::Close;
use super::error::MailboxError;
use super::front::Mailboxes;
use super::path::{self, Target};
use super::socket::{accept, claim_gone, Liveness};
use super::state::{Answer, Dir, MailboxEvent, Name, Op};
use crate::store::fanout::Subscription;
use crate::store::mailbox::receive_event;

/// How long a resync keeps trying to read the direction's head before it gives up and
/// closes the socket with 1011 (the client reconnects and reads the list itself).
const RESYNC_FOR: Duration = Duration::from_secs(10);

/// What a resync found.
enum Resync {
    /// A seq newer than the last one sent.
    Seq(u64),
    /// Nothing new.
    Nothing,
    /// The socket must close: the mailbox is gone (1000), the relay stops (1001), or the
    /// store did not answer for [`RESYNC_FOR`] (1011).
    Close(Close),
}

/// Reads `dir`'s head after the fan-out may have lost messages, trying again (100 ms
/// doubling to 1 s) until the store answers: a missed `seq` is never silently lost.
async fn resync(
    m: &Mailboxes,
    name: &Name,
    bearer: &Bearer,
    dir: Dir,
    last_sent: u64,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Resync {
    let give_up = Instant::now() + RESYNC_FOR;
    let mut pause = Duration::from_millis(100);
    loop {
        match m.run(name, bearer, &Op::Head { dir }).await {
            Ok(Answer::Head { last, .. }) if last > last_sent => return Resync::Seq(last),
            Ok(_) => return Resync::Nothing,
            Err(MailboxError::NotFound | MailboxError::Forbidden) => {
                return Resync::Close(Close::Normal)
            }
            Err(_) if Instant::now() >= give_up => return Resync::Close(Close::Internal),
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return Resync::Close(Close::GoingAway),
        }
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Tells the socket what a resync found; false when the socket is done.
async fn sent(found: Resync, socket: &mut WebSocket, last_sent: &mut u64) -> bool {
    match found {
        Resync::Seq(last) => {
            *last_sent = last;
            socket
                .send(Message::Text(format!("seq {last}").into()))
                .await
                .is_ok()
        }
        Resync::Nothing => true,
        Resync::Close(close) => {
            close.send(socket).await;
            false
        }
    }
}

/// What tungstenite reads before it gives up on a message: far above the contract's 4096
/// bytes (clients send only `ping`, and any other text is 1003 whatever its length), so a
/// long message is read and answered with a close frame rather than a dropped connection.
const READ_LIMIT: usize = 64 * 1024;
/// How often a socket writes its foreground mark at most.
const PING_WRITE_EVERY: Duration = Duration::from_secs(1);

/// The watch upgrade.
pub async fn upgrade(
    State(m): State<Arc<Mailboxes>>,
    target: Target<path::Watch>,
    req: Request,
) -> Result<Response, MailboxError> {
    let (name, path::Watch(dir)) = (target.name, target.place);
    let a = accept(&m, &name, req, READ_LIMIT, Op::Socket).await?;
    let generation = match a.answer {
        Answer::Opened(g) => g,
        _ => 0,
    };
    let (bearer, place, sub) = (a.bearer, a.place, a.events);
    Ok(a.upgrade.on_upgrade(move |mut socket| async move {
        let claim = Claim {
            name,
            bearer,
            generation,
        };
        let mut marked = false;
        serve(&m, &claim, dir, sub, &mut socket, &mut marked).await;
        if marked {
            // The reader left: it is no longer in the foreground, on any replica, from now
            // (best effort, like the mark), before the connection ends.
            let _ = m.run(&claim.name, &claim.bearer, &Op::Unping { dir }).await;
        }
        drop(socket);
        drop(place);
    }))
}

/// The claim a socket was opened under.
struct Claim {
    name: Name,
    bearer: Bearer,
    generation: u64,
}

async fn serve(
    m: &Mailboxes,
    claim: &Claim,
    dir: Dir,
    mut sub: Subscription,
    socket: &mut WebSocket,
    marked: &mut bool,
) {
    let (name, bearer) = (&claim.name, &claim.bearer);
    let _open = crate::metrics::SocketGuard::open(super::socket::Kind::Watch.as_str());
    let mut stop = m.stop.clone();
    let mut resyncs = m.store.fanout().resyncs();
    // Only reconnects from now on count.
    resyncs.borrow_and_update();
    let mut resyncing = true;
    let mut last_sent = 0u64;
    let mut last_ping_write: Option<Instant> = None;
    let mut live = Liveness::new(m.settings.sockets.ping);
    let mut pings = live.pings();
    loop {
        tokio::select! {
            msg = socket.recv() => { live.heard(); match msg {
                Some(Ok(Message::Text(t))) if t.as_str() == "ping" => {
                    if socket.send(Message::Text("pong".into())).await.is_err() {
                        return;
                    }
                    if last_ping_write.is_none_or(|t| t.elapsed() >= PING_WRITE_EVERY) {
                        last_ping_write = Some(Instant::now());
                        // The foreground mark is best effort: a failed write only means a
                        // push may be sent.
                        *marked = true;
                        let _ = m.run(name, bearer, &Op::Ping { dir }).await;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                // Anything but `ping`, of any length up to the read limit, is 1003.
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    Close::Unsupported.send(socket).await;
                    return;
                }
                // Longer than even the read limit: still a message the watch does not take.
                Some(Err(e)) if super::signal::over_read_limit(&e) => {
                    Close::Unsupported.send(socket).await;
                    return;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            }},
            _ = pings.tick() => {
                // Once a ping interval, the store says whether the claim is still there.
                if claim_gone(m, name, bearer, claim.generation).await {
                    let close = Close::Policy.send(socket);
                    let _ = tokio::time::timeout(live.write_timeout(), close).await;
                    return;
                }
                let ping = socket.send(Message::Ping(bytes::Bytes::new()));
                if !matches!(tokio::time::timeout(live.write_timeout(), ping).await, Ok(Ok(()))) {
                    return;
                }
            },
            _ = tokio::time::sleep_until(live.deadline()) => {
                // Nothing from the client for two ping intervals: a half-open socket.
                let _ = tokio::time::timeout(live.write_timeout(), Close::GoingAway.send(socket)).await;
                return;
            },
            note = sub.recv() => match note {
                None => {
                    Close::GoingAway.send(socket).await;
                    return;
                }
                Some(note) => {
                    if sub.take_lagged() {
                        // This socket fell behind and lost messages: an erase or a seq may
                        // be among them.
                        let found = resync(m, name, bearer, dir, last_sent, &mut stop).await;
                        if !sent(found, socket, &mut last_sent).await {
                            return;
                        }
                    }
                    let seq = match receive_event(&note) {
                        // Another claim's event (this one expired): not this socket's.
                        Some(ev) if ev.generation() != claim.generation => continue,
                        Some(MailboxEvent::Erased { .. }) => {
                            Close::Normal.send(socket).await;
                            return;
                        }
                        Some(MailboxEvent::Stored { dir: d, seq, .. }) if d == dir => seq,
                        _ => continue,
                    };
                    last_sent = last_sent.max(seq);
                    if socket.send(Message::Text(format!("seq {seq}").into())).await.is_err() {
                        return;
                    }
                }
            },
            r = resyncs.changed(), if resyncing => {
                if r.is_err() {
                    resyncing = false;
                    continue;
                }
                let found = resync(m, name, bearer, dir, last_sent, &mut stop).await;
                if !sent(found, socket, &mut last_sent).await {
                    return;
                }
            },
            _ = stop.changed() => {
                Close::GoingAway.send(socket).await;
                return;
            }
        }
    }
}
