//! Receipts of signed pushes as the store keeps them, and the rules every change follows:
//! a pure state machine ([`begin`], [`update`]) that the in-process store runs under a lock
//! and `receipt_begin.lua` / `receipt_update.lua` mirror line for line (a differential test
//! binds them).
//!
//! A receipt names devices only by hash (16 hex of SHA-256 of the token) and holds no token
//! and no ciphertext. Every change is an event with a sequence that starts at 1 and only
//! grows: `accepted` when the push is first seen, `target` when a target's state changes,
//! `settled` once no target is `accepted` or `queued`. A target's state moves from
//! `accepted` to its first outcome; from `queued` only to `delivered`, `rejected`, `failed`
//! or `expired`; every other state is final.
//!
//! [`ReceiptStore`] is what the relay uses: one [`ReceiptBackend`], in process
//! ([`InProcessReceipts`], here) or in Redis (`store::redis::signed`). Both publish a
//! change's new events on the push's channel ([`events_channel`]) from inside the change
//! itself: the in-process backend under its lock's result, the Redis one from
//! `receipt_update.lua`, so a subscriber sees the same messages on either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::common::{Link, StoreError, StoreOp};
use super::fanout::{Channel, Fanout};

/// A target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Not decided yet.
    Accepted,
    /// APNs answered 200 (nothing else is ever reported as delivered).
    Delivered,
    /// A duplicate within the dedup window.
    Coalesced,
    /// Held by flap suppression.
    Suppressed,
    /// The device's bucket is empty (with `retryAfterS`).
    RateLimited,
    /// A transient APNs failure: the retry queue owns it.
    Queued,
    /// The token is dead.
    Rejected,
    /// Refused for another reason (with `failure`).
    Failed,
    /// The staleness window closed while queued.
    Expired,
    /// The relay runs in dry run: logged, not sent.
    DryRun,
}

/// Every state, for metrics registered at start-up.
pub const STATES: &[State] = &[
    State::Accepted,
    State::Delivered,
    State::Coalesced,
    State::Suppressed,
    State::RateLimited,
    State::Queued,
    State::Rejected,
    State::Failed,
    State::Expired,
    State::DryRun,
];

impl State {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Accepted => "accepted",
            State::Delivered => "delivered",
            State::Coalesced => "coalesced",
            State::Suppressed => "suppressed",
            State::RateLimited => "rate_limited",
            State::Queued => "queued",
            State::Rejected => "rejected",
            State::Failed => "failed",
            State::Expired => "expired",
            State::DryRun => "dry_run",
        }
    }

    /// Inverse of [`State::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        STATES.iter().copied().find(|st| st.as_str() == s)
    }

    /// Whether the push waits for this target (`accepted` or `queued`).
    pub fn pending(self) -> bool {
        matches!(self, State::Accepted | State::Queued)
    }

    /// Whether a target in `self` may move to `to`.
    pub fn may_become(self, to: State) -> bool {
        match self {
            State::Accepted => to != State::Accepted,
            State::Queued => matches!(
                to,
                State::Delivered | State::Rejected | State::Failed | State::Expired
            ),
            _ => false,
        }
    }
}

/// One target of a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// 16 hex of SHA-256 of the device token.
    pub key: String,
    /// Its state.
    pub state: State,
    /// When it last changed, ms.
    pub updated_ms: i64,
    /// Extra members of its JSON object (`"retryAfterS":2`, `"failure":{...}`), already
    /// JSON; empty for none. Built by the relay from bounded values only.
    pub detail: String,
}

/// What an event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The push was accepted.
    Accepted,
    /// A target changed state.
    Target,
    /// No target is pending any more.
    Settled,
}

impl EventKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Accepted => "accepted",
            EventKind::Target => "target",
            EventKind::Settled => "settled",
        }
    }
}

/// One event of a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// 1, 2, ...: only grows.
    pub sequence: u64,
    /// What happened.
    pub kind: EventKind,
    /// When, ms.
    pub at_ms: i64,
    /// The target, for `target` events.
    pub target: Option<(String, State)>,
}

impl Event {
    /// The compact form the store keeps and the fan-out carries:
    /// `<sequence>|<kind>|<at_ms>|<target>|<state>`.
    pub fn encode(&self) -> String {
        let (t, s) = match &self.target {
            Some((t, s)) => (t.as_str(), s.as_str()),
            None => ("", ""),
        };
        format!(
            "{}|{}|{}|{}|{}",
            self.sequence,
            self.kind.as_str(),
            self.at_ms,
            t,
            s
        )
    }

