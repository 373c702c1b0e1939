//! How a signed push's queued targets settle: the delivery core tells how each queued item
//! ended ([`Settlement`]) and the push's receipt records it in its own vocabulary
//! ([`super::receipt::state_of`]). A report the store does not take is tried again in the
//! background (100 ms doubling to 2 s) until the item's staleness window has closed, so the
//! receipt never stays `queued` for an item that left the queue while the store was failing.

use std::sync::Arc;
use std::time::Duration;

use super::receipt;
use super::receipt::lifecycle::{Changes, Guard, State, Update};
use crate::clock::Clock;
use crate::delivery::{Ending, Reference, Settlement};
use crate::store::{Store, StoreError};

/// The receipts queued targets settle in.
#[derive(Debug)]
pub struct QueuedTargets {
    store: Arc<Store>,
    clock: Clock,
    /// How long a receipt is kept, ms: a settlement keeps it that much longer.
    ttl_ms: i64,
}

impl QueuedTargets {
    /// Settling in `store`'s receipts, each kept `ttl_ms` past its last change.
    pub fn new(store: Arc<Store>, clock: Clock, ttl_ms: i64) -> Self {
        Self {
            store,
            clock,
            ttl_ms,
        }
    }
}

/// Records `update` in push `push_id`'s receipt.
async fn record(
    store: &Store,
    push_id: &str,
    update: &Update,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<(), StoreError> {
    let changes = Changes {
        push_id,
        updates: std::slice::from_ref(update),
        guard: Guard::Always,
        ttl_ms,
    };
    store.receipts().update(&changes, now_ms).await.map(|_| ())
}

#[async_trait::async_trait]
impl Settlement for QueuedTargets {
    async fn ended(&self, reference: &Reference, ending: Ending<'_>, deadline_ms: i64) {
        let (push_id, target) = reference;
        let (state, detail) = match ending {
            Ending::Outcome(outcome) => receipt::state_of(outcome),
            Ending::Expired => (State::Expired, String::new()),
            Ending::SetAside => (
                State::Failed,
                receipt::failure_detail(receipt::Failure::relay("unreadable_in_queue")),
            ),
            Ending::Lost => (
                State::Failed,
                receipt::failure_detail(receipt::Failure::relay("relay_stopped")),
            ),
        };
        let update = Update {
            target: target.clone(),
            state,
            detail,
        };
        let now = self.clock.now_ms();
        match record(&self.store, push_id, &update, now, self.ttl_ms).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "could not record a queued target's settlement in its receipt; retrying in the background");
            }
        }
        let (store, clock, ttl_ms) = (self.store.clone(), self.clock.clone(), self.ttl_ms);
        let push_id = push_id.clone();
        // At least one more try, however late.
        let give_up = deadline_ms.max(now + 1);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(100);
            loop {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                let now = clock.now_ms();
                match record(&store, &push_id, &update, now, ttl_ms).await {
                    Ok(()) => return,
                    Err(_) if now < give_up => {}
                    Err(e) => {
                        tracing::error!(error = %e, "could not record a queued target's settlement in its receipt before its staleness window closed");
                        return;
                    }
                }
            }
        });
    }
}
