//! Receipts of signed pushes as the store keeps them: in process ([`MemoryReceipts`] under a
//! lock, [`InProcessReceipts`] publishing on the in-process fan-out) or in Redis
//! (`store::redis::signed`), behind one [`ReceiptBackend`], with [`ReceiptStore`] what the
//! relay uses. The rules every change follows are the signed front-end's
//! ([`crate::signed::receipt::lifecycle`]); the in-process backend runs them under its lock,
//! and `receipt_begin.lua` / `receipt_update.lua` mirror them.
//!
//! Both backends publish a change's new events on the push's channel ([`events_channel`])
//! from inside the change itself: the in-process backend under its lock's result, the Redis
//! one from `receipt_update.lua`, so a subscriber sees the same messages on either.

use std::collections::HashMap;
use std::sync::Mutex;

use super::common::{StoreError, StoreOp};
use super::concern::{Concern, InProcess};
use super::fanout::Channel;
use crate::signed::receipt::lifecycle::{
    self, events_message, Begun, Claim, Guard, Lease, NewReceipt, Receipt, Update, Updated,
};

/// One receipt in process memory: the receipt, when it expires, and its lease.
#[derive(Debug)]
struct Entry {
    receipt: Receipt,
    until_ms: i64,
    lease: Lease,
}

/// Receipts in process memory, each until its TTL passes.
#[derive(Debug, Default)]
pub struct MemoryReceipts {
    map: Mutex<HashMap<String, Entry>>,
}

impl MemoryReceipts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins `new` with `claim` bidding for its lease ([`lifecycle::begin`]): a new
    /// receipt, kept until `now_ms + new.ttl_ms`, or what its id already has.
    pub fn begin(&self, new: &NewReceipt<'_>, claim: &Claim<'_>, now_ms: i64) -> Begun {
        let mut map = self.lock();
        let kept = map
            .get_mut(new.push_id)
            .filter(|e| now_ms < e.until_ms)
            .map(|e| (&e.receipt, &mut e.lease));
        let begun = lifecycle::begin(kept, new, claim, now_ms);
        if let Begun::New(r) = &begun {
            map.insert(
                new.push_id.to_owned(),
                Entry {
                    receipt: r.clone(),
                    until_ms: now_ms + new.ttl_ms,
                    lease: claim.lease(now_ms),
                },
            );
        }
        begun
    }

    /// Applies `updates` under `guard` ([`lifecycle::apply`]); with the new events. A change
    /// keeps the receipt `ttl_ms` longer.
    pub fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> (Updated, Vec<lifecycle::Event>) {
        let mut map = self.lock();
        let Some(e) = map.get_mut(push_id).filter(|e| now_ms < e.until_ms) else {
            return (Updated::Gone, Vec::new());
        };
        let (updated, new) = lifecycle::apply(&mut e.receipt, &e.lease, updates, guard, now_ms);
        if !new.is_empty() {
            e.until_ms = now_ms + ttl_ms;
        }
        (updated, new)
    }

    /// The receipt, while kept.
    pub fn get(&self, push_id: &str, now_ms: i64) -> Option<Receipt> {
        self.lock()
            .get(push_id)
            .filter(|e| now_ms < e.until_ms)
            .map(|e| e.receipt.clone())
    }

    /// Forgets receipts past their TTL.
    pub fn sweep(&self, now_ms: i64) {
        self.lock().retain(|_, e| now_ms < e.until_ms);
    }
}

/// The channel a push's receipt events are published on, under the store's key prefix.
pub fn events_channel(prefix: &str, push_id: &str) -> Channel {
    Channel::sharded(format!("{prefix}{{r:{push_id}}}:events"))
}

/// Where receipts live: in process or in Redis.
#[async_trait::async_trait]
pub trait ReceiptBackend: Send + Sync + std::fmt::Debug {
    /// Creates a push's receipt, or finds the one its id has (see
    /// [`lifecycle::begin`]).
    async fn begin(
        &self,
        new: &NewReceipt<'_>,
        claim: &Claim<'_>,
        now_ms: i64,
    ) -> Result<Begun, StoreError>;

