//! The retry queue: notifications whose first APNs attempt failed transiently (connection
//! error, timeout, 5xx, 429) wait here and are retried with exponential backoff and jitter
//! until APNs takes them or their staleness window (acceptance + 600 s) closes.
//!
//! With Redis the queue is shared: any replica's worker may deliver any item. A worker
//! *claims* due items by pushing their due time forward by a lease; an item whose replica
//! died mid-attempt simply becomes due again when the lease runs out, so `kill -9` loses
//! nothing. The queue is sharded over [`SHARDS`] hash tags so it spreads over a Redis
//! Cluster. Items are sealed with AES-256-GCM under a key derived from the APNs auth key
//! every replica holds, so a copy of the Redis data reveals neither device tokens nor
//! ciphertexts. The in-process queue has the same semantics for a single replica.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use fred::prelude::*;
use fred::types::scripts::Script;
use serde::{Deserialize, Serialize};

use crate::policy::{Ticket, TicketKind};
use crate::store::StoreError;

/// Queue shards (Redis hash tags).
pub const SHARDS: usize = 8;

/// One notification waiting for another attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The `apns-id`, the same on every attempt; also the queue id.
    pub id: String,
    /// The device token.
    pub device: String,
    /// `apns-collapse-id`, and the alert's coalescing key.
    pub collapse_id: String,
    /// The flap key the forward was counted under.
    pub flap_key: String,
    /// `apns-priority` (10 or 5).
    pub priority: u8,
    /// `apns-expiration`: acceptance + 600 s, Unix seconds; also when retrying stops.
    pub expiration_s: u64,
    /// The APNs body.
    pub body: String,
    /// The environment to try first (`p` or `s`), as at acceptance.
    pub env: String,
    /// Attempts made so far (the first, inline, included).
    pub attempts: u32,
    /// The forward record, for the rollback if the item finally fails.
    pub ticket_at_ms: i64,
    /// 0 counted, 1 counted and cooled, 2 reminder.
    pub ticket_kind: u8,
    /// The previous reminder instant, for reminders.
    pub ticket_prev_ms: i64,
}

impl Pending {
    /// The forward record this item holds.
    pub fn ticket(&self) -> Ticket {
        Ticket {
            at_ms: self.ticket_at_ms,
            kind: match self.ticket_kind {
                0 => TicketKind::Counted { cooled: false },
                1 => TicketKind::Counted { cooled: true },
                _ => TicketKind::Reminder {
                    prev_reminder_ms: self.ticket_prev_ms,
                },
            },
        }
    }

    /// Encodes a ticket into the item's fields.
    pub fn ticket_fields(t: &Ticket) -> (i64, u8, i64) {
        match t.kind {
            TicketKind::Counted { cooled } => (t.at_ms, u8::from(cooled), 0),
            TicketKind::Reminder { prev_reminder_ms } => (t.at_ms, 2, prev_reminder_ms),
        }
    }

    /// When retrying stops, ms.
    pub fn expires_ms(&self) -> i64 {
        self.expiration_s as i64 * 1000
    }
}

/// Backoff before attempt `attempts + 1`: 1 s doubling to at most 60 s, with "equal jitter"
/// (half fixed, half random) so replicas retrying after one outage do not stampede.
pub fn backoff_ms(attempts: u32, random: u32) -> i64 {
    let base = 1000i64
        .saturating_mul(1i64 << attempts.saturating_sub(1).min(6))
        .min(60_000);
    base / 2 + i64::from(random) % (base / 2 + 1)
}

/// A random u32 from the system generator.
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    u32::from_le_bytes(b)
}

/// The in-process queue.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    inner: Mutex<MemInner>,
}

#[derive(Debug, Default)]
struct MemInner {
    seq: u64,
    due: BTreeMap<(i64, u64), String>,
    items: HashMap<String, ((i64, u64), Pending)>,
}

impl MemoryQueue {
    /// Adds or replaces an item, due at `due_ms`.
    pub fn put(&self, item: Pending, due_ms: i64) {
        let mut q = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        q.seq += 1;
        let slot = (due_ms, q.seq);
        if let Some((old, _)) = q.items.remove(&item.id) {
            q.due.remove(&old);
        }
        q.due.insert(slot, item.id.clone());
        q.items.insert(item.id.clone(), (slot, item));
    }

