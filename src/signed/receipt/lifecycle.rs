//! A signed push's receipt and the rules every change to it follows, as plain types and pure
//! functions: the states a target moves through ([`State::may_become`]), the receipt a push
//! starts with ([`fresh`]), what beginning a push finds ([`begin`]: new, a replay, a
//! conflict), who delivers it ([`Lease`], taken over by [`take`] once it lapses), and how
//! outcomes settle it ([`update`], [`apply`]). No clock, no store: each takes `now_ms`.
//!
//! The in-process store runs these under a lock; `receipt_begin.lua` and
//! `receipt_update.lua` mirror them line for line for Redis, which times leases by its own
//! clock (`TIME`), never a replica's (a differential test binds the two).
//!
//! Every push has a [`Lease`] beside its receipt, recorded in the same round trip that
//! creates the receipt: the accepting request holds it and delivers; its own retry renews
//! it; anyone else who finds it lapsed while a target is still `accepted` takes it over and
//! delivers that target.
//!
//! A receipt names devices only by hash (16 hex of SHA-256 of the token) and holds no token
//! and no ciphertext. Every change is an event with a sequence that starts at 1 and only
//! grows: `accepted` when the push is first seen, `target` when a target's state changes,
//! `settled` once no target is `accepted` or `queued`. A target's state moves from
//! `accepted` to its first outcome; from `queued` only to `delivered`, `rejected`, `failed`
//! or `expired`; every other state is final.

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

/// What beginning a push found ([`begin`]; the Redis backend's script decides the same).
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

/// Which changes [`apply`] applies.
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

/// A push to begin: what its receipt is made from, and how long it (and its id) is kept.
#[derive(Debug, Clone, Copy)]
pub struct NewReceipt<'a> {
    /// The push id (the request id).
    pub push_id: &'a str,
    /// `sha256:<hex>` of the canonical request.
    pub hash: &'a str,
    /// The signer, as the receipt records it.
    pub signer: &'a str,
    /// The APNs topic.
    pub topic: &'a str,
    /// The targets' keys, in request order.
    pub targets: &'a [String],
    /// How long the receipt is kept, ms.
    pub ttl_ms: i64,
    /// The bid for its lease.
    pub claim: Claim<'a>,
    /// The request, sealed, kept beside the lease for whoever takes the push over, and for
    /// how long, ms (the staleness window); `None` keeps nothing. Written only with a new
    /// receipt.
    pub kept: Option<(&'a [u8], i64)>,
}

/// Changes to a push's targets: what a lease holder, the retry queue or a reader settling
/// abandoned targets reports.
#[derive(Debug, Clone, Copy)]
pub struct Changes<'a> {
    /// The push.
    pub push_id: &'a str,
    /// The targets' new states.
    pub updates: &'a [Update],
    /// When they apply.
    pub guard: Guard,
    /// How much longer a change keeps the receipt, ms.
    pub ttl_ms: i64,
}

impl NewReceipt<'_> {
    /// The receipt this push starts with (see [`fresh`]).
    pub fn fresh(&self, now_ms: i64) -> Receipt {
        fresh(
            self.push_id,
            self.hash,
            self.signer,
            self.topic,
            self.targets,
            now_ms,
        )
    }
}

/// What beginning `new` finds, given `kept`: the receipt and lease its id already has,
/// while kept. A free id is a new push (the caller keeps the receipt with
/// `new.claim.lease(now_ms)`); the same hash again is a replay, which takes the lease when
/// [`take`] allows for `new.claim`; another hash is a conflict.
pub fn begin(kept: Option<(&Receipt, &mut Lease)>, new: &NewReceipt<'_>, now_ms: i64) -> Begun {
    match kept {
        None => Begun::New(new.fresh(now_ms)),
        Some((r, _)) if r.hash != new.hash => Begun::Conflict,
        Some((r, lease)) => Begun::Replay {
            owned: take(lease, r, &new.claim, now_ms),
            receipt: r.clone(),
        },
    }
}

/// Applies `updates` to a kept receipt under `guard` ([`update`]): nothing while a lease
/// holder is still delivering and the guard waits for the lease; otherwise the receipt's
/// last event sequence before the changes, and the new events.
pub fn apply(
    r: &mut Receipt,
    lease: &Lease,
    updates: &[Update],
    guard: Guard,
    now_ms: i64,
) -> (Updated, Vec<Event>) {
    if guard == Guard::Lapsed && now_ms < lease.until_ms {
        return (Updated::Held, Vec::new());
    }
    let before = r.events.last().map_or(0, |e| e.sequence);
    let new = update(r, updates, now_ms);
    (Updated::Applied(before), new)
}

