//! Where shared state lives: in process ([`memory`]) or in Redis ([`redis`]), behind one
//! facade, [`Store`].
//!
//! - **Policy state**: both stores run the same policy ([`crate::policy`]) atomically per
//!   device: the in-memory store under a lock, the Redis store as one Lua script.
//!   [`Store::admit`] before the APNs call, [`Store::rollback`] if APNs refuses the forward,
//!   [`Store::remember_env`] when a device turns out to live on the other environment,
//!   [`Store::hold`]/[`Store::release`] around a queued forward, [`Store::bury`] for a dead
//!   token, [`Store::client_take`] for a busy client's shared bucket.
//! - **The retry queue** ([`queue`]): [`Store::enqueue`], [`Store::claim`],
//!   [`Store::reschedule`], [`Store::ack`]; claims are fenced, items sealed.
//! - **Fan-out** ([`fanout`]): "tell every replica", for live streams.
//!
//! **Redis outages.** With `RELAY_REDIS_FAILURE=degrade` (the default) a Redis error or
//! timeout on a policy operation switches this replica to its in-process store at once:
//! paging goes on with per-replica decisions, the degraded gauge is set, one line is logged,
//! and a background probe switches back when Redis answers again. Retry items queued in
//! process meanwhile are handed to Redis when it answers again and at shutdown
//! ([`Store::flush_local_queue`]). With `reject` the request is answered 503.
//!
//! Round trips: one per admission on the happy path; the others happen only on their
//! events (a refusal, a queued forward, a fallback, a busy client).

pub mod fanout;
pub mod mailbox;
pub mod memory;
pub mod queue;
pub mod receipts;
pub mod redis;
pub mod signers;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::{DeviceToken, Environment};
use crate::metrics;
use crate::policy::{DeadReason, Decision, Policy, Ticket};
use memory::queue::MemoryQueue;
use queue::{Claimed, Fenced, Pending};
use redis::queue::{RedisQueue, ShardStats, SHARDS};

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
    /// The retry queue shard is full ([`queue::SHARD_CAP`]).
    #[error("the retry queue is full")]
    Full,
    /// This replica runs on its in-process store because Redis failed, and the operation
    /// needs the shared store (signed pushes, mailboxes).
    #[error("the shared store is unavailable (this replica is degraded)")]
    Degraded,
}

/// `RELAY_REDIS_FAILURE`: what a replica does when Redis fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailure {
    /// Switch to the in-process store until Redis answers again.
    Degrade,
    /// Answer 503 with `Retry-After`.
    Reject,
}

/// The store's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Redis, or the in-process store when `None`.
    pub redis: Option<redis::RedisSettings>,
    /// What a replica does when Redis fails.
    pub on_failure: RedisFailure,
    /// The retry queue's sealing key (from `RELAY_QUEUE_KEY` or the APNs key); without one
    /// nothing is queued in Redis.
    pub queue_key: Option<queue::QueueKey>,
}

/// Which queue a claimed item came from, so it is settled where it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This replica's in-process queue.
    Local,
    /// The shared queue in Redis.
    Shared,
}

/// A claimed retry item, with where it lives.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The item and its fencing token.
    pub claimed: Claimed,
    /// Where it lives.
    pub origin: Origin,
}

/// The retry queue's numbers, for the gauges.
#[derive(Debug, Clone, Default)]
pub struct QueueStats {
    /// This replica's in-process queue: depth and the oldest acceptance.
    pub local: (usize, Option<i64>),
    /// The shared queue, when there is one and Redis answered.
    pub shared: Option<Result<ShardStats, String>>,
}

/// Redis, when configured, and what to do when it fails.
#[derive(Debug)]
struct Shared {
    store: redis::RedisStore,
    signed: redis::signed::Signed,
    mailboxes: redis::mailbox::RedisMailboxes,
    queue: Option<RedisQueue>,
    on_failure: RedisFailure,
    degraded: Arc<AtomicBool>,
    /// Set by the recovery probe: Redis answers again, the local queue should be handed over.
    recovered: Arc<AtomicBool>,
}

/// Every store operation's name, for the metrics registered at start-up.
pub const OPS: &[&str] = &[
    "admit",
    "rollback",
    "remember_env",
    "hold",
    "release",
    "bury",
    "client",
    "queue_put",
    "queue_claim",
    "queue_ack",
    "queue_depth",
    "fanout_publish",
    "fanout_subscribe",
    "receipt_begin",
    "receipt_update",
    "receipt_get",
    "signer_get",
    "signer_enroll",
    "signer_revoke",
    "signer_list",
    "mailbox",
];