    /// Claims up to `max` items due at `now_ms`; each becomes due again at `lease_until_ms`
    /// unless acknowledged or put back first.
    pub fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> Vec<Pending> {
        let mut q = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<String> = q
            .due
            .range(..=(now_ms, u64::MAX))
            .take(max)
            .map(|(_, id)| id.clone())
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            q.seq += 1;
            let slot = (lease_until_ms, q.seq);
            let Some((old, item)) = q.items.remove(&id) else {
                continue;
            };
            q.due.remove(&old);
            q.due.insert(slot, id.clone());
            out.push(item.clone());
            q.items.insert(id, (slot, item));
        }
        out
    }

    /// Removes an item.
    pub fn ack(&self, id: &str) {
        let mut q = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((slot, _)) = q.items.remove(id) {
            q.due.remove(&slot);
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .items
            .len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const PUT_LUA: &str = include_str!("queue/put.lua");
const CLAIM_LUA: &str = include_str!("queue/claim.lua");
const ACK_LUA: &str = include_str!("queue/ack.lua");

/// The shared queue in Redis.
pub struct RedisQueue {
    pool: Pool,
    prefix: String,
    key: ring::aead::LessSafeKey,
    put: Script,
    claim: Script,
    ack: Script,
}

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueue")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn err(e: fred::error::Error) -> StoreError {
    StoreError::Redis(e.to_string())
}

/// Derives the queue's sealing key from the APNs auth key (every replica holds the same).
pub fn sealing_key(secret: &[u8]) -> ring::aead::LessSafeKey {
    struct Len;
    impl ring::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            32
        }
    }
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"sealrelay-retry-queue-v1");
    let prk = salt.extract(secret);
    let okm = prk
        .expand(&[b"aes-256-gcm"], Len)
        .expect("32 bytes is a valid length");
    let mut key = [0u8; 32];
    okm.fill(&mut key).expect("32 bytes is a valid length");
    ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &key).expect("32-byte key"),
    )
}

impl RedisQueue {
    /// A queue on this pool, under this key prefix, sealed with `key`.
    pub fn new(pool: Pool, prefix: &str, key: ring::aead::LessSafeKey) -> Self {
        Self {
            pool,
            prefix: prefix.to_owned(),
            key,
            put: Script::from_lua(PUT_LUA),
            claim: Script::from_lua(CLAIM_LUA),
            ack: Script::from_lua(ACK_LUA),
        }
    }

    fn keys(&self, shard: usize) -> Vec<String> {
        vec![
            format!("{}{{q{shard}}}:due", self.prefix),
            format!("{}{{q{shard}}}:items", self.prefix),
        ]
    }

    fn shard_of(id: &str) -> usize {
        let d = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
        d.as_ref()[0] as usize % SHARDS
    }

    fn seal(&self, item: &Pending) -> Vec<u8> {
        let mut nonce = [0u8; 12];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
        let mut data = serde_json::to_vec(item).expect("plain struct serializes");
        self.key
            .seal_in_place_append_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(item.id.as_bytes()),
                &mut data,
            )
            .expect("in-memory sealing cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        out
    }

    fn open(&self, id: &str, blob: &[u8]) -> Option<Pending> {
        if blob.len() < 12 {
            return None;
        }
        let (nonce, rest) = blob.split_at(12);
        let mut data = rest.to_vec();
        let nonce = ring::aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain = self
            .key
            .open_in_place(nonce, ring::aead::Aad::from(id.as_bytes()), &mut data)
            .ok()?;
        serde_json::from_slice(plain).ok()
    }

