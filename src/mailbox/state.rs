//! A mailbox (MAILBOX.md) and the rules every request follows, as plain types and pure
//! functions: one operation per request ([`Op`]), applied after the bearer check and the
//! bucket token ([`request`]), with what live sockets must hear of it ([`MailboxEvent`]). No
//! clock and no store: each takes `now_ms`. The in-process store runs [`request`] under a
//! lock and `mailbox.lua` mirrors it in one script on Redis (a differential test binds the
//! two).
//!
//! A mailbox is named in the store by the first 32 hex of SHA-256 of `<app>/<id>`
//! ([`Name`]), so a copy of the store reveals no mailbox id; it keeps the SHA-256 of its
//! bearer, its buckets, and per direction its envelopes (seq -> bytes), its sealed push
//! registration and until when its reader is in the foreground. Everything of a mailbox
//! lives under one hash tag and expires `idle` after the last write or claim.

mod event;
mod kinds;
mod ops;

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::policy::gcra_take;

pub use event::MailboxEvent;
pub use kinds::{
    Bucket, Dir, Limits, Name, Side, BUCKET_LABELS, FOREGROUND_MS, LIST_MAX_BYTES, PRUNE_BATCH,
};
pub use ops::{Answer, Envelope, Op, PushDecision, Request};

#[derive(Debug, Clone, Default)]
struct Direction {
    envelopes: BTreeMap<u64, Bytes>,
    registration: Option<Bytes>,
    foreground_until_ms: i64,
}

/// One mailbox's state: its bearer, claim generation, buckets, both directions, and until
/// when it lives.
#[derive(Debug, Clone)]
pub struct Mailbox {
    bearer: String,
    /// The claim's generation: the instant (ms) the claim made the mailbox. A mailbox that
    /// expired and was claimed again is another generation, and its events are not the
    /// old sockets'.
    generation: u64,
    buckets: HashMap<&'static str, i64>,
    /// Per side, the number of its newest signal socket (0: none opened yet).
    sockets: [u64; 2],
    /// Per side, what was charged to the two latest sockets that spent frames: (socket,
    /// frames charged) for the newest, then the one before.
    charged: [[(u64, u64); 2]; 2],
    dirs: [Direction; 2],
    expires_ms: i64,
}

