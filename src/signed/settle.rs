//! A signed push's lifecycle once its checks pass: its receipt begun with its lease (or found,
//! for a replay), every `accepted` target through the delivery core at once, the first
//! outcomes recorded, and whatever is left settled in the background.
//!
//! Store round trips: a new one-target push costs three (the receipt created with its
//! lease, the target's admission, the outcomes recorded) and one more per extra target's
//! admission; a replay costs one; the signer comes from the replica's cache
//! ([`super::signers`], read again from the store once an entry is 0.9 s old). A replay that finds the push's lease lapsed with targets still
//! `accepted` takes it over and costs what a new push costs; a replay or read that finds a
//! target abandoned past the bound costs one more, to settle it ([`super::abandoned`]).
//!
//! A store reply lost while the receipt is created is not taken for a command that did not
//! run: the request answers 503 and its replica settles the push in the background
//! ([`Signed::resolve`]), under the same lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::front::Signed;
use super::labels::Resolution;
use super::receipt;
use super::receipt::lifecycle::{
    Begun, Changes, Claim, Guard, NewReceipt, Receipt, State as TargetState, Update, Updated,
};
use super::request::SignedPush;
use crate::delivery::Context;
use crate::metrics;
use crate::store::{Store, StoreError};

impl Signed {
    /// Begins `push`'s receipt with `owner` bidding for its lease (see
    /// [`super::receipt::lifecycle::begin`]); a new receipt keeps `kept` (the sealed
    /// request, [`Signed::seal_request`]) beside its lease for the staleness window.
    pub(super) async fn begin(
        &self,
        push: &SignedPush,
        topic: &str,
        owner: &str,
        by: &str,
        now_ms: i64,
        kept: Option<&[u8]>,
    ) -> Result<Begun, StoreError> {
        let claim = Claim {
            owner,
            lease_ms: self.settings.lease_ms,
        };
        begin_receipt(
            self.store(),
            push,
            topic,
            by,
            &claim,
            now_ms,
            self.settings.receipt_ttl_ms,
            kept.map(|k| (k, crate::policy::STALENESS_S as i64 * 1000)),
        )
        .await
    }

    /// The request's bytes sealed under the retry queue's key and bound to its push id, to
    /// keep beside the push's lease; `None` when nothing is kept (no key).
    pub(super) fn seal_request(&self, push_id: &str, body: &[u8]) -> Option<Vec<u8>> {
        let keeper = self.keeper.as_ref()?;
        Some(keeper.seal_bytes(&kept_aad(push_id), body.to_vec()))
    }

    /// Settles `push` in the background after a store reply was lost: the outcomes not
    /// recorded yet are recorded, then the push is begun again under the same owner (its
    /// own replay renews its lease, or creates the receipt if the first begin never ran)
    /// and its still `accepted` targets are delivered. Tried with backoff (100 ms doubling
    /// to 2 s) until nothing is left, another holder has the push, or the staleness window
    /// closes (then the receipt's readers settle it).
    pub(super) fn resolve_later(
        self: &Arc<Self>,
        push: SignedPush,
        topic: String,
        owner: String,
        by: String,
        unrecorded: Vec<Update>,
        kept: Option<Arc<[u8]>>,
    ) {
        let Ok(place) = self.settling.clone().try_acquire_owned() else {
            tracing::warn!(
                push_id = %push.request_id(),
                "too many signed pushes are being settled in the background: this one is left to its replay and its readers"
            );
            metrics::signed_resolution(Resolution::Left.as_str());
            return;
        };
        metrics::signed_resolution(Resolution::Started.as_str());
        let s = self.clone();
        tokio::spawn(async move {
            let result = s
                .resolve(&push, &topic, &owner, &by, unrecorded, kept.as_deref())
                .await;
            metrics::signed_resolution(result.as_str());
            drop(place);
        });
    }

    pub(super) async fn resolve(
        &self,
        push: &SignedPush,
        topic: &str,
        owner: &str,
        by: &str,
        mut unrecorded: Vec<Update>,
        kept: Option<&[u8]>,
    ) -> Resolution {
        let give_up = Instant::now() + Duration::from_secs(crate::policy::STALENESS_S);
        let mut pause = Duration::from_millis(100);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            if Instant::now() >= give_up {
                tracing::error!(
                    push_id = %push.request_id(),
                    "a signed push could not be settled within the staleness window: its readers settle it"
                );
                return Resolution::Abandoned;
            }
            let now = self.now_ms();
            if !unrecorded.is_empty() {
                let changes = Changes {
                    push_id: push.request_id(),
                    updates: &unrecorded,
                    guard: Guard::Always,
                    ttl_ms: self.settings.receipt_ttl_ms,
                };
                let recorded = self.store().receipts().update(&changes, now).await;
                match recorded {
                    Ok(_) => unrecorded.clear(),
                    Err(_) => continue,
                }
            }
            let began = Instant::now();
            let r = match self.begin(push, topic, owner, by, now, kept).await {
                Err(_) => continue,
                Ok(Begun::New(r))
                | Ok(Begun::Replay {
                    receipt: r,
                    owned: true,
                }) => r,
                // Nothing accepted any more, another holder delivers, or the id was taken.
                Ok(_) => return Resolution::Settled,
            };
            // Its own push: nothing of it was admitted before (the lost reply came first, or
            // too little of the lease was left to send).
            match deliver(self, push, topic, r, began, false).await {
                (_, None) => return Resolution::Delivered,
                (_, Some(left)) => unrecorded = left,
            }
        }
    }
}