/// The state the relay uses.
#[derive(Debug)]
pub struct Store {
    memory: memory::MemoryStore,
    memory_queue: MemoryQueue,
    memory_receipts: receipts::MemoryReceipts,
    memory_signers: signers::MemorySigners,
    memory_mailboxes: mailbox::MemoryMailboxes,
    /// Key prefix, for channel names (empty in process).
    prefix: String,
    redis: Option<Shared>,
    fanout: fanout::Fanout,
    next_shard: AtomicUsize,
}

impl Store {
    /// In-process state only: one replica.
    pub fn memory(policy: Policy) -> Self {
        Self {
            memory: memory::MemoryStore::new(policy),
            memory_queue: MemoryQueue::default(),
            memory_receipts: receipts::MemoryReceipts::default(),
            memory_signers: signers::MemorySigners::default(),
            memory_mailboxes: mailbox::MemoryMailboxes::default(),
            prefix: String::new(),
            redis: None,
            fanout: fanout::Fanout::memory(),
            next_shard: AtomicUsize::new(0),
        }
    }

    /// Shared state in Redis, with the in-process store as the fallback. `queue` is the
    /// shared retry queue (absent when this deployment cannot deliver, so never queues).
    pub fn redis(
        store: redis::RedisStore,
        queue: Option<RedisQueue>,
        fanout: fanout::Fanout,
        policy: Policy,
        on_failure: RedisFailure,
    ) -> Self {
        let prefix = store.prefix().to_owned();
        let signed = redis::signed::Signed::new(store.pool().clone(), &prefix);
        let mailboxes = redis::mailbox::RedisMailboxes::new(store.pool().clone(), &prefix);
        Self {
            memory: memory::MemoryStore::new(policy),
            memory_queue: MemoryQueue::default(),
            memory_receipts: receipts::MemoryReceipts::default(),
            memory_signers: signers::MemorySigners::default(),
            memory_mailboxes: mailbox::MemoryMailboxes::default(),
            prefix,
            redis: Some(Shared {
                signed,
                mailboxes,
                store,
                queue,
                on_failure,
                degraded: Arc::new(AtomicBool::new(false)),
                recovered: Arc::new(AtomicBool::new(false)),
            }),
            fanout,
            next_shard: AtomicUsize::new(0),
        }
    }

    /// `memory`, `redis` or `memory-degraded`, for traces and logs.
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

