//! What names a mailbox and its parts: directions, signal sides, buckets and their rates,
//! the store's name of a mailbox, and the limits every mailbox has.

/// A direction of a mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Primary to companion.
    P2c,
    /// Companion to primary.
    C2p,
}

impl Dir {
    /// The path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::P2c => "p2c",
            Dir::C2p => "c2p",
        }
    }

    /// From the path segment.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "p2c" => Some(Dir::P2c),
            "c2p" => Some(Dir::C2p),
            _ => None,
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Dir::P2c => 0,
            Dir::C2p => 1,
        }
    }
}

/// A side of a mailbox's signal rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The primary device.
    Primary,
    /// The companion device.
    Companion,
}

impl Side {
    /// The path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Primary => "primary",
            Side::Companion => "companion",
        }
    }

    /// From the path segment.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "primary" => Some(Side::Primary),
            "companion" => Some(Side::Companion),
            _ => None,
        }
    }

    /// Its place in per-side arrays.
    pub fn index(self) -> usize {
        match self {
            Side::Primary => 0,
            Side::Companion => 1,
        }
    }

    /// The other side.
    pub fn other(self) -> Self {
        match self {
            Side::Primary => Side::Companion,
            Side::Companion => Side::Primary,
        }
    }
}

/// The buckets of the spec's rate-limit table, per mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// Envelopes stored: 120, 2 per second.
    Envelopes,
    /// Fetches, HEADs, prunes (and claims and erasures): 240, 4 per second.
    Reads,
    /// WebSocket connections, watch and signal: 20, 1 per 5 seconds.
    Sockets,
    /// Signal frames of one side: 400, 50 per second.
    Frames(Side),
    /// Pushes sent on one direction: 20, 1 per 2 seconds.
    Pushes(Dir),
    /// Push registrations: 10, 1 per minute.
    Registrations,
    /// ICE credentials: 6, 1 per 30 seconds.
    Ice,
}

impl Bucket {
    /// Burst and the microseconds one token takes to come back.
    pub fn rate(self) -> (i64, i64) {
        match self {
            Bucket::Envelopes => (120, 500_000),
            Bucket::Reads => (240, 250_000),
            Bucket::Sockets => (20, 5_000_000),
            Bucket::Frames(_) => (400, 20_000),
            Bucket::Pushes(_) => (20, 2_000_000),
            Bucket::Registrations => (10, 60_000_000),
            Bucket::Ice => (6, 30_000_000),
        }
    }

    /// The field it is kept in, and its metric label.
    pub fn field(self) -> &'static str {
        match self {
            Bucket::Envelopes => "t:env",
            Bucket::Reads => "t:read",
            Bucket::Sockets => "t:ws",
            Bucket::Frames(Side::Primary) => "t:sig:primary",
            Bucket::Frames(Side::Companion) => "t:sig:companion",
            Bucket::Pushes(Dir::P2c) => "t:push:p2c",
            Bucket::Pushes(Dir::C2p) => "t:push:c2p",
            Bucket::Registrations => "t:reg",
            Bucket::Ice => "t:ice",
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Bucket::Envelopes => "envelopes",
            Bucket::Reads => "reads",
            Bucket::Sockets => "sockets",
            Bucket::Frames(_) => "signal_frames",
            Bucket::Pushes(_) => "pushes",
            Bucket::Registrations => "registrations",
            Bucket::Ice => "ice",
        }
    }
}

/// Every bucket label, for the series registered at start-up.
pub const BUCKET_LABELS: &[&str] = &[
    "envelopes",
    "reads",
    "sockets",
    "signal_frames",
    "pushes",
    "registrations",
    "ice",
];

/// How long a watch's `ping` marks its direction's reader as in the foreground, ms.
pub const FOREGROUND_MS: i64 = 45_000;

/// The store's name of a mailbox: the first 32 hex of SHA-256 of `<app>/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name(String);

impl Name {
    /// The name of mailbox `id` of `app`.
    pub fn of(app: &str, id: &str) -> Self {
        let d = ring::digest::digest(&ring::digest::SHA256, format!("{app}/{id}").as_bytes());
        Name(crate::device::hex(&d.as_ref()[..16]))
    }

    /// The 32 hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The limits of every mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A mailbox with no write and no claim for this long is gone, ms.
    pub idle_ms: i64,
    /// Envelopes one direction holds at most.
    pub max_envelopes: usize,
}

/// The most envelopes one prune call removes: a prune of a whole direction (up to
/// 100,000 envelopes) is as many short script calls, none of which holds Redis long.
pub const PRUNE_BATCH: usize = 1000;

/// The most stored bytes one list answer carries.
pub const LIST_MAX_BYTES: usize = 1 << 20;
