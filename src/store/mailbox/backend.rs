//! What a mailboxes backend does ([`MailboxBackend`]), in process or in Redis, the channels
//! a mailbox's sockets listen on, and the decoding of what they hear.

use crate::mailbox::state::{Answer, MailboxEvent, Name, Request};
use crate::store::error::{DecodeKind, StoreError};
use crate::store::fanout::Channel;

/// [`MailboxEvent::decode`] for a message received on a mailbox's channel, where anything
/// else is counted (`sealrelay_store_decode_errors_total{kind="mailbox_event"}`) and skipped.
pub fn receive_event(message: &[u8]) -> Option<MailboxEvent> {
    let ev = MailboxEvent::decode(message);
    if ev.is_none() {
        DecodeKind::MailboxEvent.count();
    }
    ev
}

/// The channel a mailbox's live sockets listen on ([`MailboxEvent`]), under the store's key
/// prefix.
pub fn event_channel(prefix: &str, name: &Name) -> Channel {
    Channel::sharded(format!("{prefix}{{mb:{}}}:ev", name.as_str()))
}

/// The channel of a mailbox's signal rendezvous (presence, replacement, frames), under the
/// store's key prefix.
pub fn signal_channel(prefix: &str, name: &Name) -> Channel {
    Channel::sharded(format!("{prefix}{{mb:{}}}:sig", name.as_str()))
}

/// Where mailboxes live: in process or in Redis.
#[async_trait::async_trait]
pub trait MailboxBackend: Send + Sync + std::fmt::Debug {
    /// One request (see [`Request`]), publishing its
    /// [`MailboxEvent`] if it makes one (best effort, like Redis pub/sub: the answer stands).
    async fn apply(&self, req: &Request<'_>, now_ms: i64) -> Result<Answer, StoreError>;

    /// Forgets mailboxes idle past their time (the in-process backend; Redis expires keys
    /// itself).
    fn sweep(&self, _now_ms: i64) {}
}
