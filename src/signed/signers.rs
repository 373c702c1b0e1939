//! Every replica's cache of enrolled signers, so a signed push costs about one store call
//! a second for its signer: loaded on first use, dropped the moment the fan-out says the
//! signer changed (an enrolment, an update, a revocation on any replica: effective
//! everywhere within the fan-out's delay, milliseconds), dropped whole when the fan-out
//! resynchronises after a reconnect, and in any case reloaded once it is [`KNOWN_TTL`] old:
//! pub/sub is a hint, so a revocation whose message was lost still holds on every replica
//! within a second. Unknown key ids are cached briefly too, so
//! a stream of made-up ids cannot turn into a stream of store calls; the cache is bounded.
//! Nothing is cached until the replica hears changes, and a load that raced a change is not
//! cached (it may hold the record from before).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::enrolment::Signer;
use super::sig::PublicKey;
use crate::store::{Store, StoreError};

/// How long an enrolled signer is served from the cache before it is read again.
pub const KNOWN_TTL: Duration = Duration::from_millis(900);
/// How long an unknown key id is remembered as unknown.
const NEGATIVE_TTL: Duration = Duration::from_secs(5);
/// Entries kept at most; beyond it the unknown ones are dropped first, then everything.
const MAX_ENTRIES: usize = 10_000;

/// A signer ready to verify with.
#[derive(Debug, Clone)]
pub struct Known {
    /// The record.
    pub signer: Signer,
    /// Its parsed public key.
    pub key: PublicKey,
    /// The signer as receipts record it (key id and key), computed once per load.
    pub recorded: String,
}

#[derive(Debug, Clone)]
enum Entry {
    Known(Arc<Known>, Instant),
    Unknown(Instant),
}

/// The cache.
#[derive(Debug)]
pub struct Signers {
    store: Arc<Store>,
    map: RwLock<HashMap<String, Entry>>,
    /// Whether [`Signers::follow`] hears changes: until then nothing is cached (a change
    /// made before the subscription took would never drop a cached entry).
    following: AtomicBool,
    /// Grows with every invalidation: a load that raced one (it may have read the record
    /// from before the change) is not cached.
    generation: AtomicU64,
}

impl Signers {
    /// An empty cache over `store`. Call [`Signers::follow`] to keep it current.
    pub fn new(store: Arc<Store>) -> Arc<Self> {
        Arc::new(Self {
            store,
            map: RwLock::default(),
            following: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        })
    }

    /// The signer, from the cache or the store; `Ok(None)` when not enrolled.
    pub async fn get(&self, key_id: &str) -> Result<Option<Arc<Known>>, StoreError> {
        if let Some(e) = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key_id)
        {
            match e {
                Entry::Known(k, at) if at.elapsed() < KNOWN_TTL => return Ok(Some(k.clone())),
                Entry::Known(..) => {}
                Entry::Unknown(at) if at.elapsed() < NEGATIVE_TTL => return Ok(None),
                Entry::Unknown(_) => {}
            }
        }
        let following = self.following.load(Ordering::SeqCst);
        let generation = self.generation.load(Ordering::SeqCst);
        let loaded = self.store.signers().get(key_id).await?;
        let known = loaded.and_then(|signer| match PublicKey::from_base64(&signer.public_key) {
            Ok(key) => Some(Arc::new(Known {
                recorded: super::receipt::recorded_signer(key_id, &key),
                signer,
                key,
            })),
            Err(_) => {
                tracing::error!(
                    key_id,
                    "an enrolled signer's public key does not parse; treating it as unknown"
                );
                None
            }
        });
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if !following || self.generation.load(Ordering::SeqCst) != generation {
            return Ok(known);
        }
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, e| matches!(e, Entry::Known(..)));
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(
            key_id.to_owned(),
            match &known {
                Some(k) => Entry::Known(k.clone(), Instant::now()),
                None => Entry::Unknown(Instant::now()),
            },
        );
        Ok(known)
    }

    /// Drops one signer (it changed).
    pub fn invalidate(&self, key_id: &str) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        map.remove(key_id);
    }

    /// Drops every signer.
    pub fn clear(&self) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        map.clear();
    }

    /// Follows the signers channel until `stop`: each message names a key id to drop; a
    /// resync of the fan-out drops everything.
    pub async fn follow(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let channel = self.store.signers().channel();
        let mut sub = loop {
            // A store that is down must not hold the stop: the subscription is given up.
            let attempt = tokio::select! {
                r = self.store.fanout().subscribe(&channel) => r,
                _ = stop.changed() => return,
            };
            match attempt {
                Ok(s) => break s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot follow signer changes yet; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        };
        // From now on every change is heard: entries may be cached.
        self.clear();
        self.following.store(true, Ordering::SeqCst);
        let mut resyncs = self.store.fanout().resyncs();
        // Only reconnects from now on count.
        resyncs.borrow_and_update();
        let mut resyncing = true;
        loop {
            tokio::select! {
                m = sub.recv() => match m {
                    Some(key_id) => self.invalidate(&String::from_utf8_lossy(&key_id)),
                    None => {
                        self.following.store(false, Ordering::SeqCst);
                        self.clear();
                        return;
                    }
                },
                r = resyncs.changed(), if resyncing => match r {
                    Ok(()) => self.clear(),
                    Err(_) => resyncing = false,
                },
                _ = stop.changed() => {
                    self.following.store(false, Ordering::SeqCst);
                    return;
                }
            }
        }
    }
}
