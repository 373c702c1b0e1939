//! Receipts of signed pushes as the store keeps them, and the rules every change follows:
//! a pure state machine ([`fresh`], [`update`], [`take`]) that the in-process store runs
//! under a lock and `receipt_begin.lua` / `receipt_update.lua` mirror line for line (a
//! differential test binds them).
//!
//! Every push has a [`Lease`] beside its receipt, recorded in the same round trip that
//! creates the receipt: the accepting request holds it and delivers; its own retry renews
//! it; anyone else who finds it lapsed while a target is still `accepted` takes it over and
//! delivers that target. Redis times leases by its own clock (`TIME`), never a replica's.
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

/// What [`MemoryReceipts::begin`] (and its Redis twin) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// A new push: this receipt was created, and the caller holds its lease.
    New(Receipt),
    /// The same request again (same hash): the receipt as it stands.
    Replay {
        /// The receipt.
        receipt: Receipt,
        /// Whether the caller now holds the push's lease ([`take`]): it was its own, or it
        /// had lapsed, while a target is still `accepted`. The caller then delivers the
        /// `accepted` targets; otherwise it sends nothing.
        owned: bool,
    },
    /// The id is taken by another request.
    Conflict,
}

/// Who delivers a push's `accepted` targets, and until when (the store's time, ms). The
/// replica that creates a receipt holds it; a replica that finds it lapsed while a target is
/// still `accepted` takes it over ([`take`]). It lives beside the receipt, never in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// An opaque token, unique to one accepting request (a fencing token: the owner's
    /// own replay renews the lease, anyone else's waits for it to lapse).
    pub owner: String,
    /// The lease lapses at this instant, ms.
    pub until_ms: i64,
}

/// A bid for a push's lease.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The bidder's token ([`Lease::owner`]).
    pub owner: &'a str,
    /// How long the lease lasts once taken, ms.
    pub lease_ms: i64,
}

/// A fresh owner token: 32 hex of 16 random bytes.
pub fn owner_token() -> String {
    let mut b = [0u8; 16];
    // A failing system RNG leaves zeros: the token is then not unique, which only makes a
    // second request look like the first's own retry (it renews the same lease).
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    crate::device::hex(&b)
}

impl Claim<'_> {
    /// The lease this claim holds from `now_ms`.
    pub fn lease(&self, now_ms: i64) -> Lease {
        Lease {
            owner: self.owner.to_owned(),
            until_ms: now_ms + self.lease_ms,
        }
    }
}

/// Whether `claim` takes `lease` at `now_ms` (and renews it if so): when a target of `r` is
/// still `accepted`, and the lease is the claimer's own or has lapsed (`now_ms` at or past
/// its end). `receipt_begin.lua` mirrors it.
pub fn take(lease: &mut Lease, r: &Receipt, claim: &Claim<'_>, now_ms: i64) -> bool {
    let accepted = r.targets.iter().any(|t| t.state == State::Accepted);
    if !accepted || (lease.owner != claim.owner && now_ms < lease.until_ms) {
        return false;
    }
    *lease = claim.lease(now_ms);
    true
}

/// Which changes [`MemoryReceipts::update`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Always (the outcomes a lease holder or the retry queue reports).
    Always,
    /// Only once the push's lease has lapsed (settling targets nobody is delivering).
    Lapsed,
}

/// What an update found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Updated {
    /// The receipt is gone.
    Gone,
    /// A lease holder is still delivering: nothing was applied ([`Guard::Lapsed`]).
    Held,
    /// Applied; the receipt's last event sequence before the changes (a caller holding the
    /// receipt at that sequence applies [`update`] to it and has what the store has).
    Applied(u64),
}

