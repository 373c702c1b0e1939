//! The policy's state, per device ([`PolicyStore`]): one [`PolicyBackend`], implemented in
//! process ([`MemoryStore`], `memory.rs`) and in Redis ([`RedisStore`], `redis.rs`, one Lua
//! script per operation) side by side, running the same policy ([`crate::policy`])
//! atomically per device.
//!
//! [`PolicyStore::admit`] before the APNs call, [`PolicyStore::rollback`] if APNs refuses the
//! forward, [`PolicyStore::remember_env`] when a device turns out to live on the other
//! environment, [`PolicyStore::hold`]/[`PolicyStore::release`] around a queued forward,
//! [`PolicyStore::bury`] for a dead token, [`PolicyStore::client_take`] for a busy client's shared
//! bucket.
//!
//! Policy state degrades: with `RELAY_REDIS_FAILURE=degrade` a Redis error or timeout
//! switches the replica to its in-process store at once (see [`Link::degrade`]), and every
//! operation runs there until Redis answers again; with `reject` the error is returned.
//! Round trips: one per admission on the happy path; the others only on their events.

mod backend;
mod memory;
mod redis;

pub use backend::{Admission, PolicyBackend};
pub use memory::MemoryStore;
pub use redis::admit_lua;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::device::{DeviceToken, Environment};
use crate::policy::{DeadReason, Policy, Ticket};
use crate::store::connection::RedisStore;
use crate::store::error::{StoreError, StoreOp};
use crate::store::link::{Link, RedisFailure};

/// One call's future, as a [`PolicyBackend`] returns it.
type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Per-device policy state: in process, and in Redis when configured.
#[derive(Debug)]
pub struct PolicyStore {
    memory: MemoryStore,
    redis: Option<(RedisStore, Arc<Link>)>,
}

impl PolicyStore {
    /// In process only.
    pub(crate) fn memory(policy: Policy) -> Self {
        Self {
            memory: MemoryStore::new(policy),
            redis: None,
        }
    }

    /// In Redis, with the in-process store as the fallback.
    pub(crate) fn redis(store: RedisStore, link: Arc<Link>, policy: Policy) -> Self {
        Self {
            memory: MemoryStore::new(policy),
            redis: Some((store, link)),
        }
    }

    /// The in-process store (the only one without Redis, the fallback with it).
    pub fn in_process(&self) -> &MemoryStore {
        &self.memory
    }

    /// Whether Redis has connected at least once; `None` in process.
    pub(crate) fn redis_ready(&self) -> Option<bool> {
        self.redis.as_ref().map(|(r, _)| r.ready())
    }

    /// Runs one operation on Redis, or in process when there is no Redis or this replica is
    /// degraded; a Redis failure degrades (or is returned, in reject mode). With `shared`,
    /// for a front-end whose guarantees need the shared store, never in process while Redis
    /// is configured: degraded, the answer is [`StoreError::Degraded`]; a Redis failure
    /// still degrades the replica (in degrade mode) but is returned.
    async fn run<'a, T>(
        &'a self,
        op: StoreOp,
        shared: bool,
        call: impl Fn(&'a dyn PolicyBackend) -> Call<'a, T>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let Some((redis, link)) = &self.redis else {
            let r = call(&self.memory).await;
            op.record(started, r.is_ok());
            return r;
        };
        if link.degraded() {
            if shared {
                return Err(StoreError::Degraded);
            }
            return call(&self.memory).await;
        }
        match call(redis).await {
            Ok(r) => {
                op.record(started, true);
                Ok(r)
            }
            Err(e) => {
                op.record(started, false);
                match link.on_failure() {
                    RedisFailure::Reject => Err(e),
                    RedisFailure::Degrade if shared => {
                        link.degrade(&e);
                        Err(e)
                    }
                    RedisFailure::Degrade => {
                        link.degrade(&e);
                        call(&self.memory).await
                    }
                }
            }
        }
    }

    /// Decides one envelope for `device` at `now_ms` and records the forward, if any.
    pub async fn admit(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        now_ms: i64,
    ) -> Result<Admission, StoreError> {
        self.admit_in(false, device, collapse_id, flap_key, now_ms)
            .await
    }

    /// [`PolicyStore::admit`], or with `shared` for a front-end whose guarantees need the
    /// shared store (signed pushes): never decided in this replica's memory while Redis is
    /// configured, so a degraded replica or a failing Redis is an error, never a
    /// per-replica decision.
    pub async fn admit_in(
        &self,
        shared: bool,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        now_ms: i64,
    ) -> Result<Admission, StoreError> {
        self.run(StoreOp::Admit, shared, |b| {
            b.admit(device, collapse_id, flap_key, now_ms)
        })
        .await
    }

    /// Undoes the forward `ticket` recorded (and any hold on the alert).
    pub async fn rollback(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        ticket: &Ticket,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(StoreOp::Rollback, false, |b| {
            b.rollback(device, collapse_id, flap_key, ticket, now_ms)
        })
        .await
    }

    /// Remembers the environment a device worked on.
    pub async fn remember_env(
        &self,
        device: &DeviceToken,
        env: Environment,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(StoreOp::RememberEnv, false, |b| {
            b.remember_env(device, env, now_ms)
        })
        .await
    }

    /// Holds an alert while its forward waits in the retry queue.
    pub async fn hold(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(StoreOp::Hold, false, |b| {
            b.hold(device, collapse_id, until_ms, now_ms)
        })
        .await
    }

    /// Ends a hold: the queued forward was delivered.
    pub async fn release(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(StoreOp::Release, false, |b| {
            b.hold(device, collapse_id, 0, now_ms)
        })
        .await
    }

    /// Remembers that the push service rejected this token for good, for `ttl_ms`.
    pub async fn bury(
        &self,
        device: &DeviceToken,
        reason: DeadReason,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(StoreOp::Bury, false, |b| {
            b.bury(device, reason, now_ms, ttl_ms)
        })
        .await
    }

    /// The shared bucket of a busy client block (see `crate::v1::clients`):
    /// `Some(retry_after_s)` when it is empty. Without Redis, while degraded, or when Redis
    /// fails, the replica's own bucket alone decides (this check never degrades the store or
    /// fails a request).
    pub async fn client_take(
        &self,
        block: &str,
        now_ms: i64,
        capacity: i64,
        emission_us: i64,
    ) -> Option<u64> {
        let (redis, link) = self.redis.as_ref()?;
        if link.degraded() {
            return None;
        }
        let started = Instant::now();
        let r = redis
            .client_take(block, now_ms, capacity, emission_us)
            .await;
        StoreOp::Client.record(started, r.is_ok());
        r.ok().flatten()
    }
}