    /// The fan-out seam.
    pub fn fanout(&self) -> &fanout::Fanout {
        &self.fanout
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
            metrics::store_op(op, started.elapsed(), true);
            return Ok(r);
        };
        if shared.degraded.load(Ordering::SeqCst) {
            return Ok(in_memory(&self.memory));
        }
        match on_redis(&shared.store).await {
            Ok(r) => {
                metrics::store_op(op, started.elapsed(), true);
                Ok(r)
            }
            Err(e) => {
                metrics::store_op(op, started.elapsed(), false);
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
        metrics::degraded(true);
        let degraded = shared.degraded.clone();
        let recovered = shared.recovered.clone();
        let pool = shared.store.pool().clone();
        let since = Instant::now();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let ping: Result<String, _> =
                    fred::prelude::ClientLike::ping(pool.next(), None).await;
                if ping.is_ok() {
                    degraded.store(false, Ordering::SeqCst);
                    recovered.store(true, Ordering::SeqCst);
                    metrics::degraded(false);
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
        let shared = self.redis.as_ref()?;
        if shared.degraded.load(Ordering::SeqCst) {
            return None;
        }
        let started = Instant::now();
        let r = shared
            .store
            .client_take(block, now_ms, capacity, emission_us)
            .await;
        metrics::store_op("client", started.elapsed(), r.is_ok());
        r.ok().flatten()
    }

    fn redis_queue(&self) -> Option<&RedisQueue> {
        let shared = self.redis.as_ref()?;
        if shared.degraded.load(Ordering::SeqCst) {
            return None;
        }
        shared.queue.as_ref()
    }

    /// A queue operation failed on Redis: degrade (and carry on in process) or fail.
    fn queue_failed(&self, e: StoreError) -> Result<(), StoreError> {
        match (&self.redis, &e) {
            (_, StoreError::Full) => Err(e),
            (Some(shared), _) if shared.on_failure == RedisFailure::Degrade => {
                self.degrade(shared, &e);
                Ok(())
            }
            _ => Err(e),
        }
    }

    /// Puts a new item in the retry queue, due at `due_ms`: in Redis when it is there and
    /// answering, else in process.
    pub async fn enqueue(
        &self,
        item: &Pending,
        due_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if let Some(q) = self.redis_queue() {
            let started = Instant::now();
            let r = q.put(item, due_ms, 0, now_ms).await;
            metrics::store_op("queue_put", started.elapsed(), r.is_ok());
            match r {
                Ok(_) => return Ok(()),
                Err(e) => self.queue_failed(e)?,
            }
        }
        self.memory_queue
            .put(item.clone(), due_ms, 0)
            .map(|_| ())
            .map_err(|()| StoreError::Full)
    }

    /// Reschedules a claimed item as its claimer: `Stale` when the claim is no longer
    /// current (another replica owns the item now; nothing was written).
    pub async fn reschedule(
        &self,
        lease: &Lease,
        item: &Pending,
        due_ms: i64,
        now_ms: i64,
    ) -> Result<Fenced, StoreError> {
        match lease.origin {
            Origin::Local => {
                if let Some(q) = self.redis_queue() {
                    // Redis is back: the item moves to the shared queue, where any replica
                    // can deliver it.
                    if self.memory_queue.ack(&item.id, lease.claimed.fence) == Fenced::Stale {
                        return Ok(Fenced::Stale);
                    }
                    let started = Instant::now();
                    let r = q.put(item, due_ms, 0, now_ms).await;
                    metrics::store_op("queue_put", started.elapsed(), r.is_ok());
                    match r {
                        Ok(_) => return Ok(Fenced::Done),
                        Err(e) => self.queue_failed(e)?,
                    }
                    return self
                        .memory_queue
                        .put(item.clone(), due_ms, 0)
                        .map_err(|()| StoreError::Full);
                }
                self.memory_queue
                    .put(item.clone(), due_ms, lease.claimed.fence)
                    .map_err(|()| StoreError::Full)
            }
            Origin::Shared => {
                let Some(q) = self.redis.as_ref().and_then(|s| s.queue.as_ref()) else {
                    return Ok(Fenced::Stale);
                };
                let started = Instant::now();
                let r = q.put(item, due_ms, lease.claimed.fence, now_ms).await;
                metrics::store_op("queue_put", started.elapsed(), r.is_ok());
                r
            }
        }
    }

    /// Claims up to `max` due items: from the in-process queue and from one shard of the
    /// Redis queue (round robin over calls). Items that could not be opened are counted.
    pub async fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> Vec<Lease> {
        let mut out: Vec<Lease> = self
            .memory_queue
            .claim(now_ms, lease_until_ms, max)
            .into_iter()
            .map(|claimed| Lease {
                claimed,
                origin: Origin::Local,
            })
            .collect();
        let room = max - out.len();
        if room == 0 {
            return out;
        }
        if let Some(q) = self.redis_queue() {
            let shard = self.next_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let started = Instant::now();
            let r = q.claim(shard, now_ms, lease_until_ms, room).await;
            metrics::store_op("queue_claim", started.elapsed(), r.is_ok());
            match r {
                Ok(got) => {
                    if got.unopenable > 0 {
                        metrics::retry_unopenable(got.unopenable);
                    }
                    out.extend(got.items.into_iter().map(|claimed| Lease {
                        claimed,
                        origin: Origin::Shared,
                    }));
                }
                Err(e) => {
                    let _ = self.queue_failed(e);
                }
            }
        }
        out
    }

    /// Removes a claimed item (delivered, refused for good, or expired) as its claimer.
    pub async fn ack(&self, lease: &Lease) -> Result<Fenced, StoreError> {
        let id = &lease.claimed.item.id;
        match lease.origin {
            Origin::Local => Ok(self.memory_queue.ack(id, lease.claimed.fence)),
            Origin::Shared => {
                let Some(q) = self.redis.as_ref().and_then(|s| s.queue.as_ref()) else {
                    return Ok(Fenced::Stale);
                };
                let started = Instant::now();
                let r = q.ack(id, lease.claimed.fence).await;
                metrics::store_op("queue_ack", started.elapsed(), r.is_ok());
                r
            }
        }
    }

    /// Whether Redis came back since the last call (the local queue should be handed over).
    pub fn take_recovered(&self) -> bool {
        self.redis
            .as_ref()
            .is_some_and(|s| s.recovered.swap(false, Ordering::SeqCst))
    }

    /// Hands the items the in-process queue holds (and no claim does) to the shared queue,
    /// so any replica can deliver them: after a Redis outage, and at shutdown. Returns how
    /// many moved; items Redis refuses stay in process.
    pub async fn flush_local_queue(&self, now_ms: i64) -> usize {
        let Some(q) = self.redis_queue() else {
            return 0;
        };
        let mut moved = 0;
        for (item, due) in self.memory_queue.drain_unclaimed(now_ms) {
            let started = Instant::now();
            let r = q.put(&item, due, 0, now_ms).await;
            metrics::store_op("queue_put", started.elapsed(), r.is_ok());
            match r {
                Ok(_) => moved += 1,
                Err(e) => {
                    tracing::warn!(error = %e, "could not hand a locally queued notification to Redis; it stays in process");
                    let _ = self.memory_queue.put(item, due, 0);
                }
            }
        }
        if moved > 0 {
            tracing::info!(
                moved,
                "handed locally queued notifications to the shared queue"
            );
        }
        moved
    }

    /// The retry queue's numbers: this replica's in-process queue, and the shared one.
    pub async fn queue_stats(&self) -> QueueStats {
        let shared = match self.redis.as_ref().and_then(|s| s.queue.as_ref()) {
            Some(q) if !self.degraded() => {
                let started = Instant::now();
                let r = q.stats().await;
                metrics::store_op("queue_depth", started.elapsed(), r.is_ok());
                Some(r.map_err(|e| e.to_string()))
            }
            _ => None,
        };
        QueueStats {
            local: self.memory_queue.stats(),
            shared,
        }
    }

    /// Items waiting in this replica's in-process queue.
    pub fn local_queue_len(&self) -> usize {
        self.memory_queue.len()
    }
}

/// The signed-push API's state: receipts and signers. These need the shared store for
/// their guarantees (a replay must never send twice, a revocation must hold everywhere), so
/// they never fall back to a replica's memory: while degraded they fail, and the API answers
/// 503. Without Redis (one replica) they live in process.
impl Store {
    fn shared_or_memory(&self) -> Result<Option<&Shared>, StoreError> {
        match &self.redis {
            None => Ok(None),
            Some(s) if s.degraded.load(Ordering::SeqCst) => Err(StoreError::Degraded),
            Some(s) => Ok(Some(s)),
        }
    }

    async fn timed<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let r = f.await;
        metrics::store_op(op, started.elapsed(), r.is_ok());
        r
    }

    /// The channel a push's receipt events are published on.
    pub fn events_channel(&self, push_id: &str) -> fanout::Channel {
        fanout::Channel::sharded(format!("{}{{r:{push_id}}}:events", self.prefix))
    }

    /// The channel signer changes are published on.
    pub fn signers_channel(&self) -> fanout::Channel {
        fanout::Channel::global(format!("{}signers", self.prefix))
    }

    /// Creates a push's receipt, or finds the one its id has (see [`receipts::begin`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn receipt_begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<receipts::Begun, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => {
                self.timed(
                    "receipt_begin",
                    s.signed
                        .begin(push_id, hash, signer, topic, targets, now_ms, ttl_ms),
                )
                .await
            }
            None => Ok(self
                .memory_receipts
                .begin(push_id, hash, signer, topic, targets, now_ms, ttl_ms)),
        }
    }

    /// Applies target changes (see [`receipts::update`]) and publishes the new events to
    /// every replica: the receipt's last event sequence before the changes (a caller holding
    /// the receipt at that sequence applies [`receipts::update`] to it and has what the
    /// store has), `None` when the receipt is gone.
    pub async fn receipt_update(
        &self,
        push_id: &str,
        updates: &[receipts::Update],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => {
                self.timed(
                    "receipt_update",
                    s.signed.update(push_id, updates, now_ms, ttl_ms),
                )
                .await
            }
            None => {
                let Some((before, new)) = self
                    .memory_receipts
                    .update(push_id, updates, now_ms, ttl_ms)
                else {
                    return Ok(None);
                };
                if !new.is_empty() {
                    let payload: Vec<String> = new.iter().map(receipts::Event::encode).collect();
                    self.fanout
                        .publish(
                            &self.events_channel(push_id),
                            payload.join("\n").as_bytes(),
                            now_ms,
                        )
                        .await?;
                }
                Ok(Some(before))
            }
        }
    }

    /// A push's receipt, while kept.
    pub async fn receipt_get(
        &self,
        push_id: &str,
        now_ms: i64,
    ) -> Result<Option<receipts::Receipt>, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => self.timed("receipt_get", s.signed.get(push_id)).await,
            None => Ok(self.memory_receipts.get(push_id, now_ms)),
        }
    }

    /// One signer.
    pub async fn signer_get(&self, key_id: &str) -> Result<Option<signers::Signer>, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => self.timed("signer_get", s.signed.signer(key_id)).await,
            None => Ok(self.memory_signers.get(key_id)),
        }
    }

    /// Enrols or updates a signer, and tells every replica.
    pub async fn signer_enroll(
        &self,
        key_id: &str,
        public_key: &str,
        topics: &[String],
        now_ms: i64,
    ) -> Result<(signers::Signer, signers::Enrolled), StoreError> {
        match self.shared_or_memory()? {
            Some(s) => {
                self.timed(
                    "signer_enroll",
                    s.signed.enroll(key_id, public_key, topics, now_ms),
                )
                .await
            }
            None => {
                let r = self
                    .memory_signers
                    .enroll(key_id, public_key, topics, now_ms);
                self.fanout
                    .publish(&self.signers_channel(), key_id.as_bytes(), now_ms)
                    .await?;
                Ok(r)
            }
        }
    }

    /// Revokes a signer, and tells every replica; `None` for an unknown key id.
    pub async fn signer_revoke(
        &self,
        key_id: &str,
        now_ms: i64,
    ) -> Result<Option<signers::Signer>, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => {
                self.timed("signer_revoke", s.signed.revoke(key_id, now_ms))
                    .await
            }
            None => {
                let r = self.memory_signers.revoke(key_id, now_ms);
                if r.is_some() {
                    self.fanout
                        .publish(&self.signers_channel(), key_id.as_bytes(), now_ms)
                        .await?;
                }
                Ok(r)
            }
        }
    }

    /// Every signer.
    pub async fn signer_list(&self) -> Result<Vec<signers::Signer>, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => self.timed("signer_list", s.signed.list()).await,
            None => Ok(self.memory_signers.list()),
        }
    }

    /// Forgets in-process receipts past their TTL (called periodically).
    pub fn sweep_receipts(&self, now_ms: i64) {
        self.memory_receipts.sweep(now_ms);
    }
}

