//! The retry worker: claims due items from the queue and tries each again until the service
//! takes it, refuses it for good, or its staleness window closes.
//!
//! One attempt (both environments, the provider-token refresh, remembering the environment)
//! is bounded by one deadline, half the lease: the claim is still this replica's when the
//! attempt settles, unless the replica stalled. If it did, the fenced `ack`/`reschedule`
//! find the claim stale and change nothing: the replica that claimed the item since owns it.
//!
//! After a Redis outage, and when the worker stops, the items this replica queued in
//! process are handed to the shared queue so any replica can deliver them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::handle::{from_stored_priority, Attempt, Delivery, Sender};
use super::outcome::Outcome;
use super::settlement::{Ending, Reference};
use crate::device::DeviceToken;
use crate::metrics;
use crate::push::{Kind, Notification, Payload, VerdictClass};
use crate::secret::Secret;
use crate::store::queue::{backoff_ms, random_u32, Fenced, Pending};
use crate::store::{AlertKey, Batch, Lease, Mark};

/// What one retry attempt came to, as labelled in `sealrelay_retry_attempts_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryResult {
    /// The service took it.
    Delivered,
    /// Put back for a later attempt.
    Retry,
    /// Refused for good.
    Failed,
    /// Its deadline passed before it could be sent.
    Expired,
}

impl RetryResult {
    /// Every result.
    pub const ALL: [RetryResult; 4] = [
        RetryResult::Delivered,
        RetryResult::Retry,
        RetryResult::Failed,
        RetryResult::Expired,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryResult::Delivered => "delivered",
            RetryResult::Retry => "retry",
            RetryResult::Failed => "failed",
            RetryResult::Expired => "expired",
        }
    }
}

/// Which queue a gauge describes, as labelled in `sealrelay_retry_queue_*{scope}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueScope {
    /// The queue in the shared store.
    Shared,
    /// This replica's in-process queue (a store that is away, or the embedded store).
    Local,
}

impl QueueScope {
    /// Every scope.
    pub const ALL: [QueueScope; 2] = [QueueScope::Shared, QueueScope::Local];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueScope::Shared => "shared",
            QueueScope::Local => "local",
        }
    }
}

/// How often an idle retry worker looks for due items.
const POLL: Duration = Duration::from_millis(100);
/// Items claimed per poll.
const BATCH: usize = 32;
/// Retry attempts in flight per replica.
const CONCURRENCY: usize = 256;
/// How often the queue gauges are refreshed.
const STATS_EVERY: Duration = Duration::from_secs(2);

