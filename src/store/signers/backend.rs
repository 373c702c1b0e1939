//! What a signers backend does ([`SignerBackend`]), in process or in Redis, and the channel
//! both publish changes on ([`signers_channel`]).

use crate::signed::enrolment::{Enrolled, Signer};
use crate::store::error::StoreError;
use crate::store::fanout::Channel;

/// The channel signer changes are published on, under the store's key prefix.
pub fn signers_channel(prefix: &str) -> Channel {
    Channel::global(format!("{prefix}signers"))
}

/// Where signers live: in process or in Redis.
#[async_trait::async_trait]
pub trait SignerBackend: Send + Sync + std::fmt::Debug {
    /// One signer.
    async fn get(&self, key_id: &str) -> Result<Option<Signer>, StoreError>;
    /// Enrols or updates a signer (see [`enroll`]), and tells every replica.
    async fn enroll(
        &self,
        key_id: &str,
        public_key: &str,
        topics: &[String],
        now_ms: i64,
    ) -> Result<(Signer, Enrolled), StoreError>;
    /// Revokes a signer, and tells every replica; `None` for an unknown key id.
    async fn revoke(&self, key_id: &str, now_ms: i64) -> Result<Option<Signer>, StoreError>;
    /// Every signer, by key id.
    async fn list(&self) -> Result<Vec<Signer>, StoreError>;
}
