//! The in-process retry queue: the same semantics as the Redis queue (due times, leases,
//! fencing tokens, the shard cap), for a single replica, and for a replica whose Redis is
//! away (degraded mode). Items it holds while degraded are handed to Redis when Redis
//! answers again and at shutdown (see [`crate::store::queue::RetryQueue::flush_local`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::backend::{Claims, Depth, QueueBackend};
use super::item::{Claimed, Fenced, Pending, SHARD_CAP};
use crate::store::error::{StoreError, StoreResult};

/// The in-process queue.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    inner: Mutex<Inner>,
}

/// Items are ordered by due time, then by id: the order of a Redis sorted set, so both
/// queues claim the same items in the same order.
#[derive(Debug, Default)]
struct Inner {
    fence: u64,
    due: BTreeSet<(i64, String)>,
    items: HashMap<String, Slot>,
}

#[derive(Debug)]
struct Slot {
    due: i64,
    item: Pending,
    /// The current claim's fencing token, 0 while unclaimed.
    fence: u64,
    /// Put here after a put to the shared queue got no reply: the shared queue may hold it
    /// too, so it is handed over only as [`QueueBackend::put_new`].
    unsure: bool,
}

impl MemoryQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces an item, due at `due_ms`. With `fence` 0 (a new item) it always
    /// writes, unless the queue is full (`false`); with a claim's fence it writes only while
    /// that claim is current (a reschedule by the claimer).
    pub fn put(&self, item: Pending, due_ms: i64, fence: u64) -> Result<Fenced, ()> {
        self.insert(item, due_ms, fence, false)
    }

    /// Adds a new item that the shared queue may hold too (its put there got no reply).
    pub fn put_unsure(&self, item: Pending, due_ms: i64) -> Result<Fenced, ()> {
        self.insert(item, due_ms, 0, true)
    }

    fn insert(&self, item: Pending, due_ms: i64, fence: u64, unsure: bool) -> Result<Fenced, ()> {
        let mut q = self.lock();
        match q.items.get(&item.id) {
            Some(slot) if fence != 0 && slot.fence != fence => return Ok(Fenced::Stale),
            None if fence != 0 => return Ok(Fenced::Stale),
            None if q.items.len() >= SHARD_CAP => return Err(()),
            _ => {}
        }
        if let Some(old) = q.items.remove(&item.id) {
            q.due.remove(&(old.due, item.id.clone()));
        }
        q.due.insert((due_ms, item.id.clone()));
        q.items.insert(
            item.id.clone(),
            Slot {
                due: due_ms,
                item,
                fence: 0,
                unsure,
            },
        );
        Ok(Fenced::Done)
    }

    /// Claims up to `max` items due at `now_ms`; each becomes due again at `lease_until_ms`
    /// unless acknowledged or put back first, and gets a fresh fencing token.
    pub fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> Vec<Claimed> {
        let mut q = self.lock();
        let ids: Vec<String> = q
            .due
            .iter()
            .take_while(|(due, _)| *due <= now_ms)
            .take(max)
            .map(|(_, id)| id.clone())
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            q.fence += 1;
            let fence = q.fence;
            let Some(mut slot) = q.items.remove(&id) else {
                continue;
            };
            q.due.remove(&(slot.due, id.clone()));
            q.due.insert((lease_until_ms, id.clone()));
            slot.due = lease_until_ms;
            slot.fence = fence;
            out.push(Claimed {
                item: slot.item.clone(),
                fence,
            });
            q.items.insert(id, slot);
        }
        out
    }

    /// Removes an item: with fence 0 unconditionally, else only while that claim is current.
    pub fn ack(&self, id: &str, fence: u64) -> Fenced {
        let mut q = self.lock();
        match q.items.get(id) {
            Some(slot) if fence == 0 || slot.fence == fence => {
                let due = slot.due;
                q.items.remove(id);
                q.due.remove(&(due, id.to_owned()));
                Fenced::Done
            }
            _ => Fenced::Stale,
        }
    }

    /// Takes out every item no worker holds a current claim on (the claimed ones settle
    /// through their claimer), with its due time and whether the shared queue may hold it
    /// already: the hand-over to Redis.
    pub fn drain_unclaimed(&self, now_ms: i64) -> Vec<(Pending, i64, bool)> {
        let mut q = self.lock();
        let ids: Vec<String> = q
            .items
            .iter()
            .filter(|(_, s)| s.fence == 0 || s.due <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(slot) = q.items.remove(&id) {
                q.due.remove(&(slot.due, id));
                out.push((slot.item, slot.due, slot.unsure));
            }
        }
        out
    }

    /// Items waiting, and the acceptance instant of the oldest (ms).
    pub fn stats(&self) -> (usize, Option<i64>) {
        let q = self.lock();
        let oldest = q.items.values().map(|s| s.item.accepted_ms()).min();
        (q.items.len(), oldest)
    }

    /// Items waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }
}

