//! What a receipts backend does ([`ReceiptBackend`]), in process or in Redis, and the
//! channel both publish a push's events on ([`events_channel`]).

use crate::signed::receipt::lifecycle::{
    Begun, Claim, Guard, NewReceipt, Receipt, Update, Updated,
};
use crate::store::error::StoreError;
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
    async fn begin(
        &self,
        new: &NewReceipt<'_>,
        claim: &Claim<'_>,
        now_ms: i64,
    ) -> Result<Begun, StoreError>;

    /// Applies target changes under `guard` (see [`lifecycle::apply`]) and publishes the new events.
    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError>;

    /// A push's receipt, while kept.
    async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError>;

    /// Forgets receipts past their TTL (the in-process backend; Redis expires keys itself).
    fn sweep(&self, _now_ms: i64) {}
}
