//! The retry queue as the relay uses it ([`RetryQueue`]): this replica's in-process queue
//! ([`MemoryQueue`]) and the shared queue ([`RedisQueue`] in production), both a fenced
//! [`QueueBackend`] side by side, with the vocabulary (items, claims, fencing, sealing) in
//! [`item`].
//!
//! New items go to Redis when it is there and answering, else in process; claims take from
//! both (the in-process queue first, then one Redis shard, round robin over calls); a
//! claimed item is settled where it lives ([`Origin`]). Items queued in process while Redis
//! was away are handed over when it answers again and at shutdown
//! ([`RetryQueue::flush_local`]).

mod backend;
pub mod item;
mod memory;
pub mod redis;

pub use backend::{Depth, QueueBackend, Unopened};
pub use item::{backoff_ms, random_u32, Claimed, Fenced, Pending, QueueKey, Sealer};
pub use redis::RedisQueue;

use std::sync::Arc;
use std::time::Instant;

use crate::store::error::{StoreError, StoreOp, StoreResult};
use crate::store::link::{Link, RedisFailure};
pub use memory::MemoryQueue;

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

/// What one claim found: items leased to this replica, and items set aside unopened whose
/// front-end should hear so.
#[derive(Debug, Default)]
pub struct Batch {
    /// The items claimed.
    pub leases: Vec<Lease>,
    /// Items moved aside because they could not be opened, with what they settle.
    pub set_aside: Vec<Unopened>,
}

/// The retry queue's numbers, for the gauges.
#[derive(Debug, Clone, Default)]
pub struct QueueStats {
    /// This replica's in-process queue: depth and the oldest acceptance.
    pub local: (usize, Option<i64>),
    /// The shared queue, when there is one and Redis answered.
    pub shared: Option<Result<Depth, String>>,
}

/// The link to Redis, and the shared queue when this deployment can deliver (else it
/// never queues in Redis).
type Shared = (Arc<Link>, Option<Box<dyn QueueBackend>>);

/// How long an item kept in process after a put to Redis whose reply was lost waits before
/// this replica tries it itself ([`RetryQueue::keep_unsure`]).
pub const UNSURE_HOLD_MS: i64 = 10_000;

/// The retry queue: in process, and in Redis when configured.
#[derive(Debug)]
pub struct RetryQueue {
    memory: MemoryQueue,
    redis: Option<Shared>,
}

impl RetryQueue {
    /// In process only.
    pub(crate) fn memory() -> Self {
        Self {
            memory: MemoryQueue::default(),
            redis: None,
        }
    }

    /// Shared through `link` (in `queue`, when this deployment can deliver), with the
    /// in-process queue beside it.
    pub(crate) fn shared(queue: Option<Box<dyn QueueBackend>>, link: Arc<Link>) -> Self {
        Self {
            memory: MemoryQueue::default(),
            redis: Some((link, queue)),
        }
    }

    /// The shared queue, whatever the link's state (a claimed item settles where it lives).
    fn shared_queue(&self) -> Option<&dyn QueueBackend> {
        self.redis.as_ref().and_then(|(_, q)| q.as_deref())
    }

    /// The shared queue for new work: `None` while degraded.
    fn live(&self) -> Option<&dyn QueueBackend> {
        let (link, queue) = self.redis.as_ref()?;
        if link.degraded() {
            return None;
        }
        queue.as_deref()
    }

    /// A queue operation failed on Redis: degrade (and carry on in process) or fail.
    fn failed(&self, e: StoreError) -> StoreResult<()> {
        match (&self.redis, &e) {
            (_, StoreError::Full) => Err(e),
            (Some((link, _)), _) if link.on_failure() == RedisFailure::Degrade => {
                link.degrade(&e);
                Ok(())
            }
            _ => Err(e),
        }
    }

    async fn put_shared(
        q: &dyn QueueBackend,
        item: &Pending,
        due_ms: i64,
        fence: u64,
        now_ms: i64,
    ) -> StoreResult<Fenced> {
        StoreOp::QueuePut
            .timed(q.put(item, due_ms, fence, now_ms))
            .await
    }

