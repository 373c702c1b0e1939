//! `GET .../signal/<primary|companion>`: the rendezvous for a direct connection between the
//! two devices of a link (the spec's "Signal"). The relay stores and reads no frame.
//!
//! The upgrade is the watch's (bearer, sockets' bucket, subprotocol `zerobyte.v1`). Then:
//!
//! | Relay sends | When |
//! | --- | --- |
//! | text `peer 1` | to both sides, when both are connected (again to a side whose peer was replaced) |
//! | text `peer 0` | to the side left, when the other disconnects |
//! | a binary frame | exactly as the other side sent it |
//! | text `pong` | in answer to `ping` |
//!
//! A binary frame of at most 64 KiB goes to the other side if it is connected, else it is
//! dropped; other text closes with 1003, a larger frame with 1009 (tungstenite's own limit is
//! set far above it, so the relay can send the close frame), a second socket for the same
//! side replaces the first (4000 `replaced`), erasing the mailbox closes both (1000), a side
//! over its frame bucket (400, 50 per second, the side's, in the store: spent in batches of
//! [`SPEND_BATCH`] frames or every [`SPEND_EVERY`], so neither a replacement nor a replica
//! that dies hands the side a fresh burst) is closed with 1008, and the relay stopping
//! closes with 1001. Frames to a
//! client wait in the socket's own [`Outbox`], written by a task of its own: a side whose
//! client stops reading is closed with 1008 once `RELAY_SIGNAL_BUFFER_BYTES` wait for it,
//! and neither its sender nor the fan-out behind it ever waits on it. A side silent (no
//! frame, no Pong to the relay's Pings) for two `RELAY_SOCKET_PING_S` is closed with 1001.
//!
//! The two sides may be on different replicas: presence, replacement and frames travel on
//! the mailbox's signal channel of the fan-out (sharded pub/sub on the mailbox's hash tag),
//! as short messages `<kind><side><socket id>[...]`: `H` hello (with the socket's number
//! among its side's sockets, counted by the store when it opened, so the older of two
//! sockets of one side is replaced at once whatever the replicas' clocks say), `R` the reply to
//! a hello, `T` a heartbeat every [`BEAT`], `B` goodbye, `F` a frame (with the instant it
//! was sent, for the cross-replica latency metric). A peer not heard from for [`PEER_TIMEOUT`]
//! is gone (a replica that died says no goodbye): no side stays marked present longer than
//! 16 s after its replica died. A hello can be lost; the store is the truth: every spend
//! (and at least one per ping interval) also answers whether a newer socket of the side
//! opened, and the older closes with 4000 then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};

use super::auth::Bearer;
use super::close::Close;
use super::error::MailboxError;
use super::front::Mailboxes;
use super::path::{self, Target};
use super::socket::{accept, Liveness, Outbox, Queued};
use super::state::{Answer, Bucket, MailboxEvent, Name, Op, Side};
use crate::metrics;
use crate::store::fanout::{Channel, Subscription};
use crate::store::mailbox::receive_event;

/// The largest frame relayed.
pub const MAX_FRAME: usize = 64 * 1024;
/// What tungstenite accepts before dropping a connection without a close frame: far above
/// [`MAX_FRAME`], so a larger frame is read whole and answered with 1009.
const READ_LIMIT: usize = 1024 * 1024;
/// Whether a read failed because the message was over [`READ_LIMIT`].
pub(super) fn over_read_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(tungstenite::Error::Capacity(_)) = s.downcast_ref::<tungstenite::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// How often a socket tells the other side it is still there.
pub const BEAT: Duration = Duration::from_secs(5);
/// A peer not heard from for this long is gone (checked every [`CHECK`], so no side stays
/// marked present longer than `PEER_TIMEOUT + CHECK` after its replica died).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a socket checks that its peer is still heard from.
pub const CHECK: Duration = Duration::from_secs(1);
/// Frames relayed before they are spent from the side's bucket in the store: a socket
/// relays at most this many frames its side's bucket may not hold, and a replica that dies
/// loses at most this many of the side's spending.
pub const SPEND_BATCH: u32 = 10;
/// How often a socket with frames not yet spent spends them (a frame waits at most about
/// this long). A kill loses at most [`SPEND_BATCH`] frames whatever this is; it only bounds
/// how late a slow sender's frames reach the store. 100 ms cost a store call per one or two
/// frames at the benchmark's ceiling (15 frames/s per side), 19% more relay CPU per MB.
pub const SPEND_EVERY: Duration = Duration::from_secs(1);
/// Frames relayed and not yet spent while the store does not answer, after which the socket
/// is closed (1011) rather than relay more on credit: one full bucket.
const UNSPENT_MAX: u64 = 400;

