//! What a receipts backend does ([`ReceiptBackend`]), in process or in Redis, and the
//! channel both publish a push's events on ([`events_channel`]).

use crate::signed::receipt::lifecycle::{Begun, Changes, NewReceipt, Receipt, Updated};
use crate::store::error::StoreResult;
use crate::store::fanout::Channel;

/// The channel a push's receipt events are published on, under the store's key prefix.
pub fn events_channel(prefix: &str, push_id: &str) -> Channel {
    Channel::sharded(format!("{prefix}{{r:{push_id}}}:events"))
}

/// Where receipts live: in process or in Redis.
#[async_trait::async_trait]
pub trait ReceiptBackend: Send + Sync + std::fmt::Debug {
    /// Creates a push's receipt, or finds the one its id has (see
    /// [`lifecycle::begin`]).
    async fn begin(&self, new: &NewReceipt<'_>, now_ms: i64) -> StoreResult<Begun>;

    /// Applies target changes under their guard (see [`lifecycle::apply`]) and publishes
    /// the new events.
    async fn update(&self, changes: &Changes<'_>, now_ms: i64) -> StoreResult<Updated>;

    /// A push's receipt, while kept.
    async fn get(&self, push_id: &str, now_ms: i64) -> StoreResult<Option<Receipt>>;

    /// The sealed request kept beside the push's lease ([`NewReceipt::kept`]), until its
    /// time passes.
    async fn kept(&self, push_id: &str, now_ms: i64) -> StoreResult<Option<Vec<u8>>>;

    /// Forgets receipts past their TTL (the in-process backend; Redis expires keys itself).
    fn sweep(&self, _now_ms: i64) {}
}