    /// Inverse of [`Event::encode`].
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split('|');
        let sequence = parts.next()?.parse().ok()?;
        let kind = match parts.next()? {
            "accepted" => EventKind::Accepted,
            "target" => EventKind::Target,
            "settled" => EventKind::Settled,
            _ => return None,
        };
        let at_ms = parts.next()?.parse().ok()?;
        let target = match (parts.next()?, parts.next()?) {
            ("", "") => None,
            (t, s) => Some((t.to_owned(), State::parse(s)?)),
        };
        parts.next().is_none().then_some(Self {
            sequence,
            kind,
            at_ms,
            target,
        })
    }
}

/// A receipt as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The push id (the request id).
    pub push_id: String,
    /// `sha256:<hex>` of the canonical request.
    pub hash: String,
    /// The signer that created it.
    pub signer: String,
    /// The APNs topic.
    pub topic: String,
    /// Created, ms.
    pub created_ms: i64,
    /// Last change, ms.
    pub updated_ms: i64,
    /// No target pending any more.
    pub settled: bool,
    /// The targets, in request order.
    pub targets: Vec<Target>,
    /// Every event, in sequence order.
    pub events: Vec<Event>,
}

/// A change of one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// 16 hex of SHA-256 of the device token.
    pub target: String,
    /// The new state.
    pub state: State,
    /// Extra JSON members (see [`Target::detail`]).
    pub detail: String,
}

/// What [`begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// A new push: this receipt was created.
    New(Receipt),
    /// The same request again (same hash): the receipt as it stands.
    Replay(Receipt),
    /// The id is taken by another request.
    Conflict,
}

/// The receipt a new push starts with: every target `accepted`, event 1 `accepted`.
pub fn begin(
    existing: Option<&Receipt>,
    push_id: &str,
    hash: &str,
    signer: &str,
    topic: &str,
    targets: &[String],
    now_ms: i64,
) -> Begun {
    if let Some(r) = existing {
        return if r.hash == hash {
            Begun::Replay(r.clone())
        } else {
            Begun::Conflict
        };
    }
    Begun::New(Receipt {
        push_id: push_id.to_owned(),
        hash: hash.to_owned(),
        signer: signer.to_owned(),
        topic: topic.to_owned(),
        created_ms: now_ms,
        updated_ms: now_ms,
        settled: false,
        targets: targets
            .iter()
            .map(|t| Target {
                key: t.clone(),
                state: State::Accepted,
                updated_ms: now_ms,
                detail: String::new(),
            })
            .collect(),
        events: vec![Event {
            sequence: 1,
            kind: EventKind::Accepted,
            at_ms: now_ms,
            target: None,
        }],
    })
}

/// Applies target changes that the state machine allows (others are ignored: a late or
/// repeated settlement changes nothing), appends their events and, once nothing is pending,
/// the `settled` event. Returns the new events.
pub fn update(r: &mut Receipt, updates: &[Update], now_ms: i64) -> Vec<Event> {
    let mut new = Vec::new();
    let mut next = r.events.last().map_or(1, |e| e.sequence + 1);
    for u in updates {
        let Some(t) = r.targets.iter_mut().find(|t| t.key == u.target) else {
            continue;
        };
        if !t.state.may_become(u.state) {
            continue;
        }
        t.state = u.state;
        t.updated_ms = now_ms;
        t.detail = u.detail.clone();
        new.push(Event {
            sequence: next,
            kind: EventKind::Target,
            at_ms: now_ms,
            target: Some((u.target.clone(), u.state)),
        });
        next += 1;
    }
    if !r.settled && r.targets.iter().all(|t| !t.state.pending()) {
        r.settled = true;
        new.push(Event {
            sequence: next,
            kind: EventKind::Settled,
            at_ms: now_ms,
            target: None,
        });
    }
    if !new.is_empty() {
        r.updated_ms = r.updated_ms.max(now_ms);
        r.events.extend(new.iter().cloned());
    }
    new
}

/// Receipts in process memory, each until its TTL passes.
#[derive(Debug, Default)]
pub struct MemoryReceipts {
    map: Mutex<HashMap<String, (Receipt, i64)>>,
}

