//! What a retry queue backend does ([`QueueBackend`]): the fenced queue both the in-process
//! queue and the Redis one keep, with the same answers (the differential tests hold them to
//! it), and the numbers they report ([`Claims`], [`Depth`]).

use super::item::{Claimed, Fenced, Pending};
use crate::store::error::StoreResult;

/// What a claim found.
#[derive(Debug, Default)]
pub struct Claims {
    /// Items claimed and opened.
    pub items: Vec<Claimed>,
    /// Items that could not be opened (moved aside).
    pub unopenable: u64,
    /// Of those, the ones that settle something, with what they settle.
    pub set_aside: Vec<Unopened>,
}

/// An item moved aside unopened (sealed under another key) whose front-end asked to hear
/// how it ends. What it settles is kept in the clear beside the sealed item (the push id
/// and the target's key, 16 hex of the token's hash: no token, no ciphertext), so the
/// front-end still hears of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unopened {
    /// The item's [`Pending::settles`].
    pub settles: (String, String),
    /// When the item's staleness window closes, ms.
    pub expires_ms: i64,
}

impl Unopened {
    /// The clear reference stored beside `item` (`""` when it settles nothing): JSON
    /// `[expires_ms, push id, target key]`.
    pub fn reference_of(item: &Pending) -> String {
        item.settles
            .as_ref()
            .map_or_else(String::new, |(push, target)| {
                serde_json::to_string(&(item.expires_ms(), push, target))
                    .expect("plain tuple serializes")
            })
    }

    /// Inverse of [`Unopened::reference_of`]; `None` for `""` or anything else.
    pub fn parse(stored: &str) -> Option<Self> {
        let (expires_ms, push, target): (i64, String, String) =
            serde_json::from_str(stored).ok()?;
        Some(Self {
            settles: (push, target),
            expires_ms,
        })
    }
}

/// A queue's numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Items waiting.
    pub depth: usize,
    /// Acceptance of the oldest waiting item, ms.
    pub oldest_accepted_ms: Option<i64>,
    /// Items set aside because they could not be opened.
    pub aside: usize,
}

/// A fenced retry queue: every claim hands out a fresh fencing token, and only the claimer
/// holding the current one may reschedule or remove the item.
#[async_trait::async_trait]
pub trait QueueBackend: Send + Sync + std::fmt::Debug {
    /// Adds an item (`fence` 0) or reschedules it as the claimer holding `fence`, due at
    /// `due_ms`; [`crate::store::StoreError::Full`] when there is no room.
    async fn put(
        &self,
        item: &Pending,
        due_ms: i64,
        fence: u64,
        now_ms: i64,
    ) -> StoreResult<Fenced>;

    /// Adds an item unless the queue holds it or removed it within its staleness window
    /// (`Stale`, nothing written): the hand-over of a copy kept in process after a put
    /// whose reply was lost, which may have run (and its item been delivered since).
    async fn put_new(&self, item: &Pending, due_ms: i64, now_ms: i64) -> StoreResult<Fenced>;

    /// Claims up to `max` items due at `now_ms` until `lease_until_ms`, each with a fresh
    /// fencing token; items that cannot be opened are moved aside and counted.
    async fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> StoreResult<Claims>;

    /// Removes an item as the claimer holding `fence` (0: unconditionally).
    async fn ack(&self, id: &str, fence: u64) -> StoreResult<Fenced>;

    /// Depth, oldest acceptance and items set aside.
    async fn stats(&self) -> StoreResult<Depth>;
}