/// The events a change published, as the fan-out carries them: one [`Event::encode`] a line.
pub fn events_message(events: &[Event]) -> String {
    let lines: Vec<String> = events.iter().map(Event::encode).collect();
    lines.join("\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn r(targets: &[&str]) -> Receipt {
        let t: Vec<String> = targets.iter().map(|s| s.to_string()).collect();
        fresh("p", "sha256:a", "ed25519:k", "topic", &t, 10)
    }

    /// A change of target `t` to `s`.
    pub(crate) fn up(t: &str, s: State) -> Update {
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

    /// Two bidders for a lease of 100 ms.
    pub(crate) const A: Claim<'static> = Claim {
        owner: "a",
        lease_ms: 100,
    };
    pub(crate) const B: Claim<'static> = Claim {
        owner: "b",
        lease_ms: 100,
    };

    /// One kept receipt and its lease, as a store holds them.
    struct Kept(Option<(Receipt, Lease)>);

    impl Kept {
        fn begin(&mut self, hash: &str, claim: &Claim<'_>, now: i64) -> Begun {
            let t = ["a".to_owned()];
            let new = NewReceipt {
                push_id: "p",
                hash,
                signer: "ed25519:k",
                topic: "topic",
                targets: &t,
                ttl_ms: 10_000,
                claim: *claim,
                kept: None,
            };
            let begun = begin(self.0.as_mut().map(|(r, l)| (&*r, l)), &new, now);
            if let Begun::New(r) = &begun {
                self.0 = Some((r.clone(), claim.lease(now)));
            }
            begun
        }

        fn apply(&mut self, updates: &[Update], guard: Guard, now: i64) -> Updated {
            let (r, l) = self.0.as_mut().unwrap();
            apply(r, l, updates, guard, now).0
        }
    }

    #[test]
    fn replays_and_conflicts() {
        let mut k = Kept(None);
        let Begun::New(rec) = k.begin("sha256:a", &A, 10) else {
            panic!("not new")
        };
        assert_eq!(rec, r(&["a"]));
        // Another bidder while A's lease runs: the receipt, not the lease.
        assert_eq!(
            k.begin("sha256:a", &B, 109),
            Begun::Replay {
                receipt: rec.clone(),
                owned: false
            }
        );
        assert_eq!(k.begin("sha256:b", &B, 109), Begun::Conflict);
        // A's own replay renews it (to 150 + 100).
        assert!(matches!(
            k.begin("sha256:a", &A, 150),
            Begun::Replay { owned: true, .. }
        ));
        assert!(matches!(
            k.begin("sha256:a", &B, 249),
            Begun::Replay { owned: false, .. }
        ));
        // Lapsed: B takes it over, and now A waits.
        assert!(matches!(
            k.begin("sha256:a", &B, 250),
            Begun::Replay { owned: true, .. }
        ));
        assert!(matches!(
            k.begin("sha256:a", &A, 251),
            Begun::Replay { owned: false, .. }
        ));
        // With no target accepted any more, nobody takes it.
        let u = k.apply(&[up("a", State::Delivered)], Guard::Always, 260);
        assert_eq!(u, Updated::Applied(1));
        assert!(matches!(
            k.begin("sha256:a", &B, 270),
            Begun::Replay { owned: false, .. }
        ));
        assert!(matches!(
            k.begin("sha256:a", &A, 1_000),
            Begun::Replay { owned: false, .. }
        ));
    }

    #[test]
    fn a_guarded_update_waits_for_the_lease() {
        let mut k = Kept(None);
        k.begin("h", &A, 0);
        let fail = [up("a", State::Failed)];
        assert_eq!(k.apply(&fail, Guard::Lapsed, 99), Updated::Held);
        assert_eq!(k.0.as_ref().unwrap().0.targets[0].state, State::Accepted);
        assert_eq!(k.apply(&fail, Guard::Lapsed, 100), Updated::Applied(1));
        assert_eq!(k.0.as_ref().unwrap().0.targets[0].state, State::Failed);
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
}
