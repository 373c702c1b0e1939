//! Enrolled signers as the store keeps them: one record per key id
//! (`crate::signed::enrolment`'s [`Signer`], whose rules the backends run). Every replica caches
//! them (`crate::signed::signers`) and drops an entry when the fan-out says it changed.
//!
//! [`SignerStore`] is what the relay uses: one [`SignerBackend`], in process
//! ([`InProcessSigners`], here) or in Redis ([`RedisSigners`]). Both publish the key
//! id of every enrolment and revocation on the signers' channel ([`signers_channel`]) from
//! inside the change itself: the in-process backend right after its lock, the Redis one from
//! `signer_enroll.lua` and `signer_revoke.lua`.

mod backend;
pub mod memory;
mod redis;

pub use backend::{signers_channel, SignerBackend};
pub use memory::InProcessSigners;
pub use redis::RedisSigners;

use super::concern::Concern;
use super::error::{StoreOp, StoreResult};
use super::fanout::Channel;

use crate::signed::enrolment::{Enrolled, Enrolment, Signer};

/// The signed-push API's signers. Like receipts they need the shared store (a revocation
/// must hold everywhere), so they never fall back to a replica's memory: while degraded
/// they fail, and the API answers 503. Without Redis (one replica) they live in process.
pub type SignerStore = Concern<dyn SignerBackend>;

impl SignerStore {
    /// The channel signer changes are published on.
    pub fn channel(&self) -> Channel {
        signers_channel(self.prefix())
    }

    /// One signer.
    pub async fn get(&self, key_id: &str) -> StoreResult<Option<Signer>> {
        self.call(StoreOp::SignerGet, |b| b.get(key_id)).await
    }

    /// Enrols or updates a signer, and tells every replica.
    pub async fn enroll(&self, e: &Enrolment<'_>, now_ms: i64) -> StoreResult<(Signer, Enrolled)> {
        self.call(StoreOp::SignerEnroll, |b| b.enroll(e, now_ms))
            .await
    }

    /// Revokes a signer, and tells every replica; `None` for an unknown key id.
    pub async fn revoke(&self, key_id: &str, now_ms: i64) -> StoreResult<Option<Signer>> {
        self.call(StoreOp::SignerRevoke, |b| b.revoke(key_id, now_ms))
            .await
    }

    /// Every signer.
    pub async fn list(&self) -> StoreResult<Vec<Signer>> {
        self.call(StoreOp::SignerList, |b| b.list()).await
    }
}