impl MemoryReceipts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Receipt, i64)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`begin`]; the receipt is kept until `now_ms + ttl_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Begun {
        let mut map = self.lock();
        let existing = map
            .get(push_id)
            .filter(|(_, until)| now_ms < *until)
            .map(|(r, _)| r);
        let b = begin(existing, push_id, hash, signer, topic, targets, now_ms);
        if let Begun::New(r) = &b {
            map.insert(push_id.to_owned(), (r.clone(), now_ms + ttl_ms));
        }
        b
    }

    /// See [`update`]; `None` when the receipt is gone.
    pub fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Option<(u64, Vec<Event>)> {
        let mut map = self.lock();
        let (r, until) = map.get_mut(push_id).filter(|(_, until)| now_ms < *until)?;
        let before = r.events.last().map_or(0, |e| e.sequence);
        let new = update(r, updates, now_ms);
        if !new.is_empty() {
            *until = now_ms + ttl_ms;
        }
        Some((before, new))
    }

    /// The receipt, while kept.
    pub fn get(&self, push_id: &str, now_ms: i64) -> Option<Receipt> {
        self.lock()
            .get(push_id)
            .filter(|(_, until)| now_ms < *until)
            .map(|(r, _)| r.clone())
    }

    /// Forgets receipts past their TTL.
    pub fn sweep(&self, now_ms: i64) {
        self.lock().retain(|_, (_, until)| now_ms < *until);
    }
}

/// The channel a push's receipt events are published on, under the store's key prefix.
pub fn events_channel(prefix: &str, push_id: &str) -> Channel {
    Channel::sharded(format!("{prefix}{{r:{push_id}}}:events"))
}

/// The events a change published, as the fan-out carries them: one [`Event::encode`] a line.
pub fn events_message(events: &[Event]) -> String {
    let lines: Vec<String> = events.iter().map(Event::encode).collect();
    lines.join("\n")
}

/// Where receipts live: in process or in Redis.
#[async_trait::async_trait]
pub trait ReceiptBackend: Send + Sync + std::fmt::Debug {
    /// Creates a push's receipt, or finds the one its id has (see [`begin`]).
    #[allow(clippy::too_many_arguments)]
    async fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Begun, StoreError>;

    /// Applies target changes (see [`update`]) and publishes the new events; the receipt's
    /// last event sequence before the changes, `None` when the receipt is gone.
    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Option<u64>, StoreError>;

    /// A push's receipt, while kept.
    async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError>;

    /// Forgets receipts past their TTL (the in-process backend; Redis expires keys itself).
    fn sweep(&self, _now_ms: i64) {}
}

/// Receipts in process, publishing their events on the in-process fan-out.
#[derive(Debug)]
pub struct InProcessReceipts {
    receipts: MemoryReceipts,
    fanout: Fanout,
}

impl InProcessReceipts {
    /// Receipts whose events go to `fanout`.
    pub fn new(fanout: Fanout) -> Self {
        Self {
            receipts: MemoryReceipts::default(),
            fanout,
        }
    }
}

#[async_trait::async_trait]
impl ReceiptBackend for InProcessReceipts {
    async fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Begun, StoreError> {
        Ok(self
            .receipts
            .begin(push_id, hash, signer, topic, targets, now_ms, ttl_ms))
    }

    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        let Some((before, new)) = self.receipts.update(push_id, updates, now_ms, ttl_ms) else {
            return Ok(None);
        };
        if !new.is_empty() {
            self.fanout
                .publish(
                    &events_channel("", push_id),
                    events_message(&new).as_bytes(),
                    now_ms,
                )
                .await?;
        }
        Ok(Some(before))
    }

    async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError> {
        Ok(self.receipts.get(push_id, now_ms))
    }

    fn sweep(&self, now_ms: i64) {
        self.receipts.sweep(now_ms);
    }
}

/// The signed-push API's receipts. They need the shared store for their guarantees (a
/// replay must never send twice), so they never fall back to a replica's memory: while
/// degraded they fail, and the API answers 503. Without Redis (one replica) they live in
/// process.
#[derive(Debug)]
pub struct ReceiptStore {
    backend: Box<dyn ReceiptBackend>,
    /// The link to Redis, `None` in process.
    link: Option<Arc<Link>>,
    prefix: String,
}

impl ReceiptStore {
    /// Receipts on `backend`; `link` and `prefix` when it is Redis.
    pub(crate) fn new(
        backend: Box<dyn ReceiptBackend>,
        link: Option<Arc<Link>>,
        prefix: &str,
    ) -> Self {
        Self {
            backend,
            link,
            prefix: prefix.to_owned(),
        }
    }

    /// The channel a push's receipt events are published on.
    pub fn events_channel(&self, push_id: &str) -> Channel {
        events_channel(&self.prefix, push_id)
    }

    /// Creates a push's receipt, or finds the one its id has (see [`begin`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Begun, StoreError> {
        let f = self
            .backend
            .begin(push_id, hash, signer, topic, targets, now_ms, ttl_ms);
        Link::shared(self.link.as_deref(), StoreOp::ReceiptBegin, f).await
    }

    /// Applies target changes (see [`update`]) and publishes the new events to every
    /// replica: the receipt's last event sequence before the changes (a caller holding the
    /// receipt at that sequence applies [`update`] to it and has what the store has),
    /// `None` when the receipt is gone.
    pub async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        let f = self.backend.update(push_id, updates, now_ms, ttl_ms);
        Link::shared(self.link.as_deref(), StoreOp::ReceiptUpdate, f).await
    }

    /// A push's receipt, while kept.
    pub async fn get(&self, push_id: &str, now_ms: i64) -> Result<Option<Receipt>, StoreError> {
        let f = self.backend.get(push_id, now_ms);
        Link::shared(self.link.as_deref(), StoreOp::ReceiptGet, f).await
    }

    /// Forgets in-process receipts past their TTL (called periodically).
    pub fn sweep(&self, now_ms: i64) {
        self.backend.sweep(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(targets: &[&str]) -> Receipt {
        let t: Vec<String> = targets.iter().map(|s| s.to_string()).collect();
        match begin(None, "p", "sha256:a", "ed25519:k", "topic", &t, 10) {
            Begun::New(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn up(t: &str, s: State) -> Update {
        Update {
            target: t.into(),
            state: s,
            detail: String::new(),
        }
    }

    #[test]
    fn a_push_settles_when_no_target_is_pending() {
        let mut rec = r(&["a", "b"]);
        assert_eq!(rec.events.len(), 1);
        let ev = update(
            &mut rec,
            &[up("a", State::Delivered), up("b", State::Queued)],
            20,
        );
        assert_eq!(
            ev.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert!(!rec.settled);
        let ev = update(&mut rec, &[up("b", State::Delivered)], 30);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[1].kind, EventKind::Settled);
        assert_eq!(ev[1].sequence, 5);
        assert!(rec.settled);
        // Nothing moves a final state; no second settled event.
        assert!(update(
            &mut rec,
            &[up("a", State::Failed), up("b", State::Expired)],
            40
        )
        .is_empty());
        assert_eq!(rec.updated_ms, 30);
    }

    #[test]
    fn queued_targets_move_only_to_a_settlement() {
        let mut rec = r(&["a"]);
        update(&mut rec, &[up("a", State::Queued)], 11);
        assert!(update(&mut rec, &[up("a", State::Coalesced)], 12).is_empty());
        assert!(update(&mut rec, &[up("a", State::Accepted)], 12).is_empty());
        assert!(update(&mut rec, &[up("unknown", State::Delivered)], 12).is_empty());
        assert_eq!(update(&mut rec, &[up("a", State::Expired)], 13).len(), 2);
    }

    #[test]
    fn replays_and_conflicts() {
        let rec = r(&["a"]);
        let t = vec!["a".to_owned()];
        assert_eq!(
            begin(Some(&rec), "p", "sha256:a", "ed25519:k", "topic", &t, 99),
            Begun::Replay(rec.clone())
        );
        assert_eq!(
            begin(Some(&rec), "p", "sha256:b", "ed25519:k", "topic", &t, 99),
            Begun::Conflict
        );
    }

    #[test]
    fn events_round_trip_their_compact_form() {
        for e in [
            Event {
                sequence: 7,
                kind: EventKind::Target,
                at_ms: 1_790_000_000_000,
                target: Some(("0123456789abcdef".into(), State::RateLimited)),
            },
            Event {
                sequence: 1,
                kind: EventKind::Accepted,
                at_ms: 5,
                target: None,
            },
        ] {
            assert_eq!(Event::decode(&e.encode()), Some(e.clone()));
        }
        assert_eq!(Event::decode("1|nope|5||"), None);
        assert_eq!(Event::decode("1|target|5|t|bogus"), None);
        assert_eq!(Event::decode("1|accepted|5|||x"), None);
    }

    #[test]
    fn memory_receipts_expire() {
        let m = MemoryReceipts::default();
        let t = vec!["a".to_owned()];
        assert!(matches!(
            m.begin("p", "h", "k", "t", &t, 0, 100),
            Begun::New(_)
        ));
        assert!(m.get("p", 99).is_some());
        assert!(m.get("p", 100).is_none());
        assert!(m
            .update("p", &[up("a", State::Delivered)], 100, 100)
            .is_none());
        // After expiry the id is new again.
        assert!(matches!(
            m.begin("p", "other", "k", "t", &t, 100, 100),
            Begun::New(_)
        ));
    }
}
