//! The policy's state, per device ([`PolicyStore`]): one [`PolicyBackend`], implemented in
//! process ([`MemoryStore`], `memory.rs`) and in Redis ([`RedisStore`], `redis.rs`, one Lua
//! script per operation) side by side, running the same policy ([`crate::policy`])
//! atomically per device.
//!
//! [`PolicyStore::admit`] before the push service's call, [`PolicyStore::rollback`] if the
//! service refuses the forward, [`PolicyStore::mark`] when a device turns out to live on the
//! other environment, around a queued forward (a hold and its release) and for a dead token,
//! [`PolicyStore::client_take`] for a busy client's shared bucket.
//!
//! Policy state degrades: with `RELAY_REDIS_FAILURE=degrade` a Redis error or timeout
//! switches the replica to its in-process store at once (see [`Link::degrade`]), and every
//! operation runs there until Redis answers again; with `reject` the error is returned.
//! Round trips: one per admission on the happy path; the others only on their events.

mod backend;
mod memory;
mod redis;

pub use backend::{Admission, AlertKey, Mark, PolicyBackend};
pub use memory::MemoryStore;
pub use redis::admit_lua;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::device::DeviceToken;
use crate::policy::{Bucket, Policy, Ticket};
use crate::store::connection::RedisStore;
use crate::store::error::{StoreError, StoreOp, StoreResult};
use crate::store::link::{Link, RedisFailure};

/// One call's future, as a [`PolicyBackend`] returns it.
type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Per-device policy state: in process, and in Redis when configured.
#[derive(Debug)]
pub struct PolicyStore {
    /// In process: the only store without Redis, the fallback with it; one for every core
    /// of a `RELAY_RUNTIME=per-core` process ([`PolicyStore::sharing_memory`]).
    memory: Arc<MemoryStore>,
    redis: Option<(RedisStore, Arc<Link>)>,
}

impl PolicyStore {
    /// In process only.
    pub(crate) fn memory(policy: Policy) -> Self {
        Self {
            memory: Arc::new(MemoryStore::new(policy)),
            redis: None,
        }
    }

    /// In Redis, with the in-process store as the fallback.
    pub(crate) fn redis(store: RedisStore, link: Arc<Link>, policy: Policy) -> Self {
        Self {
            memory: Arc::new(MemoryStore::new(policy)),
            redis: Some((store, link)),
        }
    }

    /// This store with `memory` as its in-process store: another core's, so the cores of one
    /// process decide on one in-process state while degraded, as one replica does.
    pub(crate) fn sharing_memory(mut self, memory: Arc<MemoryStore>) -> Self {
        self.memory = memory;
        self
    }

    /// The in-process store itself, to share with [`PolicyStore::sharing_memory`].
    pub(crate) fn in_process_shared(&self) -> Arc<MemoryStore> {
        self.memory.clone()
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
            let r = call(&*self.memory).await;
            op.record(started, r.is_ok());
            return r;
        };
        if link.degraded() {
            if shared {
                return Err(StoreError::Degraded);
            }
            return call(&*self.memory).await;
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
                        call(&*self.memory).await
                    }
                }
            }
        }
    }

    /// Decides one envelope at `now_ms` and records the forward, if any.
    pub async fn admit(&self, key: AlertKey<'_>, now_ms: i64) -> StoreResult<Admission> {
        self.admit_in(false, key, now_ms).await
    }

    /// [`PolicyStore::admit`], or with `shared` for a front-end whose guarantees need the
    /// shared store (signed pushes): never decided in this replica's memory while Redis is
    /// configured, so a degraded replica or a failing Redis is an error, never a
    /// per-replica decision.
    pub async fn admit_in(
        &self,
        shared: bool,
        key: AlertKey<'_>,
        now_ms: i64,
    ) -> StoreResult<Admission> {
        self.run(StoreOp::Admit, shared, |b| b.admit(key, now_ms))
            .await
    }

    /// Undoes the forward `ticket` recorded (and any hold on the alert).
    pub async fn rollback(
        &self,
        key: AlertKey<'_>,
        ticket: &Ticket,
        now_ms: i64,
    ) -> StoreResult<()> {
        self.run(StoreOp::Rollback, false, |b| {
            b.rollback(key, ticket, now_ms)
        })
        .await
    }

    /// Records a [`Mark`] on the device: the environment it works on, a hold of an alert
    /// whose forward waits in the retry queue or its end, a dead token.
    pub async fn mark(&self, device: &DeviceToken, mark: Mark<'_>, now_ms: i64) -> StoreResult<()> {
        let op = match mark {
            Mark::Env(_) => StoreOp::RememberEnv,
            Mark::Hold { .. } => StoreOp::Hold,
            Mark::Release { .. } => StoreOp::Release,
            Mark::Dead { .. } => StoreOp::Bury,
        };
        self.run(op, false, |b| b.mark(device, mark, now_ms)).await
    }

    /// The shared bucket of a busy client block (see `crate::v1::clients`):
    /// `Some(retry_after_s)` when it is empty. Without Redis, while degraded, or when Redis
    /// fails, the replica's own bucket alone decides (this check never degrades the store or
    /// fails a request).
    pub async fn client_take(&self, block: &str, now_ms: i64, bucket: Bucket) -> Option<u64> {
        let (redis, link) = self.redis.as_ref()?;
        if link.degraded() {
            return None;
        }
        let started = Instant::now();
        let r = redis.client_take(block, now_ms, bucket).await;
        StoreOp::Client.record(started, r.is_ok());
        r.ok().flatten()
    }
}
