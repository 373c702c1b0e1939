//! The retry queue's vocabulary, shared by the in-process queue ([`super::memory`])
//! and the Redis queue ([`super::redis`]): the item, the claim that fences it, the
//! backoff, and the sealing of items at rest.
//!
//! Notifications whose first APNs attempt failed transiently (connection error, timeout,
//! 5xx, 429) wait here and are retried with exponential backoff and jitter until APNs takes
//! them or their staleness window (acceptance + 600 s) closes.
//!
//! **Claims are fenced.** A worker *claims* due items by pushing their due time forward by
//! a lease; each claim also writes a fresh fencing token, and `ack` (delete) and `put`
//! (reschedule) by a worker act only while its token is the current one. So a replica whose
//! lease ran out (a stall, a long GC-like pause, a partition) can neither delete nor
//! resurrect an item another replica has claimed since. An item whose replica died
//! mid-attempt simply becomes due again when the lease runs out, so `kill -9` loses nothing.
//!
//! **Sealed at rest.** Items hold device tokens and ciphertexts, so in Redis they are sealed
//! with AES-256-GCM under a key every replica derives the same way: from `RELAY_QUEUE_KEY`
//! when set, else from the APNs auth key's private scalar (not its PEM text, so replicas
//! given the same key in different encodings agree). An item that cannot be opened is never
//! dropped silently: it is moved aside, counted, and logged with the reason.

use crate::device::Environment;
use crate::policy::{Ticket, TicketKind, STALENESS_S};
use crate::store::error::DecodeKind;

/// One notification waiting for another attempt. Stored (sealed) as [`wire::Pending`], whose
/// field names and codes are the stored format; [`Pending::decode`] is the only way back.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The environment to try next: the one the last attempt ended on, so a retry never
    /// goes back to an environment that rejected the token.
    pub env: Environment,
    /// Attempts made so far (the first, inline, included).
    pub attempts: u32,
    /// The forward record, for the rollback if the item finally fails.
    pub ticket: Ticket,
    /// `apns-topic` when the push names its own (signed pushes); `None`: `APNS_TOPIC`.
    pub topic: Option<String>,
    /// The front-end's reference to what this item settles (signed pushes: the push and
    /// the target's key, 16 hex of the token's hash), if any; stored as `receipt`.
    pub settles: Option<(String, String)>,
}

/// The stored form of a retry item: these names and codes are what the queue holds, so
/// items written by an older version still read.
pub mod wire {
    use serde::{Deserialize, Serialize};

    /// A retry item as stored (JSON, then sealed).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Pending {
        /// See [`super::Pending::id`].
        pub id: String,
        /// See [`super::Pending::device`].
        pub device: String,
        /// See [`super::Pending::collapse_id`].
        pub collapse_id: String,
        /// See [`super::Pending::flap_key`].
        pub flap_key: String,
        /// See [`super::Pending::priority`].
        pub priority: u8,
        /// See [`super::Pending::expiration_s`].
        pub expiration_s: u64,
        /// See [`super::Pending::body`].
        pub body: String,
        /// `p` or `s`.
        pub env: String,
        /// See [`super::Pending::attempts`].
        pub attempts: u32,
        /// The ticket's instant.
        pub ticket_at_ms: i64,
        /// 0 counted, 1 counted and cooled, 2 reminder.
        pub ticket_kind: u8,
        /// The previous reminder instant, for reminders.
        pub ticket_prev_ms: i64,
        /// See [`super::Pending::topic`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub topic: Option<String>,
        /// See [`super::Pending::settles`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub receipt: Option<(String, String)>,
    }
}

impl Pending {
    /// The forward record this item holds.
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// The stored form.
    pub fn encode(&self) -> wire::Pending {
        let (ticket_kind, ticket_prev_ms) = match self.ticket.kind {
            TicketKind::Counted { cooled } => (u8::from(cooled), 0),
            TicketKind::Reminder { prev_reminder_ms } => (2, prev_reminder_ms),
        };
        wire::Pending {
            id: self.id.clone(),
            device: self.device.clone(),
            collapse_id: self.collapse_id.clone(),
            flap_key: self.flap_key.clone(),
            priority: self.priority,
            expiration_s: self.expiration_s,
            body: self.body.clone(),
            env: self.env.code().to_owned(),
            attempts: self.attempts,
            ticket_at_ms: self.ticket.at_ms,
            ticket_kind,
            ticket_prev_ms,
            topic: self.topic.clone(),
            receipt: self.settles.clone(),
        }
    }