    /// Adds or replaces an item, due at `due_ms`.
    pub async fn put(&self, item: &Pending, due_ms: i64) -> Result<(), StoreError> {
        let shard = Self::shard_of(&item.id);
        let args: Vec<Value> = vec![
            item.id.as_str().into(),
            Value::Bytes(self.seal(item).into()),
            due_ms.into(),
        ];
        let _: i64 = self
            .put
            .evalsha_with_reload(self.pool.next(), self.keys(shard), args)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// Claims up to `max` due items of one shard.
    pub async fn claim(
        &self,
        shard: usize,
        now_ms: i64,
        lease_until_ms: i64,
        max: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        let args: Vec<Value> = vec![now_ms.into(), lease_until_ms.into(), (max as i64).into()];
        let reply: Vec<Value> = self
            .claim
            .evalsha_with_reload(self.pool.next(), self.keys(shard), args)
            .await
            .map_err(err)?;
        let mut out = Vec::new();
        for pair in reply.chunks(2) {
            let (Some(id), Some(blob)) = (pair.first(), pair.get(1)) else {
                continue;
            };
            let id = match id {
                Value::String(s) => s.to_string(),
                Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                _ => continue,
            };
            let blob: &[u8] = match blob {
                Value::Bytes(b) => b,
                Value::String(s) => s.as_bytes(),
                _ => continue,
            };
            match self.open(&id, blob) {
                Some(item) => out.push(item),
                None => {
                    // Sealed under another key (the APNs key was rotated): it cannot be
                    // delivered by this deployment; drop it rather than retry forever.
                    tracing::warn!("dropping a queued item this replica cannot open");
                    self.ack(&id).await?;
                }
            }
        }
        Ok(out)
    }

    /// Removes an item.
    pub async fn ack(&self, id: &str) -> Result<(), StoreError> {
        let shard = Self::shard_of(id);
        let _: i64 = self
            .ack
            .evalsha_with_reload(self.pool.next(), self.keys(shard), vec![Value::from(id)])
            .await
            .map_err(err)?;
        Ok(())
    }

    /// Items waiting, over all shards.
    pub async fn depth(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        for shard in 0..SHARDS {
            let c: i64 = self
                .pool
                .next()
                .zcard(self.keys(shard)[0].clone())
                .await
                .map_err(err)?;
            n += c as usize;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str) -> Pending {
        Pending {
            id: id.into(),
            device: "ab".repeat(32),
            collapse_id: "c".repeat(32),
            flap_key: "c".repeat(32),
            priority: 10,
            expiration_s: 2_000_000,
            body: "{}".into(),
            env: "p".into(),
            attempts: 1,
            ticket_at_ms: 5,
            ticket_kind: 2,
            ticket_prev_ms: 3,
        }
    }

    #[test]
    fn backoff_doubles_to_a_minute_with_jitter() {
        assert_eq!(backoff_ms(1, 0), 500);
        assert_eq!(backoff_ms(1, 500), 1000);
        assert_eq!(backoff_ms(2, 0), 1000);
        assert_eq!(backoff_ms(3, 0), 2000);
        assert_eq!(backoff_ms(30, 0), 30_000);
        assert_eq!(backoff_ms(30, 30_000), 60_000);
        for a in 0..40 {
            for r in [0, 1, 7919, u32::MAX] {
                let b = backoff_ms(a, r);
                assert!((500..=60_000).contains(&b), "{a} {r} {b}");
            }
        }
    }

    #[test]
    fn memory_queue_claims_due_items_and_leases_them() {
        let q = MemoryQueue::default();
        q.put(item("a"), 100);
        q.put(item("b"), 200);
        assert!(q.claim(99, 1000, 10).is_empty());
        let got = q.claim(150, 1000, 10);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "a");
        // Leased: not due again until the lease ends.
        assert_eq!(
            q.claim(500, 1000, 10)
                .iter()
                .map(|i| i.id.as_str())
                .collect::<Vec<_>>(),
            vec!["b"]
        );
        assert!(q.claim(999, 2000, 10).is_empty());
        // The holder died: both come back after their leases.
        assert_eq!(q.claim(1000, 3000, 10).len(), 2);
        q.ack("a");
        q.put(item("b"), 5000);
        assert_eq!(q.len(), 1);
        assert!(q.claim(4999, 9000, 10).is_empty());
        assert_eq!(q.claim(5000, 9000, 10).len(), 1);
    }

    #[test]
    fn sealed_items_round_trip_and_resist_tampering() {
        let pool = Builder::default_centralized().build_pool(1).unwrap();
        let q = RedisQueue::new(pool, "t:", sealing_key(b"secret"));
        let blob = q.seal(&item("x"));
        assert_eq!(q.open("x", &blob), Some(item("x")));
        assert!(q.open("y", &blob).is_none(), "bound to its id");
        let mut bad = blob.clone();
        bad[20] ^= 1;
        assert!(q.open("x", &bad).is_none());
        let other = RedisQueue::new(
            Builder::default_centralized().build_pool(1).unwrap(),
            "t:",
            sealing_key(b"other"),
        );
        assert!(other.open("x", &blob).is_none());
        assert!(
            !String::from_utf8_lossy(&blob).contains("abab"),
            "token not in the clear"
        );
        assert_eq!(
            item("x").ticket(),
            Ticket {
                at_ms: 5,
                kind: TicketKind::Reminder {
                    prev_reminder_ms: 3
                }
            }
        );
    }
}