/// The receipt a new push starts with: every target `accepted`, event 1 `accepted`.
pub fn fresh(
    push_id: &str,
    hash: &str,
    signer: &str,
    topic: &str,
    targets: &[String],
    now_ms: i64,
) -> Receipt {
    Receipt {
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
    }
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

    /// Creates a push's receipt with `claim` holding its lease, or finds the one its id has:
    /// a replay (taking the lease when [`take`] allows) or a conflict. The receipt is kept
    /// until `now_ms + ttl_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        claim: &Claim<'_>,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Begun {
        let mut map = self.lock();
        if let Some(e) = map.get_mut(push_id).filter(|e| now_ms < e.until_ms) {
            if e.receipt.hash != hash {
                return Begun::Conflict;
            }
            let owned = take(&mut e.lease, &e.receipt, claim, now_ms);
            return Begun::Replay {
                receipt: e.receipt.clone(),
                owned,
            };
        }
        let r = fresh(push_id, hash, signer, topic, targets, now_ms);
        map.insert(
            push_id.to_owned(),
            Entry {
                receipt: r.clone(),
                until_ms: now_ms + ttl_ms,
                lease: claim.lease(now_ms),
            },
        );
        Begun::New(r)
    }

    /// See [`update`], under `guard`; with the new events.
    pub fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> (Updated, Vec<Event>) {
        let mut map = self.lock();
        let Some(e) = map.get_mut(push_id).filter(|e| now_ms < e.until_ms) else {
            return (Updated::Gone, Vec::new());
        };
        if guard == Guard::Lapsed && now_ms < e.lease.until_ms {
            return (Updated::Held, Vec::new());
        }
        let before = e.receipt.events.last().map_or(0, |e| e.sequence);
        let new = update(&mut e.receipt, updates, now_ms);
        if !new.is_empty() {
            e.until_ms = now_ms + ttl_ms;
        }
        (Updated::Applied(before), new)
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

/// The events a change published, as the fan-out carries them: one [`Event::encode`] a line.
pub fn events_message(events: &[Event]) -> String {
    let lines: Vec<String> = events.iter().map(Event::encode).collect();
    lines.join("\n")
}

/// Where receipts live: in process or in Redis.
#[async_trait::async_trait]
pub trait ReceiptBackend: Send + Sync + std::fmt::Debug {
    /// Creates a push's receipt, or finds the one its id has (see
    /// [`MemoryReceipts::begin`]).
    #[allow(clippy::too_many_arguments)]
    async fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        claim: &Claim<'_>,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Begun, StoreError>;

    /// Applies target changes under `guard` (see [`update`]) and publishes the new events.
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
        claim: &Claim<'_>,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Begun, StoreError> {
        Ok(self
            .receipts
            .begin(push_id, hash, signer, topic, targets, claim, now_ms, ttl_ms))
    }

    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError> {
        let (updated, new) = self
            .receipts
            .update(push_id, updates, guard, now_ms, ttl_ms);
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

    /// Creates a push's receipt with `claim` holding its lease, or finds the one its id
    /// has (see [`MemoryReceipts::begin`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn begin(
        &self,
        push_id: &str,
        hash: &str,
        signer: &str,
        topic: &str,
        targets: &[String],
        claim: &Claim<'_>,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Begun, StoreError> {
        let f = self
            .backend
            .begin(push_id, hash, signer, topic, targets, claim, now_ms, ttl_ms);
        Link::shared(self.link.as_deref(), StoreOp::ReceiptBegin, f).await
    }

    /// Applies target changes under `guard` (see [`update`]) and publishes the new events
    /// to every replica.
    pub async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError> {
        let f = self.backend.update(push_id, updates, guard, now_ms, ttl_ms);
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
        fresh("p", "sha256:a", "ed25519:k", "topic", &t, 10)
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

    const A: Claim<'static> = Claim {
        owner: "a",
        lease_ms: 100,
    };
    const B: Claim<'static> = Claim {
        owner: "b",
        lease_ms: 100,
    };

    #[test]
    fn replays_and_conflicts() {
        let m = MemoryReceipts::default();
        let t = vec!["a".to_owned()];
        let begin = |hash: &str, claim: &Claim<'_>, now: i64| {
            m.begin("p", hash, "ed25519:k", "topic", &t, claim, now, 10_000)
        };
        let Begun::New(rec) = begin("sha256:a", &A, 10) else {
            panic!("not new")
        };
        assert_eq!(rec, r(&["a"]));
        // Another bidder while A's lease runs: the receipt, not the lease.
        assert_eq!(
            begin("sha256:a", &B, 109),
            Begun::Replay {
                receipt: rec.clone(),
                owned: false
            }
        );
        assert_eq!(begin("sha256:b", &B, 109), Begun::Conflict);
        // A's own replay renews it (to 150 + 100).
        assert!(matches!(
            begin("sha256:a", &A, 150),
            Begun::Replay { owned: true, .. }
        ));
        assert!(matches!(
            begin("sha256:a", &B, 249),
            Begun::Replay { owned: false, .. }
        ));
        // Lapsed: B takes it over, and now A waits.
        assert!(matches!(
            begin("sha256:a", &B, 250),
            Begun::Replay { owned: true, .. }
        ));
        assert!(matches!(
            begin("sha256:a", &A, 251),
            Begun::Replay { owned: false, .. }
        ));
        // With no target accepted any more, nobody takes it.
        let (u, _) = m.update(
            "p",
            &[up("a", State::Delivered)],
            Guard::Always,
            260,
            10_000,
        );
        assert_eq!(u, Updated::Applied(1));
        assert!(matches!(
            begin("sha256:a", &B, 270),
            Begun::Replay { owned: false, .. }
        ));
        assert!(matches!(
            begin("sha256:a", &A, 1_000),
            Begun::Replay { owned: false, .. }
        ));
    }

    #[test]
    fn a_guarded_update_waits_for_the_lease() {
        let m = MemoryReceipts::default();
        let t = vec!["a".to_owned()];
        m.begin("p", "h", "k", "t", &t, &A, 0, 10_000);
        let fail = [up("a", State::Failed)];
        assert_eq!(
            m.update("p", &fail, Guard::Lapsed, 99, 10_000).0,
            Updated::Held
        );
        assert_eq!(m.get("p", 99).unwrap().targets[0].state, State::Accepted);
        assert_eq!(
            m.update("p", &fail, Guard::Lapsed, 100, 10_000).0,
            Updated::Applied(1)
        );
        assert_eq!(m.get("p", 100).unwrap().targets[0].state, State::Failed);
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
            m.begin("p", "h", "k", "t", &t, &A, 0, 100),
            Begun::New(_)
        ));
        assert!(m.get("p", 99).is_some());
        assert!(m.get("p", 100).is_none());
        assert_eq!(
            m.update("p", &[up("a", State::Delivered)], Guard::Always, 100, 100)
                .0,
            Updated::Gone
        );
        // After expiry the id is new again.
        assert!(matches!(
            m.begin("p", "other", "k", "t", &t, &B, 100, 100),
            Begun::New(_)
        ));
    }
}
