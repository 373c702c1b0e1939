//! Admissions whose reply was lost.
//!
//! An admission the store does not answer in time is a store failure to the caller (v1 in
//! the reject mode answers 503, a signed push settles it later), and nothing is sent. But
//! a reply that did not arrive is not a command that did not run: Redis may run the
//! admission after the relay gave up, recording a forward that never left. The sender's
//! retry of the same alert, which the 503 asks for, would then be coalesced away as that
//! forward's duplicate, and the page lost.
//!
//! So such a forward is rolled back: in the background as soon as the store answers (tried
//! again 100 ms doubling to 2 s, until the staleness window closes), and on this replica
//! before the same alert is admitted again, so a retry that comes back here first never
//! races the background one. The rollback undoes only a forward recorded at exactly the
//! instant the lost admission was asked at (the record's own instant), so an admission that
//! never ran, or a later one, is left as it is. What it cannot tell apart: a hold on the
//! alert (an earlier forward of the same collapse id waiting in the retry queue) ends with
//! it, as after any rollback.
//!
//! Store round trips: none while nothing is lost; one rollback per lost admission before this
//! replica admits again an alert whose admission here got no reply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::alert::Alert;
use crate::device::DeviceToken;
use crate::policy::{Ticket, TicketKind, STALENESS_S};
use crate::store::{AlertKey, Store, StoreError};

/// Lost admissions kept at most (each a few hundred bytes); past it a new one is only
/// rolled back in the background.
const MAX_KEPT: usize = 10_000;

/// The alert an admission was for: device token, collapse id, flap key.
type Key = (String, String, String);

/// This replica's admissions whose reply was lost and whose rollback has not been made:
/// the instants each alert's were asked at.
#[derive(Debug, Default)]
pub(super) struct LostAdmissions {
    kept: Mutex<HashMap<Key, Vec<i64>>>,
    /// Whether `kept` holds anything: the request path asks only this while nothing is lost
    /// (no lock, no allocation).
    any: AtomicBool,
}

fn key_of(alert: &Alert) -> Key {
    (
        alert.device.expose().to_owned(),
        alert.collapse_id.as_str().to_owned(),
        alert.flap_key().to_owned(),
    )
}

/// The forward a lost admission asked at `at_ms` may have recorded. Counted, not cooled:
/// the rollback removes that forward from the flap window and the dedup record.
fn ticket(at_ms: i64) -> Ticket {
    Ticket {
        at_ms,
        kind: TicketKind::Counted { cooled: false },
    }
}

impl LostAdmissions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<i64>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `alert`'s admission asked at `at_ms` got no reply (`error`): rolled back in the
    /// background, and kept until then for [`LostAdmissions::settle`].
    pub(super) fn lost(
        self: &Arc<Self>,
        store: &Arc<Store>,
        alert: &Alert,
        at_ms: i64,
        error: &StoreError,
    ) {
        // Not sent at all: nothing to undo.
        if matches!(error, StoreError::Degraded | StoreError::Full) {
            return;
        }
        let key = key_of(alert);
        let kept_here = {
            let mut kept = self.lock();
            let room = kept.len() < MAX_KEPT || kept.contains_key(&key);
            if room {
                kept.entry(key.clone()).or_default().push(at_ms);
                self.any.store(true, Ordering::Release);
            }
            room
        };
        let (me, store) = (self.clone(), store.clone());
        tokio::spawn(async move {
            let give_up = Instant::now() + Duration::from_secs(STALENESS_S);
            let mut pause = Duration::from_millis(100);
            let Some(device) = DeviceToken::parse(&key.0) else {
                return;
            };
            while Instant::now() < give_up {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                // Settled meanwhile by a retry on this replica, or replaced by a later loss.
                if kept_here && !me.holds(&key, at_ms) {
                    return;
                }
                let alert_key = AlertKey::new(&device, &key.1, &key.2);
                if store
                    .policy()
                    .rollback(alert_key, &ticket(at_ms), at_ms)
                    .await
                    .is_ok()
                {
                    me.forget(&key, at_ms);
                    return;
                }
            }
            tracing::warn!(
                device = %device.hash8(),
                "an admission whose reply was lost could not be rolled back within the staleness window"
            );
            me.forget(&key, at_ms);
        });
    }

    fn holds(&self, key: &Key, at_ms: i64) -> bool {
        self.lock().get(key).is_some_and(|v| v.contains(&at_ms))
    }

    fn forget(&self, key: &Key, at_ms: i64) {
        let mut kept = self.lock();
        if let Some(v) = kept.get_mut(key) {
            v.retain(|&t| t != at_ms);
            if v.is_empty() {
                kept.remove(key);
            }
        }
        if kept.is_empty() {
            self.any.store(false, Ordering::Release);
        }
    }

    /// Before `alert` is admitted again on this replica: the rollback of its lost admission,
    /// if one is waiting. `Err` when the store does not take it (the alert is then not
    /// admitted either).
    pub(super) async fn settle(&self, store: &Store, alert: &Alert) -> Result<(), StoreError> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let key = key_of(alert);
        let Some(lost) = self.lock().get(&key).cloned() else {
            return Ok(());
        };
        for at_ms in lost {
            store
                .policy()
                .rollback(alert.key(), &ticket(at_ms), at_ms)
                .await?;
            self.forget(&key, at_ms);
        }
        Ok(())
    }
}
