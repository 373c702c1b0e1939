//! What a request asks of a mailbox ([`Op`]) and what it answers ([`Answer`]).

use bytes::Bytes;

use super::kinds::{Bucket, Dir, Limits, Name, Side};

/// One request to a mailbox, as the store runs it: the mailbox, the bearer (the SHA-256 hex
/// of its token), what it asks and the limits it is held to.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The mailbox.
    pub name: &'a Name,
    /// The bearer's SHA-256, hex.
    pub bearer: &'a str,
    /// What it asks.
    pub op: &'a Op,
    /// The limits of every mailbox.
    pub limits: Limits,
}

/// What a request does, once its bearer and bucket pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Claim (or heartbeat-claim) the mailbox.
    Claim,
    /// Erase it with everything in it.
    Erase,
    /// Store an envelope; with `notify`, also decide on a push to the direction's reader.
    Put {
        /// The direction.
        dir: Dir,
        /// Its sequence number.
        seq: u64,
        /// The bytes.
        data: Bytes,
        /// Whether the writer asked for a push.
        notify: bool,
    },
    /// Envelopes after `after`, at most `limit`.
    List {
        /// The direction.
        dir: Dir,
        /// Exclusive lower bound.
        after: u64,
        /// At most this many.
        limit: usize,
    },
    /// One envelope.
    Get {
        /// The direction.
        dir: Dir,
        /// Its sequence number.
        seq: u64,
    },
    /// The direction's highest seq and count.
    Head {
        /// The direction.
        dir: Dir,
    },
    /// Removes the envelopes with seq at most `upto`, at most [`PRUNE_BATCH`] of them (the
    /// lowest): [`Answer::More`] when some are left, for [`Op::PruneMore`].
    Prune {
        /// The direction.
        dir: Dir,
        /// Inclusive upper bound.
        upto: u64,
    },
    /// Goes on with a prune that answered [`Answer::More`]: like [`Op::Prune`], without a
    /// bucket token (the prune paid one).
    PruneMore {
        /// The direction.
        dir: Dir,
        /// Inclusive upper bound.
        upto: u64,
    },
    /// Stores the direction's sealed push registration.
    Register {
        /// The direction.
        dir: Dir,
        /// The sealed registration.
        sealed: Bytes,
    },
    /// Removes the direction's push registration.
    Unregister {
        /// The direction.
        dir: Dir,
    },
    /// Removes the registration only if it is still `sealed` (the push service said the
    /// token is dead; a newer registration stays). Takes no bucket token.
    Forget {
        /// The direction.
        dir: Dir,
        /// The registration the push used.
        sealed: Bytes,
    },
    /// A watch socket opens: the answer is the claim's generation ([`Answer::Opened`]).
    Socket,
    /// A socket checks that the claim it opened under is still there: the claim's
    /// generation ([`Answer::Opened`]), or not found / forbidden. Takes no token and does
    /// not restart the idle timer.
    Check,
    /// A watch closes: its direction's reader is no longer in the foreground. Takes no
    /// token.
    Unping {
        /// The direction.
        dir: Dir,
    },
    /// A signal socket of `side` opens: like [`Op::Socket`], and it becomes the side's
    /// newest socket: the side's socket number goes up by one and the answer carries it
    /// ([`Answer::SignalOpened`]). A socket with a lower number is replaced, whichever
    /// replica holds it and whatever its clock says.
    SignalOpen {
        /// The side.
        side: Side,
    },
    /// A signal socket that has relayed `relayed` frames since it opened spends those not
    /// yet charged from its side's frame bucket (one token each, as many as the bucket
    /// holds) and asks whether it is still the side's newest socket and its claim still
    /// there. The store keeps what it charged the side's two latest spending sockets, so a
    /// spend sent again after a lost reply charges nothing twice. Takes no other token and
    /// does not restart the idle timer. The answer: rate limited (some frames did not fit),
    /// [`Answer::Replaced`] (a newer socket of the side opened), else the claim's
    /// generation ([`Answer::Opened`]). With nothing new relayed it is the socket's check.
    SignalSpend {
        /// The side.
        side: Side,
        /// The socket's number, from [`Answer::SignalOpened`].
        socket: u64,
        /// Frames the socket relayed since it opened.
        relayed: u64,
    },
    /// A watch's `ping`: the direction's reader is in the foreground. Takes no bucket
    /// token (the socket's own rate bounds it).
    Ping {
        /// The direction.
        dir: Dir,
    },
    /// ICE credentials are handed out.
    Ice,
}

