//! The in-process store: policy state in sharded maps, for a single replica or a laptop,
//! and the fallback of a replica whose Redis is away.
//!
//! Each device's state sits behind its shard's mutex, so the whole admission for one
//! envelope is atomic: the same envelope posted 20 times at once is forwarded once.
//! Devices are keyed by a hash of their token, as in Redis. State expires like the Redis
//! key does: a device untouched for the policy's horizon is forgotten (checked against the
//! caller's clock, so tests can drive it), and a background sweep drops dead entries so
//! memory stays bounded by the number of active devices.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::device::DeviceToken;
use crate::policy::{self, DeadReason, DeviceState, Policy, Ticket};

use super::backend::{Admission, AlertKey, Mark, PolicyBackend};
use crate::store::error::StoreResult;

const SHARDS: usize = 64;

#[derive(Debug, Default)]
struct Entry {
    state: DeviceState,
    /// The latest instant anything was written (never moves back).
    written_ms: i64,
}

/// Policy state in process memory.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Vec<Mutex<HashMap<[u8; 16], Entry>>>,
    /// Dead tokens: device key -> (until, reason). Outlives the device's policy state.
    tombstones: Mutex<HashMap<[u8; 16], (i64, DeadReason)>>,
    policy: Policy,
}

fn key(device: &DeviceToken) -> ([u8; 16], usize) {
    let d = device.digest();
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    (k, d[16] as usize % SHARDS)
}

impl MemoryStore {
    /// An empty store for this policy.
    pub fn new(policy: Policy) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            tombstones: Mutex::new(HashMap::new()),
            policy,
        }
    }

    fn with<R>(
        &self,
        device: &DeviceToken,
        now_ms: i64,
        f: impl FnOnce(&mut Entry) -> (R, bool),
    ) -> R {
        let (k, shard) = key(device);
        let mut map = self.shards[shard].lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(k).or_default();
        if entry.written_ms != 0 && now_ms - entry.written_ms >= self.policy.horizon_ms() {
            *entry = Entry::default();
        }
        let (r, wrote) = f(entry);
        if wrote {
            entry.written_ms = entry.written_ms.max(now_ms);
        } else if entry.written_ms == 0 {
            map.remove(&k);
        }
        r
    }

    /// See [`crate::store::policy::PolicyStore::admit`].
    pub fn admit(&self, key: AlertKey<'_>, now_ms: i64) -> Admission {
        if let Some(reason) = self.tombstone(key.device, now_ms) {
            return Admission {
                decision: policy::Decision::Dead(reason),
                env: None,
            };
        }
        self.with(key.device, now_ms, |e| {
            let decision = policy::admit(
                &mut e.state,
                key.collapse_id,
                key.flap_key,
                now_ms,
                &self.policy,
            );
            let wrote = matches!(
                decision,
                policy::Decision::Forward(_) | policy::Decision::Suppressed
            );
            (
                Admission {
                    decision,
                    env: e.state.env,
                },
                wrote,
            )
        })
    }

    /// See [`crate::store::policy::PolicyStore::rollback`].
    pub fn rollback(&self, key: AlertKey<'_>, ticket: &Ticket, now_ms: i64) {
        self.with(key.device, now_ms, |e| {
            policy::rollback(&mut e.state, key.collapse_id, key.flap_key, ticket);
            ((), e.written_ms != 0)
        })
    }

    /// See [`crate::store::policy::PolicyStore::mark`].
    pub fn mark(&self, device: &DeviceToken, mark: Mark<'_>, now_ms: i64) {
        match mark {
            Mark::Env(env) => self.with(device, now_ms, |e| {
                e.state.env = Some(env);
                ((), true)
            }),
            Mark::Hold {
                collapse_id,
                until_ms,
            } => self.with(device, now_ms, |e| {
                policy::hold(&mut e.state, collapse_id, until_ms);
                ((), true)
            }),
            Mark::Release { collapse_id } => self.with(device, now_ms, |e| {
                policy::release(&mut e.state, collapse_id);
                ((), e.written_ms != 0)
            }),
            Mark::Dead { reason, ttl_ms } => {
                let (k, _) = key(device);
                self.tombstones
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(k, (now_ms + ttl_ms, reason));
            }
        }
    }

    fn tombstone(&self, device: &DeviceToken, now_ms: i64) -> Option<DeadReason> {
        let (k, _) = key(device);
        let t = self.tombstones.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&k)
            .filter(|(until, _)| now_ms < *until)
            .map(|(_, r)| *r)
    }

    /// Forgets devices idle for the horizon and state that decides nothing, keeping the
    /// clock-skew margin ([`policy::CLOCK_SKEW_MS`]) so a replica whose clock lags finds
    /// what it would still decide on; returns how many devices remain.
    pub fn sweep(&self, now_ms: i64) -> usize {
        let horizon = self.policy.horizon_ms() + policy::CLOCK_SKEW_MS;
        let mut remaining = 0;
        for shard in &self.shards {
            let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, e| {
                policy::prune(&mut e.state, now_ms, &self.policy);
                now_ms - e.written_ms < horizon
            });
            remaining += map.len();
        }
        self.tombstones
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, (until, _)| now_ms < *until);
        remaining
    }

    /// Devices currently held.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[async_trait::async_trait]
