//! What a mailbox socket may hold, shared by [`super::watch`] and [`super::signal`]: the
//! checks of its upgrade, caller first ([`accept`]), its place on the replica ([`Place`])
//! and its liveness ([`Liveness`]).

use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Request};

pub(crate) use super::places::{Full, Place};

use super::auth::{self, Bearer};
use super::error::MailboxError;
use super::front::Mailboxes;
use super::state::{Answer, Name, Op};
use crate::store::fanout::Subscription;

/// The kinds of mailbox socket, as labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `GET .../<dir>/watch`.
    Watch,
    /// `GET .../signal/<side>`.
    Signal,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 2] = [Kind::Watch, Kind::Signal];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Watch => "watch",
            Kind::Signal => "signal",
        }
    }
}

/// A checked upgrade: the upgrade ready to take, the store's answer, the bearer, the
/// socket's place on this replica, the subscription to the mailbox's channel.
pub(super) struct Accepted {
    pub(super) upgrade: WebSocketUpgrade,
    pub(super) answer: Answer,
    pub(super) bearer: Bearer,
    pub(super) place: Place,
    pub(super) events: Subscription,
}

/// The checks, in order: the bearer's form (401), the upgrade (400), a place on this
/// replica (503) and in the mailbox (429), the store's check of the bearer and `op`'s
/// bucket (404, 403, 429), and only then the mailbox's fan-out channel (503). A refused
/// caller leaves nothing behind: no subscription, no place, no task. The upgrade, ready to
/// take, reads messages of at most `max_message` bytes.
///
/// Nothing is lost between the store's check and the subscription: the client hears the
/// 101 only after both, and what was stored before it is in the list it reads next.
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
    let place = m.places.take(name)?;
    let answer = m.run(name, &bearer, &op).await?;
    let events = m
        .store
        .fanout()
        .subscribe(&m.store.mailboxes().channel(name))
        .await
        .map_err(|_| MailboxError::Unavailable)?;
    let upgrade = upgrade
        .protocols([auth::SUBPROTOCOL])
        .max_message_size(max_message)
        .max_frame_size(max_message);
    Ok(Accepted {
        upgrade,
        answer,
        bearer,
        place,
        events,
    })
}

/// Whether the claim a socket opened under is gone, by the store (idle expiry, an erase
/// whose message was lost, a new claim of the same id): the socket is then closed with
/// 1008. A store that does not answer keeps the socket (checked again next time).
pub(super) async fn claim_gone(
    m: &Mailboxes,
    name: &Name,
    bearer: &Bearer,
    generation: u64,
) -> bool {
    match m.run(name, bearer, &Op::Check).await {
        Ok(Answer::Opened(g)) => g != generation,
        Ok(_) | Err(MailboxError::NotFound | MailboxError::Forbidden) => true,
        Err(_) => false,
    }
}

/// A socket's liveness: it is pinged every `every`, and is dead once nothing at all (no
/// frame, no Pong) has arrived from its client for twice that.
#[derive(Debug)]
pub(super) struct Liveness {
    every: std::time::Duration,
    heard: tokio::time::Instant,
}

impl Liveness {
    /// Heard from just now.
    pub(super) fn new(every: std::time::Duration) -> Self {
        Self {
            every,
            heard: tokio::time::Instant::now(),
        }
    }

    /// Something arrived from the client.
    pub(super) fn heard(&mut self) {
        self.heard = tokio::time::Instant::now();
    }

    /// The instants of the pings, the first one interval from now.
    pub(super) fn pings(&self) -> tokio::time::Interval {
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + self.every, self.every);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    }

    /// When the socket is dead unless something arrives first.
    pub(super) fn deadline(&self) -> tokio::time::Instant {
        self.heard + self.every * 2
    }

    /// How long one write to the client may take before the socket is given up.
    pub(super) fn write_timeout(&self) -> std::time::Duration {
        self.every
    }
}

/// What became of a message handed to an [`Outbox`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Queued {
    /// On its way.
    Yes,
    /// Refused: the client's unsent messages would exceed the outbox's bound (a client that
    /// stopped reading). The socket is to be closed with 1008.
    Full,
    /// The connection is gone.
    Gone,
}

