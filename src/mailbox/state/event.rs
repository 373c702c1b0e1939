//! What a mailbox's live sockets hear of a request.

use super::kinds::Dir;
use super::ops::{Answer, Op};

/// What a mailbox's live sockets hear on its channel (the store's `event_channel`). The text is the
/// one `mailbox.lua` publishes; this is the only place in Rust that writes or reads it.
/// Every event names the claim's generation, so a socket opened under one claim never acts
/// on another's events (a mailbox that expired and was claimed again), whatever pub/sub
/// lost or delivered late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailboxEvent {
    /// An envelope was stored: `seq <dir> <n> @<generation>`.
    Stored {
        /// Its direction.
        dir: Dir,
        /// Its sequence number.
        seq: u64,
        /// The claim's generation.
        generation: u64,
    },
    /// The mailbox was erased: `erase @<generation>`.
    Erased {
        /// The claim's generation.
        generation: u64,
    },
}

impl MailboxEvent {
    /// The event a request's answer makes, if any: a new envelope, or an erasure, of the
    /// claim of `generation`.
    pub fn of(op: &Op, answer: &Answer, generation: u64) -> Option<Self> {
        match (op, answer) {
            (Op::Put { dir, seq, .. }, Answer::Stored(_)) => Some(MailboxEvent::Stored {
                dir: *dir,
                seq: *seq,
                generation,
            }),
            (Op::Erase, Answer::Done) => Some(MailboxEvent::Erased { generation }),
            _ => None,
        }
    }

    /// The claim the event belongs to.
    pub fn generation(&self) -> u64 {
        match self {
            MailboxEvent::Stored { generation, .. } | MailboxEvent::Erased { generation } => {
                *generation
            }
        }
    }

    /// The published text.
    pub fn encode(&self) -> String {
        match self {
            MailboxEvent::Stored {
                dir,
                seq,
                generation,
            } => format!("seq {} {seq} @{generation}", dir.as_str()),
            MailboxEvent::Erased { generation } => format!("erase @{generation}"),
        }
    }

    /// Inverse of [`MailboxEvent::encode`]; `None` for anything else.
    pub fn decode(message: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(message).ok()?;
        let (body, generation) = text.rsplit_once(" @")?;
        let generation: u64 = generation.parse().ok()?;
        let ev = if body == "erase" {
            MailboxEvent::Erased { generation }
        } else {
            let mut parts = body.strip_prefix("seq ")?.split(' ');
            let dir = Dir::parse(parts.next()?)?;
            let seq = parts.next()?.parse().ok()?;
            if parts.next().is_some() {
                return None;
            }
            MailboxEvent::Stored {
                dir,
                seq,
                generation,
            }
        };
        // Only the text `mailbox.lua` writes: no `+7` or `07`.
        (ev.encode() == text).then_some(ev)
    }
}
