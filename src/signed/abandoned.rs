//! Targets a stopped replica left `accepted`.
//!
//! A target is `accepted` from the moment its push is recorded until the replica that took
//! the push records the target's first outcome, which it does within one APNs attempt (or
//! hands the target to the retry queue as `queued`). A target still `accepted` long after
//! that was being delivered by a replica that stopped, or lost the store, before recording
//! what happened, and nobody took the push over since (a replay that finds the push's lease
//! lapsed takes it over and delivers, and so does a signed read or an event stream while the
//! request is kept beside the lease: [`super::takeover`]). Without this the receipt would
//! stay `pending` until its TTL.
//!
//! Whoever reads such a receipt and cannot take it over (the admin API, a reader past the
//! staleness window or with nothing kept, a replay that finds nothing left to take over)
//! settles those targets as `failed` with the reason `relay_interrupted`: the relay does
//! not know whether APNs took the notification, and says so rather than resend (a resend
//! could page twice). The change goes through the store's state machine, so it applies only
//! while the target is still `accepted`, and the one outcome the original replica might
//! still record later is ignored.
//!
//! The bound is twice `RELAY_RETRY_LEASE_MS` (which already exceeds twice the APNs request
//! timeout): a replica that is still alive has recorded an outcome long before it. And the
//! change is guarded by the push's lease ([`Guard::Lapsed`]): while a lease holder is still
//! delivering (the owner retrying after a lost store reply, or a replay that took the push
//! over), nothing is settled behind its back.
//!
//! Store round trips: none while no target is past the bound; one update when one is (and
//! one read if another writer changed the receipt meanwhile).

use super::receipt::lifecycle::{
    self as receipts, Changes, Guard, Receipt, State, Update, Updated,
};
use crate::store::Store;

/// The failure detail of an interrupted target.
fn detail() -> String {
    super::receipt::failure_detail(super::receipt::Failure::relay("relay_interrupted"))
}

/// When a target counts as abandoned, and how long receipts are kept.
#[derive(Debug, Clone, Copy)]
pub struct Abandonment {
    /// A target `accepted` for longer than this, ms, is abandoned.
    pub after_ms: i64,
    /// Receipt TTL (`RELAY_RECEIPT_TTL_S`), ms, renewed by the update.
    pub ttl_ms: i64,
}

impl Abandonment {
    /// The changes that settle `r`'s abandoned targets at `now_ms` (none for most receipts).
    pub fn updates(&self, r: &Receipt, now_ms: i64) -> Vec<Update> {
        if r.settled {
            return Vec::new();
        }
        r.targets
            .iter()
            .filter(|t| t.state == State::Accepted && now_ms - t.updated_ms > self.after_ms)
            .map(|t| Update {
                target: t.key.clone(),
                state: State::Failed,
                detail: detail(),
            })
            .collect()
    }

    /// When the earliest `accepted` target of `r` becomes abandoned, ms; `None` when no
    /// target is `accepted`.
    pub fn deadline(&self, r: &Receipt) -> Option<i64> {
        r.targets
            .iter()
            .filter(|t| t.state == State::Accepted)
            .map(|t| t.updated_ms + self.after_ms)
            .min()
    }

    /// `r` with its abandoned targets settled in the store, as the store now holds it. If
    /// the store cannot be written, `r` as it was read (the next reader tries again).
    pub async fn settle(&self, store: &Store, mut r: Receipt, now_ms: i64) -> Receipt {
        let updates = self.updates(&r, now_ms);
        if updates.is_empty() {
            return r;
        }
        let held = r.events.last().map_or(0, |e| e.sequence);
        let changes = Changes {
            push_id: &r.push_id,
            updates: &updates,
            guard: Guard::Lapsed,
            ttl_ms: self.ttl_ms,
        };
        match store.receipts().update(&changes, now_ms).await {
            Ok(Updated::Applied(before)) if before == held => {
                tracing::warn!(
                    push_id = %r.push_id,
                    targets = updates.len(),
                    "a signed push's targets were left accepted by a replica that stopped before recording their outcome: settled as failed (relay_interrupted)"
                );
                for _ in &updates {
                    crate::metrics::signed_target(State::Failed.as_str());
                }
                receipts::update(&mut r, &updates, now_ms);
                r
            }
            // Another writer changed it in between: what the store holds now.
            Ok(Updated::Applied(_)) => match store.receipts().get(&r.push_id, now_ms).await {
                Ok(Some(stored)) => stored,
                _ => r,
            },
            // A lease holder is still at work (a takeover, or the owner retrying after a
            // lost reply): it settles them.
            Ok(Updated::Held) | Ok(Updated::Gone) => r,
            Err(e) => {
                tracing::warn!(error = %e, push_id = %r.push_id, "settling a signed push's abandoned targets failed");
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::receipt::lifecycle::fresh;
    use super::*;

    fn receipt(targets: &[&str], at: i64) -> Receipt {
        let targets: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
        fresh("p", "sha256:x", "k", "t", &targets, at)
    }

    const A: Abandonment = Abandonment {
        after_ms: 60_000,
        ttl_ms: 600_000,
    };

    #[test]
    fn only_accepted_targets_past_the_bound_are_abandoned() {
        let mut r = receipt(&["a", "b", "c"], 1_000);
        assert_eq!(A.deadline(&r), Some(61_000));
        // At the bound exactly, nothing yet.
        assert!(A.updates(&r, 61_000).is_empty());
        let queued = Update {
            target: "b".into(),
            state: State::Queued,
            detail: String::new(),
        };
        let delivered = Update {
            target: "c".into(),
            state: State::Delivered,
            detail: String::new(),
        };
        receipts::update(&mut r, &[queued, delivered], 2_000);
        let ups = A.updates(&r, 61_001);
        assert_eq!(ups.len(), 1);
        assert_eq!(ups[0].target, "a");
        assert_eq!(ups[0].state, State::Failed);
        assert_eq!(ups[0].detail, r#""failure":{"reason":"relay_interrupted"}"#);
        // Settling it leaves the queued target pending, owned by the retry queue.
        receipts::update(&mut r, &ups, 61_001);
        assert!(!r.settled);
        assert_eq!(A.deadline(&r), None);
        assert!(A.updates(&r, 10_000_000).is_empty());
    }

    #[test]
    fn a_settled_receipt_has_nothing_abandoned() {
        let mut r = receipt(&["a"], 0);
        let done = Update {
            target: "a".into(),
            state: State::DryRun,
            detail: String::new(),
        };
        receipts::update(&mut r, &[done], 5);
        assert!(r.settled);
        assert!(A.updates(&r, i64::MAX / 2).is_empty());
        assert_eq!(A.deadline(&r), None);
    }

    #[test]
    fn a_late_outcome_of_the_stopped_replica_changes_nothing() {
        let mut r = receipt(&["a"], 0);
        let ups = A.updates(&r, 60_001);
        receipts::update(&mut r, &ups, 60_001);
        assert!(r.settled);
        let late = Update {
            target: "a".into(),
            state: State::Delivered,
            detail: String::new(),
        };
        assert!(receipts::update(&mut r, &[late], 60_002).is_empty());
        assert_eq!(r.targets[0].state, State::Failed);
    }
}
