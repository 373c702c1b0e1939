//! The link to Redis every Redis-backed concern shares ([`Link`]): whether this replica runs
//! degraded on its in-process store, what it does when Redis fails ([`RedisFailure`]), and
//! the probe that brings it back.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::Pool;

use super::error::{StoreError, StoreOp};
use crate::metrics;

/// `RELAY_REDIS_FAILURE`: what a replica does when Redis fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailure {
    /// Switch to the in-process store until Redis answers again.
    Degrade,
    /// Answer 503 with `Retry-After`.
    Reject,
}

/// The link to Redis that every part of a Redis-backed store shares: whether this replica
/// runs degraded on its in-process store, whether Redis came back since, what to do when
/// Redis fails, and the pool the recovery probe pings.
#[derive(Debug)]
pub struct Link {
    pool: Pool,
    on_failure: RedisFailure,
    degraded: Arc<AtomicBool>,
    /// Set by the recovery probe: Redis answers again, the local queue should be handed over.
    recovered: Arc<AtomicBool>,
}

impl Link {
    /// A healthy link over `pool`.
    pub fn new(pool: Pool, on_failure: RedisFailure) -> Self {
        Self {
            pool,
            on_failure,
            degraded: Arc::new(AtomicBool::new(false)),
            recovered: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What a replica does when Redis fails.
    pub fn on_failure(&self) -> RedisFailure {
        self.on_failure
    }

    /// Whether this replica currently runs on its in-process store because Redis failed.
    pub fn degraded(&self) -> bool {
        self.degraded.load(Ordering::SeqCst)
    }

    /// Whether Redis came back since the last call (the local queue should be handed over).
    pub fn take_recovered(&self) -> bool {
        self.recovered.swap(false, Ordering::SeqCst)
    }

    /// Switches this replica to its in-process store (once: later calls while degraded do
    /// nothing), logs the cause, sets the degraded gauge, and starts the probe that switches
    /// back when Redis answers a PING again.
    pub fn degrade(&self, cause: &StoreError) {
        if self.degraded.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(error = %cause, "Redis failed: this replica now decides on its in-process store (degraded)");
        metrics::degraded(true);
        let degraded = self.degraded.clone();
        let recovered = self.recovered.clone();
        let pool = self.pool.clone();
        let since = Instant::now();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let ping: Result<String, _> =
                    fred::prelude::ClientLike::ping(pool.next(), None).await;
                if ping.is_ok() {
                    degraded.store(false, Ordering::SeqCst);
                    recovered.store(true, Ordering::SeqCst);
                    metrics::degraded(false);
                    tracing::warn!(
                        degraded_ms = since.elapsed().as_millis() as u64,
                        "Redis answers again: back on shared state"
                    );
                    return;
                }
            }
        });
    }

    /// Runs an operation of a concern that needs the shared store for its guarantees
    /// (receipts, signers, mailboxes): without a link (one replica, in process) as it is;
    /// while degraded not at all ([`StoreError::Degraded`]); else timed under `op`.
    pub(crate) async fn shared<T>(
        link: Option<&Link>,
        op: StoreOp,
        f: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match link {
            None => f.await,
            Some(l) if l.degraded() => Err(StoreError::Degraded),
            Some(_) => op.timed(f).await,
        }
    }
}
