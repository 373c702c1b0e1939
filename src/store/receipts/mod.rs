//! Receipts of signed pushes as the store keeps them: in process ([`MemoryReceipts`] under a
//! lock, [`InProcessReceipts`] publishing on the in-process fan-out) or in Redis
//! ([`RedisReceipts`]), behind one [`ReceiptBackend`], with [`ReceiptStore`] what the
//! relay uses. The rules every change follows are the signed front-end's
//! ([`crate::signed::receipt::lifecycle`]); the in-process backend runs them under its lock,
//! and `receipt_begin.lua` / `receipt_update.lua` mirror them.
//!
//! Both backends publish a change's new events on the push's channel ([`events_channel`])
//! from inside the change itself: the in-process backend under its lock's result, the Redis
//! one from `receipt_update.lua`, so a subscriber sees the same messages on either.

mod backend;
pub mod memory;
mod redis;

pub use backend::{events_channel, ReceiptBackend};
pub use memory::InProcessReceipts;
pub use redis::RedisReceipts;

use super::concern::Concern;
use super::error::{StoreOp, StoreResult};
use super::fanout::Channel;
use crate::signed::receipt::lifecycle::{Begun, Changes, NewReceipt, Receipt, Updated};

/// The signed-push API's receipts. They need the shared store for their guarantees (a
/// replay must never send twice), so they never fall back to a replica's memory: while
/// degraded they fail, and the API answers 503. Without Redis (one replica) they live in
/// process.
pub type ReceiptStore = Concern<dyn ReceiptBackend>;

impl ReceiptStore {
    /// The channel a push's receipt events are published on.
    pub fn events_channel(&self, push_id: &str) -> Channel {
        events_channel(self.prefix(), push_id)
    }

    /// Creates a push's receipt with its claim holding the lease, or finds the one its id
    /// has (see [`lifecycle::begin`]).
    pub async fn begin(&self, new: &NewReceipt<'_>, now_ms: i64) -> StoreResult<Begun> {
        self.call(StoreOp::ReceiptBegin, |b| b.begin(new, now_ms))
            .await
    }

    /// Applies target changes under their guard (see [`lifecycle::apply`]) and publishes
    /// the new events to every replica.
    pub async fn update(&self, changes: &Changes<'_>, now_ms: i64) -> StoreResult<Updated> {
        self.call(StoreOp::ReceiptUpdate, |b| b.update(changes, now_ms))
            .await
    }

    /// A push's receipt, while kept.
    pub async fn get(&self, push_id: &str, now_ms: i64) -> StoreResult<Option<Receipt>> {
        self.call(StoreOp::ReceiptGet, |b| b.get(push_id, now_ms))
            .await
    }

    /// The sealed request kept beside a push's lease, for a taker (one GET).
    pub async fn kept(&self, push_id: &str, now_ms: i64) -> StoreResult<Option<Vec<u8>>> {
        self.call(StoreOp::ReceiptKept, |b| b.kept(push_id, now_ms))
            .await
    }

    /// Forgets in-process receipts past their TTL (called periodically).
    pub fn sweep(&self, now_ms: i64) {
        self.backend().sweep(now_ms);
    }
}
