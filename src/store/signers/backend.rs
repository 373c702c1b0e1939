//! What a signers backend does ([`SignerBackend`]), in process or in Redis, and the channel
//! both publish changes on ([`signers_channel`]).

use crate::signed::enrolment::{Enrolled, Enrolment, Signer};
use crate::store::error::StoreResult;
use crate::store::fanout::Channel;

/// The channel signer changes are published on, under the store's key prefix.
pub fn signers_channel(prefix: &str) -> Channel {
    Channel::global(format!("{prefix}signers"))
}

/// Where signers live: in process or in Redis.
#[async_trait::async_trait]
pub trait SignerBackend: Send + Sync + std::fmt::Debug {
    /// One signer.
    async fn get(&self, key_id: &str) -> StoreResult<Option<Signer>>;
    /// Enrols or updates a signer (see [`enroll`]), and tells every replica.
    async fn enroll(&self, e: &Enrolment<'_>, now_ms: i64) -> StoreResult<(Signer, Enrolled)>;
    /// Revokes a signer, and tells every replica; `None` for an unknown key id.
    async fn revoke(&self, key_id: &str, now_ms: i64) -> StoreResult<Option<Signer>>;
    /// Every signer, by key id.
    async fn list(&self) -> StoreResult<Vec<Signer>>;
}