    /// Inverse of [`Pending::encode`]; `None` for an environment code or a ticket kind this
    /// version does not know (never read as a default).
    pub fn decode(w: wire::Pending) -> Option<Self> {
        let env = Environment::from_code(&w.env)?;
        let kind = match w.ticket_kind {
            0 => TicketKind::Counted { cooled: false },
            1 => TicketKind::Counted { cooled: true },
            2 => TicketKind::Reminder {
                prev_reminder_ms: w.ticket_prev_ms,
            },
            _ => return None,
        };
        Some(Self {
            id: w.id,
            device: w.device,
            collapse_id: w.collapse_id,
            flap_key: w.flap_key,
            priority: w.priority,
            expiration_s: w.expiration_s,
            body: w.body,
            env,
            attempts: w.attempts,
            ticket: Ticket {
                at_ms: w.ticket_at_ms,
                kind,
            },
            topic: w.topic,
            settles: w.receipt,
        })
    }

    /// When retrying stops, ms.
    pub fn expires_ms(&self) -> i64 {
        self.expiration_s as i64 * 1000
    }

    /// When the notification was accepted, ms.
    pub fn accepted_ms(&self) -> i64 {
        self.expires_ms() - STALENESS_S as i64 * 1000
    }
}

/// A claimed item and the fencing token of the claim: `ack` and `put` by the claimer act
/// only while this token is the item's current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The item.
    pub item: Pending,
    /// The claim's fencing token (never 0; 0 means "not a claim" in `put`).
    pub fence: u64,
}

/// What a fenced write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Done.
    Done,
    /// The claim is no longer current (another replica claimed the item since, or it is
    /// gone): nothing was changed.
    Stale,
}

/// How many items one queue shard holds at most; beyond it new items are refused (and
/// answered as the APNs failure they are), so a long outage cannot grow Redis without bound.
pub const SHARD_CAP: usize = 50_000;

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

/// The queue's sealing key: 32 bytes every replica derives the same way.
#[derive(Clone)]
pub struct QueueKey([u8; 32]);

impl std::fmt::Debug for QueueKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueKey([redacted])")
    }
}

impl QueueKey {
    /// Derives the key from secret material (the APNs key's private scalar, or the bytes of
    /// `RELAY_QUEUE_KEY`) with HKDF-SHA256.
    pub fn derive(material: &[u8]) -> Self {
        struct Len;
        impl ring::hkdf::KeyType for Len {
            fn len(&self) -> usize {
                32
            }
        }
        let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"sealrelay-retry-queue-v1");
        let prk = salt.extract(material);
        let okm = prk
            .expand(&[b"aes-256-gcm"], Len)
            .expect("32 bytes is a valid length");
        let mut key = [0u8; 32];
        okm.fill(&mut key).expect("32 bytes is a valid length");
        Self(key)
    }

    fn aead(&self) -> ring::aead::LessSafeKey {
        ring::aead::LessSafeKey::new(
            ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &self.0).expect("32-byte key"),
        )
    }
}

/// Seals and opens queue items under a [`QueueKey`], bound to the item's id.
pub struct Sealer {
    key: ring::aead::LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A sealer for this key.
    pub fn new(key: &QueueKey) -> Self {
        Self { key: key.aead() }
    }

    /// Nonce, then ciphertext and tag; the id is the associated data.
    pub fn seal(&self, item: &Pending) -> Vec<u8> {
        let data = serde_json::to_vec(&item.encode()).expect("plain struct serializes");
        self.seal_bytes(item.id.as_bytes(), data)
    }

    /// `data` sealed, bound to `aad` (whatever names it where it is kept): nonce, then
    /// ciphertext and tag.
    pub fn seal_bytes(&self, aad: &[u8], mut data: Vec<u8>) -> Vec<u8> {
        let mut nonce = [0u8; 12];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
        self.key
            .seal_in_place_append_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(aad),
                &mut data,
            )
            .expect("in-memory sealing cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        out
    }