/// One signal message on the fan-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Note {
    /// A socket opened, the `socket`th of its side.
    Hello {
        side: Side,
        id: [u8; 16],
        socket: u64,
    },
    /// A socket answers a hello: it is there.
    Here { side: Side, id: [u8; 16] },
    /// A socket is still there.
    Beat { side: Side, id: [u8; 16] },
    /// A socket closed.
    Bye { side: Side, id: [u8; 16] },
    /// A frame, sent at `sent_us`.
    Frame {
        side: Side,
        id: [u8; 16],
        sent_us: i64,
        data: Bytes,
    },
}

fn side_byte(s: Side) -> u8 {
    match s {
        Side::Primary => b'p',
        Side::Companion => b'c',
    }
}

impl Note {
    /// The wire form: kind, side, the socket id (16 hex), then per kind a 16-digit number
    /// (a hello's socket number, a frame's instant) and the frame's bytes.
    pub(crate) fn encode(&self) -> Bytes {
        let (kind, side, id) = match self {
            Note::Hello { side, id, .. } => (b'H', side, id),
            Note::Here { side, id } => (b'R', side, id),
            Note::Beat { side, id } => (b'T', side, id),
            Note::Bye { side, id } => (b'B', side, id),
            Note::Frame { side, id, .. } => (b'F', side, id),
        };
        let mut b = BytesMut::with_capacity(
            34 + if let Note::Frame { data, .. } = self {
                data.len()
            } else {
                0
            },
        );
        b.put_u8(kind);
        b.put_u8(side_byte(*side));
        b.put_slice(id);
        match self {
            Note::Hello { socket, .. } => b.put_slice(format!("{socket:016}").as_bytes()),
            Note::Frame { sent_us, data, .. } => {
                b.put_slice(format!("{sent_us:016}").as_bytes());
                b.put_slice(data);
            }
            _ => {}
        }
        b.freeze()
    }

    /// Inverse of [`Note::encode`]; `None` for anything else.
    pub(crate) fn decode(b: &Bytes) -> Option<Self> {
        if b.len() < 18 {
            return None;
        }
        let side = match b[1] {
            b'p' => Side::Primary,
            b'c' => Side::Companion,
            _ => return None,
        };
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[2..18]);
        let instant = || -> Option<i64> { std::str::from_utf8(b.get(18..34)?).ok()?.parse().ok() };
        Some(match b[0] {
            b'H' if b.len() == 34 => Note::Hello {
                side,
                id,
                socket: u64::try_from(instant()?).ok()?,
            },
            b'R' if b.len() == 18 => Note::Here { side, id },
            b'T' if b.len() == 18 => Note::Beat { side, id },
            b'B' if b.len() == 18 => Note::Bye { side, id },
            b'F' if b.len() >= 34 => Note::Frame {
                side,
                id,
                sent_us: instant()?,
                data: b.slice(34..),
            },
            _ => return None,
        })
    }
}

fn socket_id() -> [u8; 16] {
    let mut raw = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut raw);
    let mut id = [0u8; 16];
    id.copy_from_slice(crate::device::hex(&raw).as_bytes());
    id
}

/// The signal upgrade. Round trips: one script (bearer, bucket, the side's socket number),
/// then, for a caller the store admitted, the two fan-out subscriptions (the mailbox's
/// channel for `erase`, its signal channel). While open: one script per [`SPEND_BATCH`]
/// frames or [`SPEND_EVERY`] (the frames spent from the side's bucket), one per ping
/// interval (the claim and the socket's place checked), and one at close for frames not yet
/// spent.
pub async fn upgrade(
    State(m): State<Arc<Mailboxes>>,
    target: Target<path::Signal>,
    req: Request,
) -> Result<Response, MailboxError> {
    let (name, path::Signal(side)) = (target.name, target.place);
    let a = accept(&m, &name, req, READ_LIMIT, Op::SignalOpen { side }).await?;
    let channel = m.store.mailboxes().signal_channel(&name);
    let signals = m
        .store
        .fanout()
        .subscribe(&channel)
        .await
        .map_err(|_| MailboxError::Unavailable)?;
    let (socket_no, generation) = match a.answer {
        Answer::SignalOpened { socket, generation } => (socket, generation),
        _ => (0, 0),
    };
    let (bearer, place, events) = (a.bearer, a.place, a.events);
    Ok(a.upgrade.on_upgrade(move |socket| async move {
        let s = Session {
            m,
            name,
            side,
            bearer,
            channel,
            generation,
            id: socket_id(),
            socket: socket_no,
            relayed: 0,
            charged: 0,
            store_failing: false,
            peer: None,
        };
        s.serve(socket, events, signals).await;
        drop(place);
    }))
}

