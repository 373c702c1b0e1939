//! What a policy backend does ([`PolicyBackend`]): the per-device operations both the
//! in-process store and the Redis one run atomically per device, with the same answers
//! ([`Admission`] for an admission).

use crate::device::{DeviceToken, Environment};
use crate::policy::{DeadReason, Decision, Ticket};
use crate::store::error::StoreError;

/// The answer to an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// What the policy decided.
    pub decision: Decision,
    /// The environment the device last worked on, if remembered.
    pub env: Option<Environment>,
}
/// Where per-device policy state lives: in process or in Redis.
#[async_trait::async_trait]
pub trait PolicyBackend: Send + Sync + std::fmt::Debug {
    /// Decides one envelope for `device` at `now_ms` and records the forward, if any.
    async fn admit(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        now_ms: i64,
    ) -> Result<Admission, StoreError>;

    /// Undoes the forward `ticket` recorded (and any hold on the alert).
    async fn rollback(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        ticket: &Ticket,
        now_ms: i64,
    ) -> Result<(), StoreError>;

    /// Remembers the environment a device worked on.
    async fn remember_env(
        &self,
        device: &DeviceToken,
        env: Environment,
        now_ms: i64,
    ) -> Result<(), StoreError>;

    /// Holds an alert until `until_ms` while its forward waits in the retry queue; `until_ms`
    /// 0 ends the hold (the queued forward was delivered).
    async fn hold(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError>;

    /// Remembers that the push service rejected this token for good, for `ttl_ms`.
    async fn bury(
        &self,
        device: &DeviceToken,
        reason: DeadReason,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<(), StoreError>;
}
