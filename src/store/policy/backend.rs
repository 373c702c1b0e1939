//! What a policy backend does ([`PolicyBackend`]): the per-device operations both the
//! in-process store and the Redis one run atomically per device, with the same answers
//! ([`Admission`] for an admission).

use crate::device::{DeviceToken, Environment};
use crate::policy::{DeadReason, Decision, Ticket};
use crate::store::error::StoreResult;

/// The answer to an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// What the policy decided.
    pub decision: Decision,
    /// The environment the device last worked on, if remembered.
    pub env: Option<Environment>,
}
/// Which alert of which device an admission, or its rollback, is about.
#[derive(Debug, Clone, Copy)]
pub struct AlertKey<'a> {
    /// The device.
    pub device: &'a DeviceToken,
    /// The alert's collapse id.
    pub collapse_id: &'a str,
    /// What flap suppression compares (see [`crate::policy`]).
    pub flap_key: &'a str,
}

impl<'a> AlertKey<'a> {
    /// The key of `device`'s alert `collapse_id`, flap-compared by `flap_key`.
    pub const fn new(device: &'a DeviceToken, collapse_id: &'a str, flap_key: &'a str) -> Self {
        Self {
            device,
            collapse_id,
            flap_key,
        }
    }
}

/// What a forward's outcome marks on a device's state, besides admissions and rollbacks.
#[derive(Debug, Clone, Copy)]
pub enum Mark<'a> {
    /// The environment the device turned out to work on.
    Env(Environment),
    /// Holds an alert until `until_ms` while its forward waits in the retry queue.
    Hold {
        /// The alert's collapse id.
        collapse_id: &'a str,
        /// Until when.
        until_ms: i64,
    },
    /// Ends a hold: the queued forward was delivered.
    Release {
        /// The alert's collapse id.
        collapse_id: &'a str,
    },
    /// The push service rejected the token for good: remembered for `ttl_ms`.
    Dead {
        /// Why.
        reason: DeadReason,
        /// For how long.
        ttl_ms: i64,
    },
}

/// Where per-device policy state lives: in process or in Redis.
#[async_trait::async_trait]
pub trait PolicyBackend: Send + Sync + std::fmt::Debug {
    /// Decides one envelope at `now_ms` and records the forward, if any.
    async fn admit(&self, key: AlertKey<'_>, now_ms: i64) -> StoreResult<Admission>;

    /// Undoes the forward `ticket` recorded (and any hold on the alert).
    async fn rollback(&self, key: AlertKey<'_>, ticket: &Ticket, now_ms: i64) -> StoreResult<()>;

    /// Records a [`Mark`] on the device.
    async fn mark(&self, device: &DeviceToken, mark: Mark<'_>, now_ms: i64) -> StoreResult<()>;
}