impl Delivery {
    /// Runs the retry worker until `stop` turns true; then hands the local queue over.
    pub async fn run_retries(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        if !self.sends() {
            return;
        }
        // Until Redis has answered once, a failing poll would only mark the replica degraded
        // before anyone sent it anything.
        while !self.store.ready() {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.changed() => return,
            }
        }
        let mut last_stats: Option<Instant> = None;
        // Attempts in flight are bounded, and a worker claims only what it can start at once,
        // so a claimed item never waits out its lease in this replica's backlog.
        let slots = Arc::new(Semaphore::new(CONCURRENCY));
        loop {
            if *stop.borrow() {
                break;
            }
            if self.store.queue().take_recovered() {
                self.store.queue().flush_local(self.clock.now_ms()).await;
            }
            let free = slots.available_permits().min(BATCH);
            let now = self.clock.now_ms();
            let Batch { leases, set_aside } = if free == 0 {
                Batch::default()
            } else {
                self.store
                    .queue()
                    .claim(now, now + self.settings.retry_lease_ms, free)
                    .await
            };
            // Set aside unopened (sealed under another key): taken out, and the front-end
            // told from the reference kept beside the item.
            for u in &set_aside {
                self.report_to(&u.settles, Ending::SetAside, u.expires_ms)
                    .await;
            }
            let idle = leases.is_empty();
            for lease in leases {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    break;
                };
                let d = self.clone();
                tokio::spawn(async move {
                    d.retry(lease).await;
                    drop(permit);
                });
            }
            if last_stats.is_none_or(|t| t.elapsed() >= STATS_EVERY) {
                last_stats = Some(Instant::now());
                self.report_queue().await;
            }
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = stop.changed() => {}
                }
            }
        }
        let moved = self.store.queue().flush_local(self.clock.now_ms()).await;
        let left = self.store.queue().take_local();
        if !left.is_empty() {
            tracing::warn!(moved, left = left.len(), "stopping with notifications queued in process only; they are lost with this replica");
            // Their front-ends hear it (a signed push's receipt says `failed`), if the store
            // takes the report now.
            for item in &left {
                self.report(item, Ending::Lost).await;
            }
        }
    }

    /// Refreshes the queue gauges. A Redis error leaves the shared gauge as it was (the
    /// error is counted) instead of reporting an empty queue.
    async fn report_queue(&self) {
        let now = self.clock.now_ms();
        let age = |oldest: Option<i64>| oldest.map_or(0.0, |o| (now - o).max(0) as f64 / 1000.0);
        let stats = self.store.queue().stats().await;
        metrics::retry_queue(
            QueueScope::Local.as_str(),
            stats.local.0,
            age(stats.local.1),
        );
        if let Some(Ok(s)) = stats.shared {
            metrics::retry_queue(
                QueueScope::Shared.as_str(),
                s.depth,
                age(s.oldest_accepted_ms),
            );
        }
    }

    /// One more attempt for a claimed item.
    pub(crate) async fn retry(&self, lease: Lease) {
        let Sender::Push(push) = &self.sender else {
            return;
        };
        let mut item = lease.claimed.item.clone();
        let Some(device) = DeviceToken::parse(&item.device) else {
            // Never sendable: taken out, and its front-end told (whatever the ack's answer:
            // an item that comes back is set aside the same way).
            if !matches!(self.store.queue().ack(&lease).await, Ok(Fenced::Stale)) {
                self.report(&item, Ending::SetAside).await;
            }
            return;
        };
        let now = self.clock.now_ms();
        if now >= item.expires_ms() {
            return self.expire(&device, &lease).await;
        }
        let m = Notification {
            to: Secret::new(device.expose()),
            id: item.id.clone(),
            topic: item.topic.clone(),
            kind: Kind::Alert,
            priority: from_stored_priority(item.priority),
            collapse_key: Some(item.collapse_id.clone()),
            expiration_s: item.expiration_s,
            payload: Payload::Rendered(bytes::Bytes::from(item.body.clone())),
        };
        let first = item.env;
        let deadline =
            Instant::now() + Duration::from_millis((self.settings.retry_lease_ms / 2) as u64);
        let attempt: Attempt = self
            .deliver(&**push, &device, &m, first, Some(first), deadline)
            .await;
        item.attempts += 1;
        item.env = attempt.env;
        let now = self.clock.now_ms();
        match attempt.verdict.class() {
            VerdictClass::Delivered => {
                metrics::retry_attempt(RetryResult::Delivered.as_str());
                tracing::info!(device = %device.hash8(), attempts = item.attempts, "queued notification delivered");
                match self.store.queue().ack(&lease).await {
                    Ok(Fenced::Done) => {}
                    Ok(Fenced::Stale) => {
                        tracing::warn!(device = %device.hash8(), "delivered a notification whose claim had passed to another replica; it may be delivered twice (same notification id and collapse id)")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not remove a delivered item from the retry queue")
                    }
                }
                if let Err(e) = self
                    .store
                    .policy()
                    .mark(
                        &device,
                        Mark::Release {
                            collapse_id: &item.collapse_id,
                        },
                        now,
                    )
                    .await
                {
                    tracing::warn!(error = %e, "could not release a delivered alert");
                }
                self.report(&item, Ending::Outcome(&Outcome::Forwarded))
                    .await;
            }
            VerdictClass::Retryable => {
                let due = now + backoff_ms(item.attempts, random_u32());
                if due >= item.expires_ms() {
                    return self.expire(&device, &lease).await;
                }
                metrics::retry_attempt(RetryResult::Retry.as_str());
                match self.store.queue().reschedule(&lease, &item, due, now).await {
                    Ok(Fenced::Done) => {}
                    Ok(Fenced::Stale) => {
                        tracing::info!(device = %device.hash8(), "a retry's claim passed to another replica; leaving the item to it")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not reschedule a queued item; its lease will bring it back")
                    }
                }
            }
            _ => {
                metrics::retry_attempt(RetryResult::Failed.as_str());
                tracing::warn!(device = %device.hash8(), reason = attempt.verdict.reason_label(), "queued notification refused by the push service");
                match self.store.queue().ack(&lease).await {
                    Ok(Fenced::Done) => {
                        let key = AlertKey::new(&device, &item.collapse_id, &item.flap_key);
                        self.settle_refusal(key, &item.ticket(), &attempt).await;
                        self.report(&item, Ending::Outcome(&Outcome::of(attempt.verdict)))
                            .await;
                    }
                    // Another replica holds the item now: it settles it.
                    Ok(Fenced::Stale) => {}
                    // The ack's reply did not arrive, which is not an ack that did not run:
                    // if it ran, nobody will claim the item again. The refusal is final
                    // either way, so it is reported now (were the item claimed again, the
                    // same refusal would change nothing).
                    Err(e) => {
                        tracing::warn!(error = %e, "could not remove a refused item from the retry queue; reporting the refusal anyway");
                        self.report(&item, Ending::Outcome(&Outcome::of(attempt.verdict)))
                            .await;
                    }
                }
            }
        }
    }

    /// The staleness window closed: never deliver late. Count it, roll the forward back
    /// (only as the claim's owner, so a stale claimer cannot undo another's delivery).
    async fn expire(&self, device: &DeviceToken, lease: &Lease) {
        let item: &Pending = &lease.claimed.item;
        match self.store.queue().ack(lease).await {
            Ok(Fenced::Done) => {
                metrics::retry_attempt(RetryResult::Expired.as_str());
                tracing::warn!(device = %device.hash8(), attempts = item.attempts, "queued notification expired undelivered");
                let key = AlertKey::new(device, &item.collapse_id, &item.flap_key);
                self.rollback(key, &item.ticket()).await;
                self.report(item, Ending::Expired).await;
            }
            Ok(Fenced::Stale) => {}
            // As for a refusal: the ack may have run, and the expiry is final either way.
            Err(e) => {
                tracing::warn!(error = %e, "could not remove an expired item from the retry queue; reporting the expiry anyway");
                self.report(item, Ending::Expired).await;
            }
        }
    }

    /// Tells the front-end that asked for this delivery how it ended, if one did.
    async fn report(&self, item: &Pending, ending: Ending<'_>) {
        if let Some(reference) = &item.settles {
            self.report_to(reference, ending, item.expires_ms()).await;
        }
    }

    /// Tells the front-end that asked to hear of `reference` how it ended.
    async fn report_to(&self, reference: &Reference, ending: Ending<'_>, deadline_ms: i64) {
        if let Some(settlement) = &self.settlement {
            settlement.ended(reference, ending, deadline_ms).await;
        }
    }
}