#[derive(Debug, Default)]
struct Pending {
    messages: std::collections::VecDeque<axum::extract::ws::Message>,
    bytes: usize,
    /// No more messages are taken; the writer ends once the queue is sent.
    finished: bool,
    /// The writer stopped (the connection broke).
    gone: bool,
}

#[derive(Debug)]
struct Shared {
    pending: std::sync::Mutex<Pending>,
    wake: tokio::sync::Notify,
    limit: usize,
}

/// A socket's way out: messages queue here and a writer task of its own sends them, so a
/// client that stops reading never stalls the socket's loop (or the fan-out behind it), and
/// what waits for such a client is bounded in bytes, not messages.
#[derive(Debug)]
pub(super) struct Outbox {
    shared: Arc<Shared>,
    writer: tokio::task::JoinHandle<()>,
}

fn message_len(m: &axum::extract::ws::Message) -> usize {
    use axum::extract::ws::Message;
    match m {
        Message::Text(t) => t.len(),
        Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b.len(),
        Message::Close(_) => 2,
    }
}

impl Outbox {
    /// Starts the writer over `sink`; at most `limit` bytes of binary frames wait for it.
    pub(super) fn new(
        mut sink: futures_util::stream::SplitSink<
            axum::extract::ws::WebSocket,
            axum::extract::ws::Message,
        >,
        limit: usize,
    ) -> Self {
        use futures_util::SinkExt;
        let shared = Arc::new(Shared {
            pending: Default::default(),
            wake: tokio::sync::Notify::new(),
            limit,
        });
        let writer = {
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    // Everything waiting, written at once and flushed once: a burst of frames
                    // costs one wake-up and one flush, not one each.
                    let batch = {
                        let mut p = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
                        if p.messages.is_empty() && p.finished {
                            return;
                        }
                        std::mem::take(&mut p.messages)
                    };
                    if batch.is_empty() {
                        shared.wake.notified().await;
                        continue;
                    }
                    let mut written = 0;
                    let mut ended = false;
                    for m in batch {
                        written += message_len(&m);
                        let closing = matches!(m, axum::extract::ws::Message::Close(_));
                        if sink.feed(m).await.is_err() || closing {
                            ended = true;
                            break;
                        }
                    }
                    if ended || sink.flush().await.is_err() {
                        let _ = sink.flush().await;
                        let mut p = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
                        p.gone = true;
                        p.messages.clear();
                        p.bytes = 0;
                        return;
                    }
                    let mut p = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
                    p.bytes = p.bytes.saturating_sub(written);
                }
            })
        };
        Self { shared, writer }
    }

    /// Queues `m`. Binary frames count against the bound; control and text messages (a few
    /// bytes, sent by the relay itself) always queue.
    pub(super) fn send(&self, m: axum::extract::ws::Message) -> Queued {
        let len = message_len(&m);
        let mut p = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if p.gone || p.finished {
            return Queued::Gone;
        }
        if matches!(m, axum::extract::ws::Message::Binary(_)) && p.bytes + len > self.shared.limit {
            return Queued::Full;
        }
        p.bytes += len;
        let was_empty = p.messages.is_empty();
        p.messages.push_back(m);
        drop(p);
        // A writer busy with a batch takes this one next without being woken.
        if was_empty {
            self.shared.wake.notify_one();
        }
        Queued::Yes
    }

    /// Ends the socket: what is queued is dropped, the close frame `code`/`reason` (if any)
    /// goes next, and the writer has `within` to deliver it before the connection is cut.
    pub(super) async fn close(
        self,
        frame: Option<(u16, &'static str)>,
        within: std::time::Duration,
    ) {
        {
            let mut p = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            p.messages.clear();
            p.bytes = 0;
            if let Some((code, reason)) = frame {
                p.messages.push_back(axum::extract::ws::Message::Close(Some(
                    axum::extract::ws::CloseFrame {
                        code,
                        reason: reason.into(),
                    },
                )));
            }
            p.finished = true;
        }
        self.shared.wake.notify_one();
        let mut writer = self.writer;
        if tokio::time::timeout(within, &mut writer).await.is_err() {
            writer.abort();
        }
    }
}