#[async_trait::async_trait]
impl QueueBackend for MemoryQueue {
    async fn put(
        &self,
        item: &Pending,
        due_ms: i64,
        fence: u64,
        _now_ms: i64,
    ) -> StoreResult<Fenced> {
        MemoryQueue::put(self, item.clone(), due_ms, fence).map_err(|()| StoreError::Full)
    }

    async fn put_new(&self, item: &Pending, due_ms: i64, _now_ms: i64) -> StoreResult<Fenced> {
        if self.lock().items.contains_key(&item.id) {
            return Ok(Fenced::Stale);
        }
        MemoryQueue::put(self, item.clone(), due_ms, 0).map_err(|()| StoreError::Full)
    }

    async fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> StoreResult<Claims> {
        Ok(Claims {
            items: MemoryQueue::claim(self, now_ms, lease_until_ms, max),
            unopenable: 0,
            set_aside: Vec::new(),
        })
    }

    async fn ack(&self, id: &str, fence: u64) -> StoreResult<Fenced> {
        Ok(MemoryQueue::ack(self, id, fence))
    }

    async fn stats(&self) -> StoreResult<Depth> {
        let (depth, oldest_accepted_ms) = MemoryQueue::stats(self);
        Ok(Depth {
            depth,
            oldest_accepted_ms,
            aside: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queue::item::tests::item;

    impl MemoryQueue {
        /// Whether nothing waits.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    fn ids(c: &[Claimed]) -> Vec<&str> {
        c.iter().map(|c| c.item.id.as_str()).collect()
    }

    #[test]
    fn claims_due_items_and_leases_them() {
        let q = MemoryQueue::default();
        q.put(item("a"), 100, 0).unwrap();
        q.put(item("b"), 200, 0).unwrap();
        assert!(q.claim(99, 1000, 10).is_empty());
        let got = q.claim(150, 1000, 10);
        assert_eq!(ids(&got), vec!["a"]);
        // Leased: not due again until the lease ends.
        assert_eq!(ids(&q.claim(500, 1000, 10)), vec!["b"]);
        assert!(q.claim(999, 2000, 10).is_empty());
        // The holders died: both come back after their leases.
        assert_eq!(q.claim(1000, 3000, 10).len(), 2);
    }

    #[test]
    fn a_stale_claim_can_neither_delete_nor_resurrect() {
        let q = MemoryQueue::default();
        q.put(item("a"), 100, 0).unwrap();
        let first = q.claim(100, 1000, 1).remove(0);
        // The first holder's lease ran out; another replica claims it.
        let second = q.claim(1000, 2000, 1).remove(0);
        assert_ne!(first.fence, second.fence);
        assert_eq!(q.ack("a", first.fence), Fenced::Stale);
        assert_eq!(q.put(item("a"), 5000, first.fence), Ok(Fenced::Stale));
        assert_eq!(q.len(), 1);
        // The current holder reschedules, then acknowledges.
        assert_eq!(q.put(item("a"), 3000, second.fence), Ok(Fenced::Done));
        let third = q.claim(3000, 4000, 1).remove(0);
        assert_eq!(q.ack("a", second.fence), Fenced::Stale, "its claim ended");
        assert_eq!(q.ack("a", third.fence), Fenced::Done);
        assert!(q.is_empty());
        // Gone: a stale put does not bring it back.
        assert_eq!(q.put(item("a"), 1, third.fence), Ok(Fenced::Stale));
        assert!(q.is_empty());
    }

    #[test]
    fn drain_hands_over_what_no_claim_holds() {
        let q = MemoryQueue::default();
        q.put(item("a"), 100, 0).unwrap();
        q.put(item("b"), 100, 0).unwrap();
        let held = q.claim(100, 1000, 1).remove(0);
        let out = q.drain_unclaimed(500);
        assert!(!out[0].2, "put in process, not after a lost put");
        assert_eq!(out.len(), 1);
        assert_ne!(out[0].0.id, held.item.id);
        assert_eq!(q.len(), 1, "the claimed one settles through its claimer");
        // A claim whose lease ran out counts as unclaimed.
        assert_eq!(q.drain_unclaimed(1000).len(), 1);
        assert!(q.is_empty());
    }

    #[test]
    fn stats_report_the_oldest_acceptance() {
        let q = MemoryQueue::default();
        assert_eq!(q.stats(), (0, None));
        let mut a = item("a");
        a.expiration_s = 1_000;
        q.put(a, 1, 0).unwrap();
        q.put(item("b"), 1, 0).unwrap();
        assert_eq!(q.stats(), (2, Some(1_000_000 - 600_000)));
    }
}