    /// Puts a new item in the retry queue, due at `due_ms`: in Redis when it is there and
    /// answering, else in process.
    pub async fn enqueue(&self, item: &Pending, due_ms: i64, now_ms: i64) -> StoreResult<()> {
        if let Some(q) = self.live() {
            match Self::put_shared(q, item, due_ms, 0, now_ms).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    self.failed(e)?;
                    return self.keep_unsure(item, due_ms, now_ms);
                }
            }
        }
        self.memory
            .put(item.clone(), due_ms, 0)
            .map(|_| ())
            .map_err(|()| StoreError::Full)
    }

    /// Keeps in process an item whose put to Redis got no reply. The put may have run (a
    /// reply that did not arrive is not a command that did not run), so the copy here is
    /// handed over only if Redis neither holds it nor acknowledged it
    /// ([`QueueBackend::put_new`]), and this replica does not try it itself before
    /// [`UNSURE_HOLD_MS`] have passed: long enough for Redis to answer again in a stall,
    /// short enough to deliver in an outage (when a second delivery, under the same
    /// notification id and collapse id, is possible: at least once).
    fn keep_unsure(&self, item: &Pending, due_ms: i64, now_ms: i64) -> StoreResult<()> {
        self.memory
            .put_unsure(item.clone(), due_ms.max(now_ms + UNSURE_HOLD_MS))
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
    ) -> StoreResult<Fenced> {
        match lease.origin {
            Origin::Local => {
                if let Some(q) = self.live() {
                    // Redis is back: the item moves to the shared queue, where any replica
                    // can deliver it.
                    if self.memory.ack(&item.id, lease.claimed.fence) == Fenced::Stale {
                        return Ok(Fenced::Stale);
                    }
                    match Self::put_shared(q, item, due_ms, 0, now_ms).await {
                        Ok(_) => return Ok(Fenced::Done),
                        Err(e) => self.failed(e)?,
                    }
                    return self
                        .keep_unsure(item, due_ms, now_ms)
                        .map(|()| Fenced::Done);
                }
                self.memory
                    .put(item.clone(), due_ms, lease.claimed.fence)
                    .map_err(|()| StoreError::Full)
            }
            Origin::Shared => {
                let Some(q) = self.shared_queue() else {
                    return Ok(Fenced::Stale);
                };
                Self::put_shared(q, item, due_ms, lease.claimed.fence, now_ms).await
            }
        }
    }

    /// Claims up to `max` due items: from the in-process queue and from one shard of the
    /// Redis queue (round robin over calls). Items that could not be opened are counted,
    /// and those that settle something are in the batch.
    pub async fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> Batch {
        let mut out: Vec<Lease> = self
            .memory
            .claim(now_ms, lease_until_ms, max)
            .into_iter()
            .map(|claimed| Lease {
                claimed,
                origin: Origin::Local,
            })
            .collect();
        let mut set_aside = Vec::new();
        let room = max - out.len();
        if room == 0 {
            return Batch {
                leases: out,
                set_aside,
            };
        }
        if let Some(q) = self.live() {
            let r = StoreOp::QueueClaim
                .timed(q.claim(now_ms, lease_until_ms, room))
                .await;
            match r {
                Ok(got) => {
                    if got.unopenable > 0 {
                        crate::metrics::retry_unopenable(got.unopenable);
                    }
                    out.extend(got.items.into_iter().map(|claimed| Lease {
                        claimed,
                        origin: Origin::Shared,
                    }));
                    set_aside = got.set_aside;
                }
                Err(e) => {
                    let _ = self.failed(e);
                }
            }
        }
        Batch {
            leases: out,
            set_aside,
        }
    }

    /// Removes a claimed item (delivered, refused for good, or expired) as its claimer.
    pub async fn ack(&self, lease: &Lease) -> StoreResult<Fenced> {
        let id = &lease.claimed.item.id;
        match lease.origin {
            Origin::Local => Ok(self.memory.ack(id, lease.claimed.fence)),
            Origin::Shared => {
                let Some(q) = self.shared_queue() else {
                    return Ok(Fenced::Stale);
                };
                StoreOp::QueueAck
                    .timed(q.ack(id, lease.claimed.fence))
                    .await
            }
        }
    }

    /// Whether Redis came back since the last call (the local queue should be handed over).
    pub fn take_recovered(&self) -> bool {
        self.redis
            .as_ref()
            .is_some_and(|(link, _)| link.take_recovered())
    }

    /// Hands the items the in-process queue holds (and no claim does) to the shared queue,
    /// so any replica can deliver them: after a Redis outage, and at shutdown. Returns how
    /// many moved; items Redis refuses stay in process.
    pub async fn flush_local(&self, now_ms: i64) -> usize {
        let Some(q) = self.live() else {
            return 0;
        };
        let mut moved = 0;
        for (item, due, unsure) in self.memory.drain_unclaimed(now_ms) {
            let handed = if unsure {
                StoreOp::QueuePut.timed(q.put_new(&item, due, now_ms)).await
            } else {
                Self::put_shared(q, &item, due, 0, now_ms).await
            };
            match handed {
                Ok(Fenced::Done) => moved += 1,
                // Redis has it already (the put whose reply was lost ran), or had it and
                // it was delivered: this copy goes.
                Ok(Fenced::Stale) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not hand a locally queued notification to Redis; it stays in process");
                    // This put may have run too.
                    let _ = self
                        .memory
                        .put_unsure(item, due.max(now_ms + UNSURE_HOLD_MS));
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
    pub async fn stats(&self) -> QueueStats {
        let shared = match self.live() {
            Some(q) => {
                let started = Instant::now();
                let r = q.stats().await;
                StoreOp::QueueDepth.record(started, r.is_ok());
                Some(r.map_err(|e| e.to_string()))
            }
            None => None,
        };
        QueueStats {
            local: self.memory.stats(),
            shared,
        }
    }

    /// Takes every item out of this replica's in-process queue, claimed or not: at the end
    /// of a stop, what could not be handed to the shared queue, to be reported lost. Items
    /// whose put to Redis got no reply are left out: Redis may hold them (and deliver them),
    /// so they are not known to be lost.
    pub fn take_local(&self) -> Vec<Pending> {
        let (unsure, lost): (Vec<_>, Vec<_>) = self
            .memory
            .drain_unclaimed(i64::MAX)
            .into_iter()
            .partition(|(_, _, unsure)| *unsure);
        if !unsure.is_empty() {
            tracing::warn!(
                items = unsure.len(),
                "stopping with notifications whose put to Redis got no reply: Redis may hold and deliver them, so they are not reported lost"
            );
        }
        lost.into_iter().map(|(item, _, _)| item).collect()
    }

    /// Items waiting in this replica's in-process queue (the gauge reads
    /// [`RetryQueue::stats`]).
    #[cfg(test)]
    pub fn local_len(&self) -> usize {
        self.memory.len()
    }
}