/// Mailboxes (MAILBOX.md): like receipts, they need the shared store (every limit is
/// cluster-wide and any replica serves any request), so while degraded they fail and the
/// front-end answers 503. Without Redis (one replica) they live in process.
impl Store {
    /// The channel a mailbox's live sockets listen on: `seq <dir> <n>` after each stored
    /// envelope, `erase`, and the signal rendezvous's messages.
    pub fn mailbox_channel(&self, name: &mailbox::Name) -> fanout::Channel {
        fanout::Channel::sharded(format!("{}{{mb:{}}}:ev", self.prefix, name.as_str()))
    }

    /// The channel of a mailbox's signal rendezvous (presence, replacement, frames).
    pub fn signal_channel(&self, name: &mailbox::Name) -> fanout::Channel {
        fanout::Channel::sharded(format!("{}{{mb:{}}}:sig", self.prefix, name.as_str()))
    }

    /// One mailbox request (see [`mailbox::Op`]) for the bearer whose SHA-256 hex is
    /// `bearer`. One round trip on Redis; what live sockets must hear is published by the
    /// same script (in process: here).
    pub async fn mailbox(
        &self,
        name: &mailbox::Name,
        bearer: &str,
        op: &mailbox::Op,
        now_ms: i64,
        limits: mailbox::Limits,
    ) -> Result<mailbox::Answer, StoreError> {
        match self.shared_or_memory()? {
            Some(s) => {
                self.timed(
                    "mailbox",
                    s.mailboxes.apply(name, bearer, op, now_ms, limits),
                )
                .await
            }
            None => {
                let answer = self
                    .memory_mailboxes
                    .apply(name, bearer, op, now_ms, limits);
                let note = match (op, &answer) {
                    (mailbox::Op::Put { dir, seq, .. }, mailbox::Answer::Stored(_)) => {
                        Some(format!("seq {} {seq}", dir.as_str()))
                    }
                    (mailbox::Op::Erase, mailbox::Answer::Done) => Some("erase".to_owned()),
                    _ => None,
                };
                if let Some(note) = note {
                    // Best effort, like Redis pub/sub: the request's answer stands.
                    let _ = self
                        .fanout
                        .publish(&self.mailbox_channel(name), note.as_bytes(), now_ms)
                        .await;
                }
                Ok(answer)
            }
        }
    }

    /// Forgets in-process mailboxes idle past their time (called periodically).
    pub fn sweep_mailboxes(&self, now_ms: i64) {
        self.memory_mailboxes.sweep(now_ms);
    }
}

#[cfg(test)]
mod tests;