    /// Applies target changes under `guard` (see [`lifecycle::apply`]) and publishes the new events.
    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError>;

    /// A push's receipt, while kept.
    async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError>;

    /// Forgets receipts past their TTL (the in-process backend; Redis expires keys itself).
    fn sweep(&self, _now_ms: i64) {}
}

/// Receipts in process, publishing their events on the in-process fan-out.
pub type InProcessReceipts = InProcess<MemoryReceipts>;

#[async_trait::async_trait]
impl ReceiptBackend for InProcessReceipts {
    async fn begin(
        &self,
        new: &NewReceipt<'_>,
        claim: &Claim<'_>,
        now_ms: i64,
    ) -> Result<Begun, StoreError> {
        Ok(self.memory.begin(new, claim, now_ms))
    }

    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError> {
        let (updated, new) = self.memory.update(push_id, updates, guard, now_ms, ttl_ms);
        if !new.is_empty() {
            self.fanout
                .publish(
                    &events_channel("", push_id),
                    events_message(&new).as_bytes(),
                    now_ms,
                )
                .await?;
        }
        Ok(updated)
    }

    async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError> {
        Ok(self.memory.get(push_id, now_ms))
    }

    fn sweep(&self, now_ms: i64) {
        self.memory.sweep(now_ms);
    }
}

/// The signed-push API's receipts. They need the shared store for their guarantees (a
/// replay must never send twice), so they never fall back to a replica's memory: while
/// degraded they fail, and the API answers 503. Without Redis (one replica) they live in
/// process.
pub type ReceiptStore = Concern<dyn ReceiptBackend>;

impl ReceiptStore {
    /// The channel a push's receipt events are published on.
    pub fn events_channel(&self, push_id: &str) -> Channel {
        events_channel(self.prefix(), push_id)
    }

    /// Creates a push's receipt with `claim` holding its lease, or finds the one its id
    /// has (see [`lifecycle::begin`]).
    pub async fn begin(
        &self,
        new: &NewReceipt<'_>,
        claim: &Claim<'_>,
        now_ms: i64,
    ) -> Result<Begun, StoreError> {
        self.call(StoreOp::ReceiptBegin, |b| b.begin(new, claim, now_ms))
            .await
    }

    /// Applies target changes under `guard` (see [`lifecycle::apply`]) and publishes the
    /// new events to every replica.
    pub async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError> {
        self.call(StoreOp::ReceiptUpdate, |b| {
            b.update(push_id, updates, guard, now_ms, ttl_ms)
        })
        .await
    }

    /// A push's receipt, while kept.
    pub async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError> {
        self.call(StoreOp::ReceiptGet, |b| b.get(push_id, now_ms))
            .await
    }

    /// Forgets in-process receipts past their TTL (called periodically).
    pub fn sweep(&self, now_ms: i64) {
        self.backend().sweep(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signed::receipt::lifecycle::tests::{up, A, B};
    use crate::signed::receipt::lifecycle::State;

    #[test]
    fn memory_receipts_expire() {
        let m = MemoryReceipts::default();
        let t = vec!["a".to_owned()];
        let new = |hash| NewReceipt {
            push_id: "p",
            hash,
            signer: "k",
            topic: "t",
            targets: &t,
            ttl_ms: 100,
        };
        assert!(matches!(m.begin(&new("h"), &A, 0), Begun::New(_)));
        assert!(m.get("p", 99).is_some());
        assert!(m.get("p", 100).is_none());
        assert_eq!(
            m.update("p", &[up("a", State::Delivered)], Guard::Always, 100, 100)
                .0,
            Updated::Gone
        );
        // After expiry the id is new again.
        assert!(matches!(m.begin(&new("other"), &B, 100), Begun::New(_)));
    }
}