impl PolicyBackend for MemoryStore {
    async fn admit(&self, key: AlertKey<'_>, now_ms: i64) -> StoreResult<Admission> {
        Ok(MemoryStore::admit(self, key, now_ms))
    }

    async fn rollback(&self, key: AlertKey<'_>, ticket: &Ticket, now_ms: i64) -> StoreResult<()> {
        MemoryStore::rollback(self, key, ticket, now_ms);
        Ok(())
    }

    async fn mark(&self, device: &DeviceToken, mark: Mark<'_>, now_ms: i64) -> StoreResult<()> {
        MemoryStore::mark(self, device, mark, now_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Environment;
    use crate::policy::Decision;
    use std::sync::Arc;

    impl MemoryStore {
        /// Whether no device is held.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    const T0: i64 = 1_700_000_000_000;

    fn device(i: u32) -> DeviceToken {
        DeviceToken::parse(&format!("{i:064x}")).unwrap()
    }

    #[test]
    fn concurrent_duplicates_forward_once() {
        let store = Arc::new(MemoryStore::new(Policy::defaults()));
        let forwards: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..20)
                .map(|_| {
                    let store = store.clone();
                    s.spawn(move || {
                        matches!(
                            store
                                .admit(AlertKey::new(&device(1), "c", "c"), T0)
                                .decision,
                            Decision::Forward(_)
                        ) as usize
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(forwards, 1);
    }

    #[test]
    fn idle_devices_are_forgotten() {
        let store = MemoryStore::new(Policy::defaults());
        for i in 0..100 {
            store.admit(AlertKey::new(&device(i), "c", "c"), T0);
        }
        assert_eq!(store.len(), 100);
        assert_eq!(store.sweep(T0 + 1000), 100);
        // Kept for the skew margin past the horizon, then gone.
        assert_eq!(store.sweep(T0 + Policy::defaults().horizon_ms()), 100);
        assert_eq!(
            store.sweep(T0 + Policy::defaults().horizon_ms() + policy::CLOCK_SKEW_MS),
            0
        );
        assert!(store.is_empty());
    }

    #[test]
    fn coalesced_and_limited_posts_leave_no_entry_behind() {
        let store = MemoryStore::new(Policy {
            rate_capacity: 1,
            ..Policy::defaults()
        });
        store.admit(AlertKey::new(&device(1), "a", "a"), T0);
        assert!(matches!(
            store
                .admit(AlertKey::new(&device(1), "b", "b"), T0)
                .decision,
            Decision::RateLimited { .. }
        ));
        // A first post that is rate limited never happens with capacity >= 1, but a
        // rollback of an unknown device must not create one either.
        let t = Ticket {
            at_ms: T0,
            kind: crate::policy::TicketKind::Counted { cooled: false },
        };
        store.rollback(AlertKey::new(&device(2), "a", "a"), &t, T0);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn environment_is_remembered_until_the_device_goes_idle() {
        let store = MemoryStore::new(Policy::defaults());
        store.mark(&device(1), Mark::Env(Environment::Sandbox), T0);
        assert_eq!(
            store.admit(AlertKey::new(&device(1), "a", "a"), T0 + 1).env,
            Some(Environment::Sandbox)
        );
        let later = T0 + 1 + Policy::defaults().horizon_ms();
        assert_eq!(
            store.admit(AlertKey::new(&device(1), "b", "b"), later).env,
            None
        );
    }
}