/// Applies `op` for the bearer whose SHA-256 is `bearer` to the mailbox `current` (see
/// [`request`], which also makes and drops mailboxes).
fn apply(current: &mut Mailbox, bearer: &str, op: &Op, now_ms: i64, limits: Limits) -> Answer {
    if current.bearer != bearer {
        return Answer::Forbidden;
    }
    if let Some(b) = op.bucket() {
        let (capacity, emission) = b.rate();
        let tat = current.buckets.get(b.field()).copied().unwrap_or(0);
        match gcra_take(tat, now_ms * 1000, emission, capacity) {
            Ok(t) => {
                current.buckets.insert(b.field(), t);
            }
            Err(retry) => return Answer::RateLimited(retry),
        }
    }
    let touch = |m: &mut Mailbox| m.expires_ms = now_ms + limits.idle_ms;
    match op {
        Op::Claim => {
            touch(current);
            Answer::Claimed
        }
        Op::Erase => Answer::Done,
        Op::Put {
            dir,
            seq,
            data,
            notify,
        } => {
            let d = &mut current.dirs[dir.index()];
            if let Some(have) = d.envelopes.get(seq) {
                return if have == data {
                    Answer::Same
                } else {
                    Answer::Conflict
                };
            }
            if d.envelopes.len() >= limits.max_envelopes {
                return Answer::Full;
            }
            d.envelopes.insert(*seq, data.clone());
            let decision = if !notify {
                PushDecision::NotAsked
            } else if d.foreground_until_ms > now_ms {
                PushDecision::Foreground
            } else if let Some(r) = d.registration.clone() {
                let b = Bucket::Pushes(*dir);
                let (capacity, emission) = b.rate();
                let tat = current.buckets.get(b.field()).copied().unwrap_or(0);
                match gcra_take(tat, now_ms * 1000, emission, capacity) {
                    Err(_) => PushDecision::Throttled,
                    Ok(t) => {
                        current.buckets.insert(b.field(), t);
                        PushDecision::Send(r)
                    }
                }
            } else {
                PushDecision::Unregistered
            };
            touch(current);
            Answer::Stored(decision)
        }
        Op::List { dir, after, limit } => {
            let d = &current.dirs[dir.index()];
            let last = d.envelopes.keys().next_back().copied().unwrap_or(0);
            let mut envelopes = Vec::new();
            let mut bytes = 0usize;
            let mut more = false;
            for (seq, data) in d.envelopes.range(after.saturating_add(1)..) {
                if envelopes.len() == *limit || bytes + data.len() > LIST_MAX_BYTES {
                    more = true;
                    break;
                }
                bytes += data.len();
                envelopes.push(Envelope {
                    seq: *seq,
                    data: data.clone(),
                });
            }
            Answer::Listed {
                envelopes,
                last,
                more,
            }
        }
        Op::Get { dir, seq } => Answer::Got(current.dirs[dir.index()].envelopes.get(seq).cloned()),
        Op::Head { dir } => {
            let d = &current.dirs[dir.index()];
            Answer::Head {
                last: d.envelopes.keys().next_back().copied().unwrap_or(0),
                count: d.envelopes.len() as u64,
            }
        }
        Op::Prune { dir, upto } | Op::PruneMore { dir, upto } => {
            let d = &mut current.dirs[dir.index()];
            let gone: Vec<u64> = d
                .envelopes
                .range(..=*upto)
                .take(PRUNE_BATCH)
                .map(|(seq, _)| *seq)
                .collect();
            for seq in gone {
                d.envelopes.remove(&seq);
            }
            if d.envelopes.range(..=*upto).next().is_some() {
                Answer::More
            } else {
                Answer::Done
            }
        }
        Op::Register { dir, sealed } => {
            current.dirs[dir.index()].registration = Some(sealed.clone());
            Answer::Done
        }
        Op::Unregister { dir } => {
            current.dirs[dir.index()].registration = None;
            Answer::Done
        }
        Op::Forget { dir, sealed } => {
            let d = &mut current.dirs[dir.index()];
            if d.registration.as_ref() == Some(sealed) {
                d.registration = None;
            }
            Answer::Done
        }
        Op::Ice => Answer::Done,
        Op::Socket | Op::Check => Answer::Opened(current.generation),
        Op::Unping { dir } => {
            current.dirs[dir.index()].foreground_until_ms = 0;
            Answer::Done
        }
        Op::SignalOpen { side } => {
            let socket = &mut current.sockets[side.index()];
            *socket += 1;
            Answer::SignalOpened {
                socket: *socket,
                generation: current.generation,
            }
        }
        Op::SignalSpend {
            side,
            socket,
            relayed,
        } => {
            // The frames were relayed: they are spent whether or not the socket was replaced
            // meanwhile, so no replacement hands its side a fresh burst. Only those not
            // charged yet: a spend sent again after a lost reply charges nothing twice.
            let due = charge(&mut current.charged[side.index()], *socket, *relayed);
            let b = Bucket::Frames(*side);
            let (capacity, emission) = b.rate();
            let mut tat = current.buckets.get(b.field()).copied().unwrap_or(0);
            let mut refused = None;
            for _ in 0..due {
                match gcra_take(tat, now_ms * 1000, emission, capacity) {
                    Ok(t) => tat = t,
                    Err(retry) => {
                        refused = Some(retry);
                        break;
                    }
                }
            }
            if due > 0 {
                current.buckets.insert(b.field(), tat);
            }
            if let Some(retry) = refused {
                Answer::RateLimited(retry)
            } else if current.sockets[side.index()] != *socket {
                Answer::Replaced
            } else {
                Answer::Opened(current.generation)
            }
        }
        Op::Ping { dir } => {
            current.dirs[dir.index()].foreground_until_ms = now_ms + FOREGROUND_MS;
            Answer::Done
        }
    }
}

