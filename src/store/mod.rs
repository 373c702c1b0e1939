//! Where policy state lives: in process ([`memory`]) or in Redis ([`redis`]).
//!
//! Both run the same policy (`crate::policy`) atomically per device: the in-memory store
//! under a lock, the Redis store as one Lua script. The relay sees one [`Store`] and makes
//! the same three calls either way: [`Store::admit`] before the APNs call,
//! [`Store::rollback`] if APNs refuses the forward, [`Store::remember_env`] when a device
//! turns out to live on the other APNs environment.

pub mod memory;
pub mod redis;

use std::time::Instant;

use crate::envelope::DeviceToken;
use crate::policy::{Decision, Environment, Ticket};

/// The answer to an admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// What the policy decided.
    pub decision: Decision,
    /// The environment the device last worked on, if remembered.
    pub env: Option<Environment>,
}

/// The store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis answered with an error, or not at all within the timeout.
    #[error("redis: {0}")]
    Redis(String),
}

/// The policy store in use.
#[derive(Debug)]
pub enum Store {
    /// In-process: one replica.
    Memory(memory::MemoryStore),
    /// Redis: shared by every replica.
    Redis(redis::RedisStore),
}

impl Store {
    /// Decides one envelope for `device` at `now_ms` and records the forward, if any.
    pub async fn admit(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        now_ms: i64,
    ) -> Result<Admission, StoreError> {
        let started = Instant::now();
        let result = match self {
            Store::Memory(m) => Ok(m.admit(device, collapse_id, flap_key, now_ms)),
            Store::Redis(r) => r.admit(device, collapse_id, flap_key, now_ms).await,
        };
        crate::telemetry::store_op("admit", started.elapsed(), result.is_ok());
        result
    }

    /// Undoes the forward `ticket` recorded.
    pub async fn rollback(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        ticket: &Ticket,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = match self {
            Store::Memory(m) => {
                m.rollback(device, collapse_id, flap_key, ticket, now_ms);
                Ok(())
            }
            Store::Redis(r) => {
                r.rollback(device, collapse_id, flap_key, ticket, now_ms)
                    .await
            }
        };
        crate::telemetry::store_op("rollback", started.elapsed(), result.is_ok());
        result
    }

    /// Remembers the environment a device worked on.
    pub async fn remember_env(
        &self,
        device: &DeviceToken,
        env: Environment,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = match self {
            Store::Memory(m) => {
                m.remember_env(device, env, now_ms);
                Ok(())
            }
            Store::Redis(r) => r.remember_env(device, env, now_ms).await,
        };
        crate::telemetry::store_op("remember_env", started.elapsed(), result.is_ok());
        result
    }

    /// `memory` or `redis`, for traces and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
        }
    }

    /// Whether the store can serve now.
    pub fn ready(&self) -> bool {
        match self {
            Store::Memory(_) => true,
            Store::Redis(r) => r.ready(),
        }
    }
}
