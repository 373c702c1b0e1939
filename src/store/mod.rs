//! Where policy state and the retry queue live: in process ([`memory`]) or in Redis
//! ([`redis`], [`crate::queue::RedisQueue`]).
//!
//! Both stores run the same policy (`crate::policy`) atomically per device: the in-memory
//! store under a lock, the Redis store as one Lua script. The relay sees one [`Store`]:
//! [`Store::admit`] before the APNs call, [`Store::rollback`] if APNs refuses the forward,
//! [`Store::remember_env`] when a device turns out to live on the other APNs environment,
//! [`Store::hold`]/[`Store::release`] around a queued forward, [`Store::bury`] for a dead
//! token, and the retry queue's [`Store::enqueue`], [`Store::claim`] and [`Store::ack`].
//!
//! **Redis outages.** With `RELAY_REDIS_FAILURE=degrade` (the default) a Redis error or
//! timeout switches this replica to its in-process store at once: paging goes on with
//! per-replica decisions, the degraded gauge is set, one line is logged, and a background
//! probe switches back when Redis answers again. With `reject` the request is answered 503.

pub mod memory;
pub mod redis;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::envelope::DeviceToken;
use crate::policy::{DeadReason, Decision, Environment, Policy, Ticket};
use crate::queue::{MemoryQueue, Pending, RedisQueue, SHARDS};

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

/// `RELAY_REDIS_FAILURE`: what a replica does when Redis fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailure {
    /// Switch to the in-process store until Redis answers again.
    Degrade,
    /// Answer 503 with `Retry-After`.
    Reject,
}

/// Redis, when configured, and what to do when it fails.
#[derive(Debug)]
struct Shared {
    store: redis::RedisStore,
    queue: Option<RedisQueue>,
    on_failure: RedisFailure,
    degraded: Arc<AtomicBool>,
}

/// The policy state and retry queue the relay uses.
#[derive(Debug)]
pub struct Store {
    memory: memory::MemoryStore,
    memory_queue: MemoryQueue,
    redis: Option<Shared>,
    next_shard: AtomicUsize,
}

impl Store {
    /// In-process state only: one replica.
    pub fn memory(policy: Policy) -> Self {
        Self {
            memory: memory::MemoryStore::new(policy),
            memory_queue: MemoryQueue::default(),
            redis: None,
            next_shard: AtomicUsize::new(0),
        }
    }

    /// Shared state in Redis, with the in-process store as the fallback.
    pub fn redis(
        store: redis::RedisStore,
        queue: Option<RedisQueue>,
        policy: Policy,
        on_failure: RedisFailure,
    ) -> Self {
        Self {
            memory: memory::MemoryStore::new(policy),
            memory_queue: MemoryQueue::default(),
            redis: Some(Shared {
                store,
                queue,
                on_failure,
                degraded: Arc::new(AtomicBool::new(false)),
            }),
            next_shard: AtomicUsize::new(0),
        }
    }