/// What a kept request is bound to: its push id, under a label of its own (no queue item id
/// can open it).
pub(super) fn kept_aad(push_id: &str) -> Vec<u8> {
    format!("signed-push/{push_id}").into_bytes()
}

/// Creates `push`'s receipt on `store` with `claim` bidding for its lease, or finds the one
/// its id has: the one store call that begins a signed push (the benchmark's store part
/// makes the same call, keeping no request). `by` is the signer as the receipt records it
/// ([`receipt::recorded_signer`]); `kept` is the sealed request and how long it is kept
/// ([`NewReceipt::kept`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn begin_receipt(
    store: &Store,
    push: &SignedPush,
    topic: &str,
    by: &str,
    claim: &Claim<'_>,
    now_ms: i64,
    ttl_ms: i64,
    kept: Option<(&[u8], i64)>,
) -> Result<Begun, StoreError> {
    let targets: Vec<String> = push.targets().iter().map(|t| t.receipt_key()).collect();
    let new = NewReceipt {
        push_id: push.request_id(),
        hash: push.canonical_hash(),
        signer: by,
        topic,
        targets: &targets,
        ttl_ms,
        claim: *claim,
        kept,
    };
    store.receipts().begin(&new, now_ms).await
}

/// The `accepted` targets of `r` through the delivery core at once (the lease held since
/// `began`; `taken` when it was taken over from another owner, see [`Context::retake`]);
/// the receipt with their first outcomes, and `Some(outcomes not recorded)` when something
/// is left for [`Signed::resolve`]: outcomes the store did not take, or targets not sent
/// because too little of the lease was left.
pub(super) async fn deliver(
    s: &Signed,
    push: &SignedPush,
    topic: &str,
    fresh: Receipt,
    began: Instant,
    taken: bool,
) -> (Receipt, Option<Vec<Update>>) {
    // The receipt holds the targets in request order (the same request: the same hash),
    // with their keys already computed.
    let accepted: Vec<(usize, String)> = fresh
        .targets
        .iter()
        .enumerate()
        .filter(|(i, t)| t.state == TargetState::Accepted && *i < push.targets().len())
        .map(|(i, t)| (i, t.key.clone()))
        .collect();
    if accepted.is_empty() {
        return (fresh, None);
    }
    // A send must end inside the lease, or a taker could send the same target again.
    let lease = Duration::from_millis(s.settings.lease_ms.max(0) as u64);
    if began.elapsed() + s.delivery.send_bound() >= lease {
        return (fresh, Some(Vec::new()));
    }
    let topic = (Some(topic) != s.settings.default_topic.as_deref()).then(|| topic.to_owned());
    let one = |(i, key): (usize, String)| {
        let alert = push.alert(i);
        let ctx = Context {
            topic: topic.clone(),
            settles: Some((push.request_id().to_owned(), key.clone())),
            shared: true,
            retake: taken,
        };
        let delivery = s.delivery.clone();
        async move { (key, delivery.handle_with(&alert, &ctx).await) }
    };
    let mut done = Vec::with_capacity(accepted.len());
    if let [only] = accepted.as_slice() {
        done.push(one(only.clone()).await);
    } else {
        // Every target at once.
        let mut set = tokio::task::JoinSet::new();
        for target in accepted {
            set.spawn(one(target));
        }
        while let Some(d) = set.join_next().await {
            if let Ok(d) = d {
                done.push(d);
            }
        }
    }
    let mut updates = Vec::with_capacity(done.len());
    for (target, outcome) in done {
        let (state, detail) = receipt::state_of(&outcome);
        metrics::signed_target(state.as_str());
        updates.push(Update {
            target,
            state,
            detail,
        });
    }
    let now = s.now_ms();
    let mut r = fresh;
    let held = r.events.last().map_or(0, |e| e.sequence);
    let mut left = None;
    let changes = Changes {
        push_id: push.request_id(),
        updates: &updates,
        guard: Guard::Always,
        ttl_ms: s.settings.receipt_ttl_ms,
    };
    for attempt in 0..2 {
        match s.store().receipts().update(&changes, now).await {
            // The store held the receipt as this replica does: the same changes give the
            // same receipt, so it is rendered here without reading it back.
            Ok(Updated::Applied(before)) if before == held => break,
            // Something else changed it meanwhile (a retry could): read it.
            Ok(Updated::Applied(_)) => {
                match s.store().receipts().get(push.request_id(), now).await {
                    Ok(Some(stored)) => return (stored, None),
                    _ => break,
                }
            }
            Ok(_) => break,
            Err(e) if attempt == 0 => {
                tracing::warn!(error = %e, "recording a signed push's outcomes failed; retrying once")
            }
            Err(e) => {
                tracing::warn!(error = %e, "recording a signed push's outcomes failed: retried in the background until the store takes them");
                left = Some(updates.clone());
            }
        }
    }
    super::receipt::lifecycle::update(&mut r, &updates, now);
    (r, left)
}