/// The frames of `socket`, which has relayed `relayed` since it opened, not charged yet,
/// with the side's record (`slots`: the newest spending socket, then the one before)
/// brought up to date. A socket newer than both becomes the newest; one older than both
/// (replaced twice over) is charged all it relayed. `mailbox.lua` does the same.
fn charge(slots: &mut [(u64, u64); 2], socket: u64, relayed: u64) -> u64 {
    let [newest, before] = *slots;
    if socket == newest.0 {
        slots[0].1 = newest.1.max(relayed);
        relayed.saturating_sub(newest.1)
    } else if socket == before.0 {
        slots[1].1 = before.1.max(relayed);
        relayed.saturating_sub(before.1)
    } else if socket > newest.0 {
        *slots = [(socket, relayed), newest];
        relayed
    } else {
        relayed
    }
}

impl Mailbox {
    /// Whether it is idle past its time at `now_ms` (it then no longer exists).
    pub fn expired(&self, now_ms: i64) -> bool {
        self.expires_ms <= now_ms
    }
}

/// What a request did to whether the mailbox exists, for the store that keeps it.
#[derive(Debug)]
pub enum Kept {
    /// It exists as before (or still does not).
    Same,
    /// A claim made it: the store keeps this.
    Made(Box<Mailbox>),
    /// An erase ended it: the store forgets it.
    Dropped,
}

