//! Mailboxes as the store keeps them: in process ([`MemoryMailboxes`] under a lock,
//! [`InProcessMailboxes`] publishing on the in-process fan-out) or in Redis
//! ([`RedisMailboxes`]), behind one [`MailboxBackend`], with [`MailboxStore`] what the
//! front-end uses. The rules every request follows are the mailbox front-end's
//! ([`crate::mailbox::state`]); the in-process backend runs them under its lock, and
//! `mailbox.lua` mirrors them. Both publish what live sockets must hear ([`MailboxEvent`]) on
//! the mailbox's channel ([`event_channel`]) from inside the request itself: the in-process
//! backend right after its lock, the Redis one from `mailbox.lua`, in the same bytes.

mod backend;
pub mod memory;
mod redis;

pub use backend::{event_channel, receive_event, signal_channel, MailboxBackend};
pub use memory::InProcessMailboxes;
pub use redis::{mailbox_lua, RedisMailboxes};

use super::concern::Concern;
use super::error::{StoreError, StoreOp};
use super::fanout::Channel;
use crate::mailbox::state::{Answer, Name, Request};

/// Mailboxes as the front-end uses them (MAILBOX.md). Like receipts, they need the shared
/// store (every limit is cluster-wide and any replica serves any request), so while
/// degraded they fail and the front-end answers 503. Without Redis (one replica) they live
/// in process.
pub type MailboxStore = Concern<dyn MailboxBackend>;

impl MailboxStore {
    /// The channel a mailbox's live sockets listen on: its [`MailboxEvent`]s.
    pub fn channel(&self, name: &Name) -> Channel {
        event_channel(self.prefix(), name)
    }

    /// The channel of a mailbox's signal rendezvous (presence, replacement, frames).
    pub fn signal_channel(&self, name: &Name) -> Channel {
        signal_channel(self.prefix(), name)
    }

    /// One mailbox request (see [`Request`]). One
    /// round trip on Redis; what live sockets must hear is published by the same script
    /// (in process: by the same call).
    pub async fn apply(&self, req: &Request<'_>, now_ms: i64) -> Result<Answer, StoreError> {
        self.call(StoreOp::Mailbox, |b| b.apply(req, now_ms)).await
    }

    /// Forgets in-process mailboxes idle past their time (called periodically).
    pub fn sweep(&self, now_ms: i64) {
        self.backend().sweep(now_ms);
    }
}