struct Session {
    m: Arc<Mailboxes>,
    name: Name,
    side: Side,
    bearer: Bearer,
    channel: Channel,
    /// The generation of the claim the socket opened under.
    generation: u64,
    id: [u8; 16],
    /// The socket's number among its side's sockets (the newest is the side's).
    socket: u64,
    /// Frames relayed since the socket opened.
    relayed: u64,
    /// Of those, the ones the store has charged to the side's bucket (its answer came).
    charged: u64,
    /// The last spend found the store not answering: the next is the tick's.
    store_failing: bool,
    /// The other side's socket and when it was last heard from.
    peer: Option<([u8; 16], Instant)>,
}

/// Why a session ended.
enum End {
    /// The relay closed it.
    Closed(Close),
    /// The client left (or the connection broke).
    Left,
}

impl Session {
    /// Frames relayed and not yet charged to the side's bucket in the store.
    fn unspent(&self) -> u64 {
        self.relayed - self.charged
    }

    async fn publish(&self, note: Note) {
        let _ = self
            .m
            .store
            .fanout()
            .publish(&self.channel, &note.encode(), self.m.now_ms())
            .await;
    }

    fn text(out: &Outbox, t: &'static str) -> bool {
        out.send(Message::Text(t.into())) == Queued::Yes
    }

    async fn serve(
        mut self,
        socket: WebSocket,
        mut events: Subscription,
        mut signals: Subscription,
    ) {
        use futures_util::StreamExt;
        let _open = metrics::SocketGuard::open(super::socket::Kind::Signal.as_str());
        let (sink, mut stream) = socket.split();
        let out = Outbox::new(sink, self.m.settings.sockets.signal_buffer_bytes);
        self.publish(Note::Hello {
            side: self.side,
            id: self.id,
            socket: self.socket,
        })
        .await;
        let end = self.run(&out, &mut stream, &mut events, &mut signals).await;
        // The close frame (if any) goes out first, within one ping interval: a client that
        // does not read does not hold the connection longer.
        let frame = match end {
            End::Closed(c) => Some((c.code(), c.reason())),
            End::Left => None,
        };
        out.close(frame, self.m.settings.sockets.ping).await;
        drop(stream);
        if let End::Closed(close) = end {
            metrics::signal_close(close.as_str());
            if close != Close::Replaced {
                // A replaced socket says no goodbye: its side is still there, in its successor.
                self.publish(Note::Bye {
                    side: self.side,
                    id: self.id,
                })
                .await;
            }
        } else {
            self.publish(Note::Bye {
                side: self.side,
                id: self.id,
            })
            .await;
        }
        if self.unspent() > 0 {
            let _ = self.spend().await;
        }
    }

    /// Spends the unspent frames from the side's bucket in the store, which also answers
    /// whether this is still the side's newest socket and its claim still there: `Some` when
    /// the session ends (4000 replaced, 1008 over the bucket or the claim gone, 1011 when the
    /// store has not answered for a whole bucket's worth of frames). A store that does not
    /// answer keeps the count for the next try.
    async fn spend(&mut self) -> Option<End> {
        // The running count, not the frames since the last answer: a spend whose reply was
        // lost after the store ran it is sent again as the same count, which charges
        // nothing twice.
        let op = Op::SignalSpend {
            side: self.side,
            socket: self.socket,
            relayed: self.relayed,
        };
        let r = self.m.run(&self.name, &self.bearer, &op).await;
        self.store_failing = matches!(r, Err(MailboxError::Unavailable));
        if !self.store_failing {
            self.charged = self.relayed;
        }
        match r {
            Ok(Answer::Opened(g)) if g == self.generation => None,
            Ok(Answer::Replaced) => Some(End::Closed(Close::Replaced)),
            Err(MailboxError::RateLimited(_)) => {
                metrics::mailbox_rate_limited(Bucket::Frames(self.side).label());
                Some(End::Closed(Close::Policy))
            }
            Err(MailboxError::Unavailable) if self.unspent() >= UNSPENT_MAX => {
                Some(End::Closed(Close::Internal))
            }
            // Tried again at the next spend tick.
            Err(MailboxError::Unavailable) => None,
            // Another generation of the claim, or none: the socket's mailbox is gone.
            Ok(_) | Err(_) => Some(End::Closed(Close::Policy)),
        }
    }