    /// `memory` or `redis`, for traces and logs.
    pub fn kind(&self) -> &'static str {
        match &self.redis {
            None => "memory",
            Some(_) if self.degraded() => "memory-degraded",
            Some(_) => "redis",
        }
    }

    /// The in-process store (the only one without Redis, the fallback with it).
    pub fn in_process(&self) -> &memory::MemoryStore {
        &self.memory
    }

    /// The Redis store, when configured.
    pub fn redis_store(&self) -> Option<&redis::RedisStore> {
        self.redis.as_ref().map(|s| &s.store)
    }

    /// Whether this replica currently runs on its in-process store because Redis failed.
    pub fn degraded(&self) -> bool {
        self.redis
            .as_ref()
            .is_some_and(|s| s.degraded.load(Ordering::SeqCst))
    }

    /// Whether the store can serve: always without Redis; with Redis once it has answered
    /// (or while degraded, which serves from memory).
    pub fn ready(&self) -> bool {
        match &self.redis {
            None => true,
            Some(s) => s.store.ready() || s.degraded.load(Ordering::SeqCst),
        }
    }

    /// Runs one operation on Redis, or in process when there is no Redis or this replica is
    /// degraded; a Redis failure degrades (or is returned, in reject mode).
    async fn run<'a, T, F, Fut>(
        &'a self,
        op: &'static str,
        on_redis: F,
        in_memory: impl FnOnce(&memory::MemoryStore) -> T,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(&'a redis::RedisStore) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let Some(shared) = &self.redis else {
            let r = in_memory(&self.memory);
            crate::telemetry::store_op(op, started.elapsed(), true);
            return Ok(r);
        };
        if shared.degraded.load(Ordering::SeqCst) {
            return Ok(in_memory(&self.memory));
        }
        match on_redis(&shared.store).await {
            Ok(r) => {
                crate::telemetry::store_op(op, started.elapsed(), true);
                Ok(r)
            }
            Err(e) => {
                crate::telemetry::store_op(op, started.elapsed(), false);
                match shared.on_failure {
                    RedisFailure::Reject => Err(e),
                    RedisFailure::Degrade => {
                        self.degrade(shared, &e);
                        Ok(in_memory(&self.memory))
                    }
                }
            }
        }
    }

    fn degrade(&self, shared: &Shared, cause: &StoreError) {
        if shared.degraded.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(error = %cause, "Redis failed: this replica now decides on its in-process store (degraded)");
        metrics::gauge!(crate::telemetry::DEGRADED).set(1.0);
        let degraded = shared.degraded.clone();
        let pool = shared.store.pool().clone();
        let since = Instant::now();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let ping: Result<String, _> =
                    fred::prelude::ClientLike::ping(pool.next(), None).await;
                if ping.is_ok() {
                    degraded.store(false, Ordering::SeqCst);
                    metrics::gauge!(crate::telemetry::DEGRADED).set(0.0);
                    tracing::warn!(
                        degraded_ms = since.elapsed().as_millis() as u64,
                        "Redis answers again: back on shared state"
                    );
                    return;
                }
            }
        });
    }

    /// Decides one envelope for `device` at `now_ms` and records the forward, if any.
    pub async fn admit(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        now_ms: i64,
    ) -> Result<Admission, StoreError> {
        self.run(
            "admit",
            |r| r.admit(device, collapse_id, flap_key, now_ms),
            |m| m.admit(device, collapse_id, flap_key, now_ms),
        )
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
        self.run(
            "rollback",
            |r| r.rollback(device, collapse_id, flap_key, ticket, now_ms),
            |m| m.rollback(device, collapse_id, flap_key, ticket, now_ms),
        )
        .await
    }

    /// Remembers the environment a device worked on.
    pub async fn remember_env(
        &self,
        device: &DeviceToken,
        env: Environment,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(
            "remember_env",
            |r| r.remember_env(device, env, now_ms),
            |m| m.remember_env(device, env, now_ms),
        )
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
        self.run(
            "hold",
            |r| r.hold(device, collapse_id, until_ms, now_ms),
            |m| m.hold(device, collapse_id, until_ms, now_ms),
        )
        .await
    }

    /// Ends a hold: the queued forward was delivered.
    pub async fn release(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(
            "release",
            |r| r.hold(device, collapse_id, 0, now_ms),
            |m| m.release(device, collapse_id, now_ms),
        )
        .await
    }

    /// Remembers that APNs rejected this token for good, for `ttl_ms`.
    pub async fn bury(
        &self,
        device: &DeviceToken,
        reason: DeadReason,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        self.run(
            "bury",
            |r| r.bury(device, reason, ttl_ms),
            |m| m.bury(device, reason, now_ms, ttl_ms),
        )
        .await
    }

    /// The shared bucket of a busy client block (see `crate::clients`): `Some(retry_after_s)`
    /// when it is empty. Without Redis, while degraded, or when Redis fails, the replica's own
    /// bucket alone decides (this check never degrades the store or fails a request).
    pub async fn client_take(
        &self,
        block: &str,
        now_ms: i64,
        capacity: i64,
        emission_us: i64,
    ) -> Option<u64> {
        let shared = self.redis.as_ref()?;
        if shared.degraded.load(Ordering::SeqCst) {
            return None;
        }
        let started = Instant::now();
        let r = shared
            .store
            .client_take(block, now_ms, capacity, emission_us)
            .await;
        crate::telemetry::store_op("client", started.elapsed(), r.is_ok());
        r.ok().flatten()
    }

    fn redis_queue(&self) -> Option<&RedisQueue> {
        let shared = self.redis.as_ref()?;
        if shared.degraded.load(Ordering::SeqCst) {
            return None;
        }
        shared.queue.as_ref()
    }

    fn queue_failed(&self, e: &StoreError) -> Result<(), StoreError> {
        match &self.redis {
            Some(shared) if shared.on_failure == RedisFailure::Degrade => {
                self.degrade(shared, e);
                Ok(())
            }
            _ => Err(StoreError::Redis(e.to_string())),
        }
    }

    /// Puts an item in the retry queue (or back, replacing it), due at `due_ms`.
    pub async fn enqueue(&self, item: &Pending, due_ms: i64) -> Result<(), StoreError> {
        if let Some(q) = self.redis_queue() {
            match q.put(item, due_ms).await {
                Ok(()) => return Ok(()),
                Err(e) => self.queue_failed(&e)?,
            }
        }
        self.memory_queue.put(item.clone(), due_ms);
        Ok(())
    }

    /// Claims up to `max` due items: from the in-process queue and from one shard of the
    /// Redis queue (round robin over calls).
    pub async fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> Vec<Pending> {
        let mut items = self.memory_queue.claim(now_ms, lease_until_ms, max);
        let room = max - items.len();
        if room == 0 {
            return items;
        }
        if let Some(q) = self.redis_queue() {
            let shard = self.next_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
            match q.claim(shard, now_ms, lease_until_ms, room).await {
                Ok(more) => items.extend(more),
                Err(e) => {
                    let _ = self.queue_failed(&e);
                }
            }
        }
        items
    }

    /// Removes an item from the retry queue (wherever it is).
    pub async fn ack(&self, id: &str) -> Result<(), StoreError> {
        self.memory_queue.ack(id);
        if let Some(q) = self.redis_queue() {
            if let Err(e) = q.ack(id).await {
                self.queue_failed(&e)?;
            }
        }
        Ok(())
    }

    /// Items waiting in the retry queue (this replica's in-process queue plus Redis).
    pub async fn queue_depth(&self) -> usize {
        let mut n = self.memory_queue.len();
        if let Some(q) = self.redis_queue() {
            n += q.depth().await.unwrap_or(0);
        }
        n
    }
}
