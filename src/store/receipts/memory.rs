//! Receipts in process: [`MemoryReceipts`] under a lock, running the lifecycle's rules, and
//! [`InProcessReceipts`], which publishes each change's new events on the in-process
//! fan-out right after the lock.

use std::collections::HashMap;
use std::sync::Mutex;

use super::backend::{events_channel, ReceiptBackend};
use crate::signed::receipt::lifecycle::{
    self, events_message, Begun, Changes, Lease, NewReceipt, Receipt, Updated,
};
use crate::store::concern::InProcess;
use crate::store::error::StoreResult;

/// One receipt in process memory: the receipt, when it expires, and its lease.
#[derive(Debug)]
struct Entry {
    receipt: Receipt,
    until_ms: i64,
    lease: Lease,
    /// The sealed request and until when it is kept.
    kept: Option<(Vec<u8>, i64)>,
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

    /// Begins `new`, its claim bidding for the lease ([`lifecycle::begin`]): a new
    /// receipt, kept until `now_ms + new.ttl_ms`, or what its id already has.
    pub fn begin(&self, new: &NewReceipt<'_>, now_ms: i64) -> Begun {
        let mut map = self.lock();
        let kept = map
            .get_mut(new.push_id)
            .filter(|e| now_ms < e.until_ms)
            .map(|e| (&e.receipt, &mut e.lease));
        let begun = lifecycle::begin(kept, new, now_ms);
        if let Begun::New(r) = &begun {
            map.insert(
                new.push_id.to_owned(),
                Entry {
                    receipt: r.clone(),
                    until_ms: now_ms + new.ttl_ms,
                    lease: new.claim.lease(now_ms),
                    kept: new.kept.map(|(b, ms)| (b.to_vec(), now_ms + ms)),
                },
            );
        }
        begun
    }

    /// Applies `changes` under their guard ([`lifecycle::apply`]); with the new events. A
    /// change keeps the receipt `changes.ttl_ms` longer.
    pub fn update(&self, changes: &Changes<'_>, now_ms: i64) -> (Updated, Vec<lifecycle::Event>) {
        let mut map = self.lock();
        let Some(e) = map.get_mut(changes.push_id).filter(|e| now_ms < e.until_ms) else {
            return (Updated::Gone, Vec::new());
        };
        let (r, lease) = (&mut e.receipt, &e.lease);
        let (updated, new) = lifecycle::apply(r, lease, changes.updates, changes.guard, now_ms);
        if !new.is_empty() {
            e.until_ms = now_ms + changes.ttl_ms;
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

    /// The sealed request kept beside the lease, until its time passes.
    pub fn kept(&self, push_id: &str, now_ms: i64) -> Option<Vec<u8>> {
        self.lock()
            .get(push_id)
            .and_then(|e| e.kept.as_ref())
            .filter(|(_, until)| now_ms < *until)
            .map(|(b, _)| b.clone())
    }

    /// Forgets receipts past their TTL.
    pub fn sweep(&self, now_ms: i64) {
        self.lock().retain(|_, e| now_ms < e.until_ms);
    }
}

/// Receipts in process, publishing their events on the in-process fan-out.
pub type InProcessReceipts = InProcess<MemoryReceipts>;

#[async_trait::async_trait]
impl ReceiptBackend for InProcessReceipts {
    async fn begin(&self, new: &NewReceipt<'_>, now_ms: i64) -> StoreResult<Begun> {
        Ok(self.memory.begin(new, now_ms))
    }

    async fn update(&self, changes: &Changes<'_>, now_ms: i64) -> StoreResult<Updated> {
        let (updated, new) = self.memory.update(changes, now_ms);
        if !new.is_empty() {
            self.fanout
                .publish(
                    &events_channel("", changes.push_id),
                    events_message(&new).as_bytes(),
                    now_ms,
                )
                .await?;
        }
        Ok(updated)
    }

    async fn get(&self, push_id: &str, now_ms: i64) -> StoreResult<Option<Receipt>> {
        Ok(self.memory.get(push_id, now_ms))
    }

    async fn kept(&self, push_id: &str, now_ms: i64) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.memory.kept(push_id, now_ms))
    }

    fn sweep(&self, now_ms: i64) {
        self.memory.sweep(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signed::receipt::lifecycle::tests::{up, A, B};
    use crate::signed::receipt::lifecycle::{Claim, Guard, State};

    #[test]
    fn memory_receipts_expire() {
        let m = MemoryReceipts::default();
        let t = vec!["a".to_owned()];
        let new = |hash, claim: Claim<'static>| NewReceipt {
            push_id: "p",
            hash,
            signer: "k",
            topic: "t",
            targets: &t,
            ttl_ms: 100,
            claim,
            kept: None,
        };
        assert!(matches!(m.begin(&new("h", A), 0), Begun::New(_)));
        assert!(m.get("p", 99).is_some());
        assert!(m.get("p", 100).is_none());
        let updates = [up("a", State::Delivered)];
        let changes = Changes {
            push_id: "p",
            updates: &updates,
            guard: Guard::Always,
            ttl_ms: 100,
        };
        assert_eq!(m.update(&changes, 100).0, Updated::Gone);
        // After expiry the id is new again.
        assert!(matches!(m.begin(&new("other", B), 100), Begun::New(_)));
    }
}