/// One request (see [`Op`]) for the bearer whose SHA-256 hex is `bearer` on `kept`, the
/// mailbox's state (`None` when the name has none: never claimed, erased, or expired, see
/// [`Mailbox::expired`]). A claim of a free name makes the mailbox, spending its first
/// read token like any other claim; an erase that is done ends it. The answer, the
/// generation of the claim it applied to (0 when none), for the event it publishes
/// ([`MailboxEvent::of`]), and what the store does with the mailbox.
pub fn request(
    kept: Option<&mut Mailbox>,
    bearer: &str,
    op: &Op,
    now_ms: i64,
    limits: Limits,
) -> (Answer, u64, Kept) {
    let Some(m) = kept else {
        if *op != Op::Claim {
            return (Answer::NotFound, 0, Kept::Same);
        }
        // The claim's generation: the instant that made it.
        let generation = now_ms.max(0) as u64;
        let mut m = Mailbox {
            bearer: bearer.to_owned(),
            generation,
            buckets: HashMap::new(),
            sockets: [0; 2],
            charged: [[(0, 0); 2]; 2],
            dirs: Default::default(),
            expires_ms: now_ms + limits.idle_ms,
        };
        let (capacity, emission) = Bucket::Reads.rate();
        if let Ok(t) = gcra_take(0, now_ms * 1000, emission, capacity) {
            m.buckets.insert(Bucket::Reads.field(), t);
        }
        return (Answer::Created, generation, Kept::Made(Box::new(m)));
    };
    let generation = m.generation;
    let answer = apply(m, bearer, op, now_ms, limits);
    let kept = if *op == Op::Erase && answer == Answer::Done {
        Kept::Dropped
    } else {
        Kept::Same
    };
    (answer, generation, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One name's mailbox, as a store keeps it.
    #[derive(Default)]
    struct One(std::cell::RefCell<Option<Mailbox>>);

    impl One {
        fn apply(&self, _n: &Name, bearer: &str, op: &Op, now_ms: i64, limits: Limits) -> Answer {
            let mut kept = self.0.borrow_mut();
            if kept.as_ref().is_some_and(|m| m.expired(now_ms)) {
                *kept = None;
            }
            let (answer, _, change) = request(kept.as_mut(), bearer, op, now_ms, limits);
            match change {
                Kept::Same => {}
                Kept::Made(m) => *kept = Some(*m),
                Kept::Dropped => *kept = None,
            }
            answer
        }
    }

    const T0: i64 = 1_790_000_000_000;
    const LIMITS: Limits = Limits {
        idle_ms: 60_000,
        max_envelopes: 3,
    };

    fn put(dir: Dir, seq: u64, data: &'static [u8], notify: bool) -> Op {
        Op::Put {
            dir,
            seq,
            data: Bytes::from_static(data),
            notify,
        }
    }

    /// A side's sockets are counted: the newest is the side's, and the older learns it on its
    /// next spend. Relayed frames are spent whoever relayed them, so a replacement starts
    /// from what its side has left, not a fresh 400; a spend sent again charges nothing.
    #[test]
    fn the_newest_socket_is_the_sides_and_frames_are_the_sides() {
        let m = One::default();
        let n = Name::of("chat", "abcdefghijklmnop");
        assert_eq!(m.apply(&n, "b", &Op::Claim, T0, LIMITS), Answer::Created);
        let g = T0 as u64;
        let open = Op::SignalOpen {
            side: Side::Primary,
        };
        let spend = |socket, relayed| Op::SignalSpend {
            side: Side::Primary,
            socket,
            relayed,
        };
        assert_eq!(
            m.apply(&n, "b", &open, T0, LIMITS),
            Answer::SignalOpened {
                socket: 1,
                generation: g
            }
        );
        assert_eq!(
            m.apply(&n, "b", &spend(1, 300), T0, LIMITS),
            Answer::Opened(g)
        );
        // Sent again (its reply was lost): nothing more is charged.
        assert_eq!(
            m.apply(&n, "b", &spend(1, 300), T0, LIMITS),
            Answer::Opened(g)
        );
        assert_eq!(
            m.apply(&n, "b", &open, T0, LIMITS),
            Answer::SignalOpened {
                socket: 2,
                generation: g
            }
        );
        // The companion's count is its own.
        assert_eq!(
            m.apply(
                &n,
                "b",
                &Op::SignalOpen {
                    side: Side::Companion
                },
                T0,
                LIMITS
            ),
            Answer::SignalOpened {
                socket: 1,
                generation: g
            }
        );
        // The newer socket spends, then the older one's last frames are spent, and it hears
        // it was replaced (each socket's count is its own).
        assert_eq!(
            m.apply(&n, "b", &spend(2, 20), T0, LIMITS),
            Answer::Opened(g)
        );
        assert_eq!(
            m.apply(&n, "b", &spend(1, 350), T0, LIMITS),
            Answer::Replaced
        );
        assert_eq!(
            m.apply(&n, "b", &spend(1, 350), T0, LIMITS),
            Answer::Replaced
        );
        assert_eq!(
            m.apply(&n, "b", &spend(2, 50), T0, LIMITS),
            Answer::Opened(g)
        );
        // 400 spent: the next frame does not fit (one back every 20 ms).
        assert_eq!(
            m.apply(&n, "b", &spend(2, 51), T0, LIMITS),
            Answer::RateLimited(1)
        );
        // One frame more 20 ms on fits (the refused one is not charged again).
        assert_eq!(
            m.apply(&n, "b", &spend(2, 52), T0 + 20, LIMITS),
            Answer::Opened(g)
        );
        assert_eq!(
            m.apply(&n, "b", &spend(2, 53), T0 + 20, LIMITS),
            Answer::RateLimited(1)
        );
        // A check spends nothing and needs the claim.
        assert_eq!(
            m.apply(&n, "b", &spend(2, 0), T0 + 20, LIMITS),
            Answer::Opened(g)
        );
        assert_eq!(
            m.apply(&n, "other", &spend(2, 0), T0 + 20, LIMITS),
            Answer::Forbidden
        );
    }

    #[test]
    fn claim_put_list_and_the_bearer() {
        let m = One::default();
        let n = Name::of("chat", "abcdefghijklmnop");
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 1, b"x", false), T0, LIMITS),
            Answer::NotFound
        );
        assert_eq!(m.apply(&n, "b", &Op::Claim, T0, LIMITS), Answer::Created);
        assert_eq!(m.apply(&n, "b", &Op::Claim, T0, LIMITS), Answer::Claimed);
        assert_eq!(
            m.apply(&n, "other", &Op::Claim, T0, LIMITS),
            Answer::Forbidden
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 2, b"x", false), T0, LIMITS),
            Answer::Stored(PushDecision::NotAsked)
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 2, b"x", true), T0, LIMITS),
            Answer::Same
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 2, b"y", false), T0, LIMITS),
            Answer::Conflict
        );
        m.apply(&n, "b", &put(Dir::P2c, 5, b"z", false), T0, LIMITS);
        m.apply(&n, "b", &put(Dir::P2c, 9, b"w", false), T0, LIMITS);
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 10, b"v", false), T0, LIMITS),
            Answer::Full
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::C2p, 10, b"v", false), T0, LIMITS),
            Answer::Stored(PushDecision::NotAsked)
        );
        let listed = m.apply(
            &n,
            "b",
            &Op::List {
                dir: Dir::P2c,
                after: 2,
                limit: 1,
            },
            T0,
            LIMITS,
        );
        assert_eq!(
            listed,
            Answer::Listed {
                envelopes: vec![Envelope {
                    seq: 5,
                    data: Bytes::from_static(b"z")
                }],
                last: 9,
                more: true
            }
        );
        assert_eq!(
            m.apply(
                &n,
                "b",
                &Op::Prune {
                    dir: Dir::P2c,
                    upto: 5
                },
                T0,
                LIMITS
            ),
            Answer::Done
        );
        assert_eq!(
            m.apply(&n, "b", &Op::Head { dir: Dir::P2c }, T0, LIMITS),
            Answer::Head { last: 9, count: 1 }
        );
        assert_eq!(m.apply(&n, "b", &Op::Erase, T0, LIMITS), Answer::Done);
        assert_eq!(
            m.apply(&n, "b", &Op::Head { dir: Dir::P2c }, T0, LIMITS),
            Answer::NotFound
        );
    }

    #[test]
    fn pushes_follow_the_foreground_the_bucket_and_the_registration() {
        let m = One::default();
        let n = Name::of("chat", "abcdefghijklmnop");
        m.apply(&n, "b", &Op::Claim, T0, LIMITS);
        let big = Limits {
            max_envelopes: 1000,
            ..LIMITS
        };
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 1, b"x", true), T0, big),
            Answer::Stored(PushDecision::Unregistered)
        );
        let sealed = Bytes::from_static(b"sealed");
        m.apply(
            &n,
            "b",
            &Op::Register {
                dir: Dir::P2c,
                sealed: sealed.clone(),
            },
            T0,
            big,
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 2, b"x", true), T0, big),
            Answer::Stored(PushDecision::Send(sealed.clone()))
        );
        m.apply(&n, "b", &Op::Ping { dir: Dir::P2c }, T0, big);
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 3, b"x", true), T0 + 44_999, big),
            Answer::Stored(PushDecision::Foreground)
        );
        // 20 pushes in a burst (two spent above), then the bucket is empty.
        let t = T0 + 45_000;
        let mut sent = 0;
        for seq in 10..40 {
            if let Answer::Stored(PushDecision::Send(_)) =
                m.apply(&n, "b", &put(Dir::P2c, seq, b"x", true), t, big)
            {
                sent += 1;
            }
        }
        assert!((18..=20).contains(&sent), "{sent}");
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 50, b"x", true), t, big),
            Answer::Stored(PushDecision::Throttled)
        );
        // A dead token is forgotten only if the registration is still the one used.
        m.apply(
            &n,
            "b",
            &Op::Forget {
                dir: Dir::P2c,
                sealed: Bytes::from_static(b"old"),
            },
            t,
            big,
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 51, b"x", true), t + 2_000, big),
            Answer::Stored(PushDecision::Send(sealed.clone()))
        );
        m.apply(
            &n,
            "b",
            &Op::Forget {
                dir: Dir::P2c,
                sealed,
            },
            t,
            big,
        );
        assert_eq!(
            m.apply(&n, "b", &put(Dir::P2c, 52, b"x", true), t + 4_000, big),
            Answer::Stored(PushDecision::Unregistered)
        );
    }

    #[test]
    fn every_bucket_answers_429_with_the_wait() {
        let m = One::default();
        let n = Name::of("chat", "abcdefghijklmnop");
        m.apply(&n, "b", &Op::Claim, T0, LIMITS);
        for _ in 0..6 {
            assert_eq!(m.apply(&n, "b", &Op::Ice, T0, LIMITS), Answer::Done);
        }
        assert_eq!(
            m.apply(&n, "b", &Op::Ice, T0, LIMITS),
            Answer::RateLimited(30)
        );
        for _ in 0..20 {
            assert!(matches!(
                m.apply(&n, "b", &Op::Socket, T0, LIMITS),
                Answer::Opened(_)
            ));
        }
        assert_eq!(
            m.apply(&n, "b", &Op::Socket, T0, LIMITS),
            Answer::RateLimited(5)
        );
        assert!(matches!(
            m.apply(&n, "b", &Op::Socket, T0 + 5_000, LIMITS),
            Answer::Opened(_)
        ));
    }

    #[test]
    fn mailbox_events_round_trip_their_text() {
        for (ev, text) in [
            (
                MailboxEvent::Stored {
                    dir: Dir::C2p,
                    seq: 7,
                    generation: 1_790_000_000_000,
                },
                "seq c2p 7 @1790000000000",
            ),
            (
                MailboxEvent::Stored {
                    dir: Dir::P2c,
                    seq: u64::MAX,
                    generation: 0,
                },
                "seq p2c 18446744073709551615 @0",
            ),
            (MailboxEvent::Erased { generation: 5 }, "erase @5"),
        ] {
            assert_eq!(ev.encode(), text);
            assert_eq!(MailboxEvent::decode(text.as_bytes()), Some(ev));
        }
        for bad in [
            &b"seq 7 @1"[..],
            b"seq x2y 7 @1",
            b"seq p2c @1",
            b"seq p2c -1 @1",
            b"seq p2c 7 8 @1",
            b"seq p2c +7 @1",
            b"seq p2c 07 @1",
            b"seq p2c 7",
            b"seq p2c 7 @",
            b"seq p2c 7 @01",
            b"seq p2c 7 @-1",
            b"erase",
            b"erased @1",
            b"\xff",
            b"",
        ] {
            assert_eq!(MailboxEvent::decode(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_event_text_panics_and_every_event_reads_back(
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            seq in proptest::prelude::any::<u64>(),
        ) {
            if let Some(ev) = MailboxEvent::decode(&b) {
                proptest::prop_assert_eq!(ev.encode().into_bytes(), b.clone());
            }
            let ev = MailboxEvent::Stored { dir: Dir::P2c, seq, generation: seq / 2 };
            proptest::prop_assert_eq!(MailboxEvent::decode(ev.encode().as_bytes()), Some(ev));
        }
    }

    #[test]
    fn names_hide_the_id() {
        let n = Name::of("chat", "abcdefghijklmnop");
        assert_eq!(n.as_str().len(), 32);
        assert!(!n.as_str().contains("abcdefghijklmnop"));
        assert_ne!(n, Name::of("chat2", "abcdefghijklmnop"));
        assert_ne!(n, Name::of("cha", "t/abcdefghijklmnop"));
    }
}