    async fn run(
        &mut self,
        out: &Outbox,
        socket: &mut futures_util::stream::SplitStream<WebSocket>,
        events: &mut Subscription,
        signals: &mut Subscription,
    ) -> End {
        use futures_util::StreamExt;
        let mut stop = self.m.stop.clone();
        let mut resyncs = self.m.store.fanout().resyncs();
        // Only reconnects from now on count.
        resyncs.borrow_and_update();
        let mut resyncing = true;
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + BEAT, BEAT);
        let mut check = tokio::time::interval_at(tokio::time::Instant::now() + CHECK, CHECK);
        let mut spend =
            tokio::time::interval_at(tokio::time::Instant::now() + SPEND_EVERY, SPEND_EVERY);
        spend.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut live = Liveness::new(self.m.settings.sockets.ping);
        let mut pings = live.pings();
        loop {
            tokio::select! {
                msg = socket.next() => { live.heard(); match msg {
                    Some(Ok(Message::Binary(data))) => {
                        if data.len() > MAX_FRAME {
                            return End::Closed(Close::TooBig);
                        }
                        if self.unspent() >= UNSPENT_MAX {
                            return End::Closed(Close::Internal);
                        }
                        self.relayed += 1;
                        if self.peer.is_some() {
                            metrics::signal_frame(true, data.len());
                            self.publish(Note::Frame { side: self.side, id: self.id, sent_us: self.m.clock.now_us(), data }).await;
                        } else {
                            metrics::signal_frame(false, data.len());
                        }
                        // At most SPEND_BATCH frames relayed on credit: once a batch is full
                        // (after the frame that filled it went out, so no frame waits for the
                        // store) the bucket in the store decides before more go. While the
                        // store does not answer, the spend tick tries again, not every frame
                        // (each try waits the timeout), up to a bucket's worth of frames.
                        if self.unspent() >= u64::from(SPEND_BATCH) && !self.store_failing {
                            if let Some(end) = self.spend().await {
                                return end;
                            }
                        }
                    }
                    Some(Ok(Message::Text(t))) if t.as_str() == "ping" => {
                        if !Self::text(out, "pong") {
                            return End::Left;
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Text(_))) => {
                        return End::Closed(Close::Unsupported);
                    }
                    Some(Ok(Message::Close(_))) | None => return End::Left,
                    // A message over READ_LIMIT: tungstenite stopped reading it, and the
                    // close frame can still be written. Anything else broke the connection.
                    Some(Err(e)) if over_read_limit(&e) => {
                        return End::Closed(Close::TooBig);
                    }
                    Some(Err(_)) => return End::Left,
                }},
                // One timer for the socket's life, not one per frame.
                _ = spend.tick(), if self.unspent() > 0 => {
                    if let Some(end) = self.spend().await {
                        return end;
                    }
                },
                _ = pings.tick() => {
                    // Once a ping interval, the store says whether the claim is still there
                    // and this is still the side's newest socket (a hello can be lost).
                    if let Some(end) = self.spend().await {
                        return end;
                    }
                    if out.send(Message::Ping(Bytes::new())) == Queued::Gone {
                        return End::Left;
                    }
                },
                // Nothing from the client for two ping intervals: a half-open socket.
                _ = tokio::time::sleep_until(live.deadline()) => return End::Closed(Close::GoingAway),
                note = signals.recv() => {
                    let Some(note) = note else {
                        return End::Closed(Close::GoingAway);
                    };
                    if let Some(end) = self.on_note(out, &note).await {
                        return end;
                    }
                },
                ev = events.recv() => match ev {
                    Some(ev) if matches!(
                        receive_event(&ev),
                        Some(MailboxEvent::Erased { generation }) if generation == self.generation
                    ) => {
                        return End::Closed(Close::Normal);
                    }
                    // An erase may be among the messages this socket fell behind on.
                    Some(_) if events.take_lagged() => {
                        if let Some(close) = self.still_there(&mut stop).await {
                            return End::Closed(close);
                        }
                    }
                    Some(_) => {}
                    None => {
                        return End::Closed(Close::GoingAway);
                    }
                },
                r = resyncs.changed(), if resyncing => {
                    // The fan-out reconnected: an erase may have been lost meanwhile.
                    if r.is_err() {
                        resyncing = false;
                    } else if let Some(close) = self.still_there(&mut stop).await {
                        return End::Closed(close);
                    }
                },
                _ = beat.tick() => {
                    self.publish(Note::Beat { side: self.side, id: self.id }).await;
                },
                _ = check.tick() => {
                    if self.peer.is_some_and(|(_, seen)| seen.elapsed() > PEER_TIMEOUT) {
                        self.peer = None;
                        if !Self::text(out, "peer 0") {
                            return End::Left;
                        }
                    }
                },
                _ = stop.changed() => {
                    return End::Closed(Close::GoingAway);
                }
            }
        }
    }

    /// After a gap in the fan-out, asks the store whether the mailbox is still this
    /// bearer's, trying again (100 ms doubling to 1 s) for up to 10 s: `Some` close when the
    /// socket must end (1000 erased or taken by another bearer, 1001 stopping, 1011 the
    /// store never answered).
    async fn still_there(&self, stop: &mut tokio::sync::watch::Receiver<bool>) -> Option<Close> {
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut pause = Duration::from_millis(100);
        // Nothing new: the count the store has charged (the unspent frames go with the
        // next spend).
        let check = Op::SignalSpend {
            side: self.side,
            socket: self.socket,
            relayed: self.charged,
        };
        loop {
            match self.m.run(&self.name, &self.bearer, &check).await {
                Ok(Answer::Opened(g)) if g == self.generation => return None,
                // A newer socket of the side opened while the hello was lost.
                Ok(Answer::Replaced) => return Some(Close::Replaced),
                Ok(_) | Err(MailboxError::NotFound | MailboxError::Forbidden) => {
                    return Some(Close::Normal)
                }
                Err(_) if Instant::now() >= give_up => return Some(Close::Internal),
                Err(_) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.changed() => return Some(Close::GoingAway),
            }
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Acts on one note of the signal channel; `Some` when the session ends.
    async fn on_note(&mut self, out: &Outbox, raw: &Bytes) -> Option<End> {
        let note = Note::decode(raw)?;
        let other = self.side.other();
        match note {
            // Two sockets of one side: the older goes.
            Note::Hello { side, id, socket }
                if side == self.side && id != self.id && socket > self.socket =>
            {
                return Some(End::Closed(Close::Replaced));
            }
            Note::Hello { side, id, .. } if side == other => {
                self.publish(Note::Here {
                    side: self.side,
                    id: self.id,
                })
                .await;
                return self.seen(out, id).await;
            }
            Note::Here { side, id } | Note::Beat { side, id } if side == other => {
                return self.seen(out, id).await;
            }
            Note::Bye { side, id } if side == other && self.peer.is_some_and(|(p, _)| p == id) => {
                self.peer = None;
                if !Self::text(out, "peer 0") {
                    return Some(End::Left);
                }
            }
            Note::Frame {
                side,
                id,
                sent_us,
                data,
            } if side == other => {
                metrics::signal_frame_delay(Duration::from_micros(
                    (self.m.clock.now_us() - sent_us).max(0) as u64,
                ));
                // A frame from a socket not yet seen is the peer too.
                if let Some(end) = self.seen(out, id).await {
                    return Some(end);
                }
                match out.send(Message::Binary(data)) {
                    Queued::Yes => {}
                    // This side stopped reading: it alone is closed, the sender and the
                    // other sockets go on.
                    Queued::Full => return Some(End::Closed(Close::Policy)),
                    Queued::Gone => return Some(End::Left),
                }
            }
            _ => {}
        }
        None
    }

    /// The other side's socket `id` is there: `peer 1` if it is new.
    async fn seen(&mut self, out: &Outbox, id: [u8; 16]) -> Option<End> {
        let fresh = self.peer.is_none_or(|(p, _)| p != id);
        self.peer = Some((id, Instant::now()));
        if fresh && !Self::text(out, "peer 1") {
            return Some(End::Left);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn notes_round_trip() {
        let id = *b"0123456789abcdef";
        for n in [
            Note::Hello {
                side: Side::Primary,
                id,
                socket: 1_790_000,
            },
            Note::Here {
                side: Side::Companion,
                id,
            },
            Note::Beat {
                side: Side::Primary,
                id,
            },
            Note::Bye {
                side: Side::Companion,
                id,
            },
            Note::Frame {
                side: Side::Primary,
                id,
                sent_us: 5,
                data: Bytes::from_static(b"\x00\x01frame"),
            },
            Note::Frame {
                side: Side::Companion,
                id,
                sent_us: 5,
                data: Bytes::new(),
            },
        ] {
            assert_eq!(Note::decode(&n.encode()), Some(n));
        }
        assert_eq!(Note::decode(&Bytes::from_static(b"seq p2c 1")), None);
        assert_eq!(Note::decode(&Bytes::from_static(b"erase")), None);
    }

    proptest! {
        #[test]
        fn no_note_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Note::decode(&Bytes::from(b));
        }
    }
}
