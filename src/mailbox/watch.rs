//! `GET .../<dir>/watch`: a WebSocket that tells the reader of `<dir>` when an envelope
//! was stored there by any replica.
//!
//! The upgrade: the bearer (header or `zerobyte.bearer.<token>` subprotocol, never echoed;
//! 401), the mailbox's fan-out channel subscribed (so nothing stored after the check is
//! missed), then one store round trip that checks the bearer (404, 403) and takes a token
//! of the sockets' bucket (429); subprotocol `zerobyte.v1` is selected.
//!
//! On the socket: text `seq <n>` for each envelope stored on `<dir>`; `pong` for a `ping`,
//! which also marks the reader as in the foreground for 45 s on every replica (written to
//! the store at most once a second per socket); any other text or a binary frame closes
//! with 1003; an erase of the mailbox closes with 1000; the relay stopping closes with 1001.
//! After the fan-out lost messages (a Redis reconnect), the socket reads the direction's
//! highest seq once and sends it if it is new.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request};
use axum::response::{IntoResponse, Response};

use super::api::run;
use super::auth::{self, Bearer};
use super::error::MailboxError;
use super::Mailboxes;
use crate::store::fanout::Subscription;
use crate::store::mailbox::{Answer, Dir, Name, Op};

/// The largest message a watch reads (clients send only `ping`).
const MAX_MESSAGE: usize = 4096;
/// How often a socket writes its foreground mark at most.
const PING_WRITE_EVERY: Duration = Duration::from_secs(1);

/// Close codes.
pub const NORMAL: u16 = 1000;
/// The relay is stopping.
pub const GOING_AWAY: u16 = 1001;
/// A message the protocol does not take.
pub const UNSUPPORTED: u16 = 1003;

/// Sends a close frame.
pub async fn close(socket: &mut WebSocket, code: u16, reason: &'static str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

/// A checked upgrade: the upgrade ready to take, the store's answer, the bearer, the
/// subscription to the mailbox's channel.
pub(super) type Accepted = (WebSocketUpgrade, Answer, Bearer, Subscription);

/// The checks of a mailbox socket's upgrade, shared by watch and signal: the bearer, the
/// fan-out subscription, the store's check and bucket (`op`). The upgrade, ready to take.
pub(super) async fn accept(
    m: &Mailboxes,
    name: &Name,
    req: Request,
    max_message: usize,
    op: Op,
) -> Result<Accepted, MailboxError> {
    let (mut parts, _) = req.into_parts();
    let bearer = auth::from_upgrade(&parts.headers).ok_or(MailboxError::Unauthorized)?;
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|_| MailboxError::BadRequest)?;
    let sub = m
        .store
        .fanout()
        .subscribe(&m.store.mailbox_channel(name))
        .await
        .map_err(|_| MailboxError::Unavailable)?;
    let answer = run(m, name, &bearer, &op).await?;
    let upgrade = upgrade
        .protocols([auth::SUBPROTOCOL])
        .max_message_size(max_message)
        .max_frame_size(max_message);
    Ok((upgrade, answer, bearer, sub))
}

/// The watch upgrade.
pub async fn upgrade(m: Arc<Mailboxes>, name: Name, dir: Dir, req: Request) -> Response {
    match accept(&m, &name, req, MAX_MESSAGE, Op::Socket).await {
        Err(e) => e.into_response(),
        Ok((upgrade, _, bearer, sub)) => {
            upgrade.on_upgrade(move |socket| serve(m, name, dir, bearer, sub, socket))
        }
    }
}

async fn serve(
    m: Arc<Mailboxes>,
    name: Name,
    dir: Dir,
    bearer: Bearer,
    mut sub: Subscription,
    mut socket: WebSocket,
) {
    let _open = crate::metrics::SocketGuard::open("watch");
    let mut stop = m.stop.clone();
    let mut resyncs = m.store.fanout().resyncs();
    // Only reconnects from now on count.
    resyncs.borrow_and_update();
    let mut resyncing = true;
    let mut last_sent = 0u64;
    let mut last_ping_write: Option<Instant> = None;
    let prefix = format!("seq {} ", dir.as_str());
    loop {
        tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(t))) if t.as_str() == "ping" => {
                    if socket.send(Message::Text("pong".into())).await.is_err() {
                        return;
                    }
                    if last_ping_write.is_none_or(|t| t.elapsed() >= PING_WRITE_EVERY) {
                        last_ping_write = Some(Instant::now());
                        // The foreground mark is best effort: a failed write only means a
                        // push may be sent.
                        let _ = run(&m, &name, &bearer, &Op::Ping { dir }).await;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    close(&mut socket, UNSUPPORTED, "unsupported").await;
                    return;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            },
            note = sub.recv() => match note {
                None => {
                    close(&mut socket, GOING_AWAY, "going away").await;
                    return;
                }
                Some(note) => {
                    if &note[..] == b"erase" {
                        close(&mut socket, NORMAL, "erased").await;
                        return;
                    }
                    let Some(seq) = std::str::from_utf8(&note)
                        .ok()
                        .and_then(|n| n.strip_prefix(prefix.as_str()))
                        .and_then(|n| n.parse::<u64>().ok())
                    else {
                        continue;
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
                match run(&m, &name, &bearer, &Op::Head { dir }).await {
                    Ok(Answer::Head { last, .. }) if last > last_sent => {
                        last_sent = last;
                        if socket.send(Message::Text(format!("seq {last}").into())).await.is_err() {
                            return;
                        }
                    }
                    Err(MailboxError::NotFound) => {
                        close(&mut socket, NORMAL, "erased").await;
                        return;
                    }
                    _ => {}
                }
            },
            _ = stop.changed() => {
                close(&mut socket, GOING_AWAY, "going away").await;
                return;
            }
        }
    }
}