    /// Inverse of [`Sealer::seal_bytes`]; `None` when sealed under another key, bound to
    /// something else, or damaged.
    pub fn open_bytes(&self, aad: &[u8], blob: &[u8]) -> Option<Vec<u8>> {
        if blob.len() < 12 {
            return None;
        }
        let (nonce, rest) = blob.split_at(12);
        let mut data = rest.to_vec();
        let nonce = ring::aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain = self
            .key
            .open_in_place(nonce, ring::aead::Aad::from(aad), &mut data)
            .ok()?
            .len();
        data.truncate(plain);
        Some(data)
    }

    /// Opens a sealed item; `None` when it was sealed under another key, for another id,
    /// or damaged, or holds a code this version does not know (counted as a
    /// [`DecodeKind::Pending`]).
    pub fn open(&self, id: &str, blob: &[u8]) -> Option<Pending> {
        let plain = self.open_bytes(id.as_bytes(), blob)?;
        let stored: wire::Pending = serde_json::from_slice(&plain).ok()?;
        let item = Pending::decode(stored);
        if item.is_none() {
            DecodeKind::Pending.count();
        }
        item
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn item(id: &str) -> Pending {
        Pending {
            id: id.into(),
            device: "ab".repeat(32),
            collapse_id: "c".repeat(32),
            flap_key: "c".repeat(32),
            priority: 10,
            expiration_s: 2_000_000,
            body: "{}".into(),
            env: Environment::Production,
            attempts: 1,
            ticket: Ticket {
                at_ms: 5,
                kind: TicketKind::Reminder {
                    prev_reminder_ms: 3,
                },
            },
            topic: None,
            settles: None,
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
    fn sealed_items_round_trip_and_resist_tampering() {
        let s = Sealer::new(&QueueKey::derive(b"secret"));
        let blob = s.seal(&item("x"));
        assert_eq!(s.open("x", &blob), Some(item("x")));
        assert!(s.open("y", &blob).is_none(), "bound to its id");
        let mut bad = blob.clone();
        bad[20] ^= 1;
        assert!(s.open("x", &bad).is_none());
        assert!(Sealer::new(&QueueKey::derive(b"other"))
            .open("x", &blob)
            .is_none());
        assert!(
            !String::from_utf8_lossy(&blob).contains("abab"),
            "token not in the clear"
        );
        assert!(s.open("x", &blob[..5]).is_none());
        assert_eq!(
            item("x").ticket(),
            Ticket {
                at_ms: 5,
                kind: TicketKind::Reminder {
                    prev_reminder_ms: 3
                }
            }
        );
        assert_eq!(
            format!("{:?}", QueueKey::derive(b"k")),
            "QueueKey([redacted])"
        );
    }

    #[test]
    fn the_stored_form_keeps_its_codes_and_refuses_unknown_ones() {
        let w = item("x").encode();
        assert_eq!(
            (w.env.as_str(), w.ticket_kind, w.ticket_prev_ms),
            ("p", 2, 3)
        );
        let json = serde_json::to_value(&w).unwrap();
        assert_eq!(json["env"], "p");
        assert_eq!(json["ticket_kind"], 2);
        assert!(json.get("topic").is_none());
        assert_eq!(Pending::decode(w.clone()), Some(item("x")));
        let mut cooled = item("x");
        cooled.env = Environment::Sandbox;
        cooled.ticket.kind = TicketKind::Counted { cooled: true };
        let cw = cooled.encode();
        assert_eq!((cw.env.as_str(), cw.ticket_kind), ("s", 1));
        assert_eq!(Pending::decode(cw), Some(cooled));
        let mut bad_env = w.clone();
        bad_env.env = "x".into();
        assert_eq!(Pending::decode(bad_env), None);
        let mut bad_kind = w;
        bad_kind.ticket_kind = 3;
        assert_eq!(Pending::decode(bad_kind), None);
    }

    #[test]
    fn acceptance_is_the_expiration_less_the_staleness_window() {
        assert_eq!(item("x").accepted_ms(), 2_000_000_000 - 600_000);
    }
}
