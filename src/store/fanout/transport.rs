//! What carries a message between replicas ([`Transport`]): Redis pub/sub, or nothing in
//! process.

use bytes::Bytes;

use super::channel::Channel;
use super::memory::Hub;
use crate::store::error::StoreError;

/// How messages cross between replicas: Redis pub/sub ([`redis`]), or
/// nothing at all in process (the [`Hub`] alone delivers). A transport takes the message as
/// it travels ([`frame`]), so a Lua script that publishes from inside its own transaction
/// sends the same bytes.
#[async_trait::async_trait]
pub(crate) trait Transport: Send + Sync + std::fmt::Debug {
    /// Publishes one travelling message to every replica.
    async fn publish(&self, channel: &Channel, message: Bytes) -> Result<(), StoreError>;
    /// Makes sure this replica listens to `channel` (`first`: it had no local subscriber).
    async fn subscribe(&self, channel: &Channel, first: bool) -> Result<(), StoreError>;
    /// Stops listening to channels no local subscriber of `hub` wants any more.
    async fn unsubscribe(&self, idle: &[Channel], hub: &Hub);
}