impl Op {
    /// The bucket the request takes a token from, if any.
    pub fn bucket(&self) -> Option<Bucket> {
        match self {
            Op::Put { .. } => Some(Bucket::Envelopes),
            Op::Claim
            | Op::Erase
            | Op::List { .. }
            | Op::Get { .. }
            | Op::Head { .. }
            | Op::Prune { .. } => Some(Bucket::Reads),
            Op::Register { .. } | Op::Unregister { .. } => Some(Bucket::Registrations),
            Op::Socket | Op::SignalOpen { .. } => Some(Bucket::Sockets),
            Op::Ice => Some(Bucket::Ice),
            Op::Forget { .. }
            | Op::Ping { .. }
            | Op::Unping { .. }
            | Op::Check
            | Op::PruneMore { .. }
            | Op::SignalSpend { .. } => None,
        }
    }
}

/// What became of a push the writer asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushDecision {
    /// None was asked, or the envelope was not new.
    NotAsked,
    /// The reader is in the foreground.
    Foreground,
    /// The direction's push bucket is empty.
    Throttled,
    /// No registration.
    Unregistered,
    /// Send: the sealed registration.
    Send(Bytes),
}

impl PushDecision {
    /// The metric label of a push not sent.
    pub fn label(&self) -> &'static str {
        match self {
            PushDecision::NotAsked => "not_asked",
            PushDecision::Foreground => "foreground",
            PushDecision::Throttled => "rate_limited",
            PushDecision::Unregistered => "no_registration",
            PushDecision::Send(_) => "send",
        }
    }
}

/// One stored envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Its sequence number.
    pub seq: u64,
    /// The bytes.
    pub data: Bytes,
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No such mailbox (never claimed, erased, or idle too long).
    NotFound,
    /// Another bearer holds it.
    Forbidden,
    /// The bucket is empty: whole seconds until a token is back.
    RateLimited(u64),
    /// A claim made the mailbox.
    Created,
    /// A claim by its bearer (the idle timer restarted).
    Claimed,
    /// Stored (201), and what became of the push asked for.
    Stored(PushDecision),
    /// The same bytes were already at that seq (204; nothing changed).
    Same,
    /// Other bytes are at that seq (409).
    Conflict,
    /// The direction is full (507).
    Full,
    /// A list: the envelopes, the highest seq stored (0 if none), whether it was cut.
    Listed {
        /// Ascending.
        envelopes: Vec<Envelope>,
        /// The highest seq stored.
        last: u64,
        /// Whether more follow.
        more: bool,
    },
    /// One envelope's bytes, or `None` when absent.
    Got(Option<Bytes>),
    /// The direction's highest seq (0 if none) and count.
    Head {
        /// The highest seq stored.
        last: u64,
        /// How many are stored.
        count: u64,
    },
    /// Done (erase, prune, register, unregister, forget, ping, unping, ICE, signal close).
    Done,
    /// A watch opened, or a check found the claim: the claim's generation.
    Opened(u64),
    /// A prune removed a batch and more envelopes at or below its bound are left.
    More,
    /// A signal socket opened: its number among its side's sockets and the claim's
    /// generation.
    SignalOpened {
        /// The side's socket number: one more than the socket before.
        socket: u64,
        /// The claim's generation.
        generation: u64,
    },
    /// A newer socket of the side opened: this one is replaced.
    Replaced,
}
