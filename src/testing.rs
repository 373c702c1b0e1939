//! The pieces the benchmark, the fuzz targets and a few integration tests drive directly,
//! behind the `testing` feature: the relay's own binary is built without it, so none of this
//! is part of what ships or of the library's API.
//!
//! Everything here is the relay's own code, reached without its HTTP front: the benchmark
//! measures each part of a request alone with it, so "the combined limit of the parts" is the
//! limit of the code the relay runs, not of a copy.

use std::time::Duration;

pub use crate::app::register_metrics;
pub use crate::delivery::alert::DEFAULT_MAX_CIPHERTEXT_CHARS;
pub use crate::delivery::Alert;
pub use crate::mailbox::ice;
pub use crate::push::fcm;
pub use crate::push::frames::SmallFrames;
pub use crate::secret::Secret;
pub use crate::signed::request::SignedPush;
pub use crate::signed::sig::{read_authorization, sign_request, PrivateKey, ReadAuthorization};
pub use crate::store::mailbox::mailbox_lua;
pub use crate::store::policy::admit_lua;

use crate::delivery::Outcome;
use crate::policy::{Decision, Policy};
use crate::signed::receipt;
use crate::signed::receipt::lifecycle::{self as receipts, Begun, Claim, Guard, Update};
use crate::store::connection::{RedisSettings, RedisStore};
use crate::store::fanout::Fanout;
use crate::store::{RedisFailure, Store};

/// The APNs body of a sealed alert with these stub texts (the fuzz targets render every
/// envelope they parse), as the core hands it to the APNs module.
pub fn alert_body(alert: &Alert, title: &str, body: &str) -> Vec<u8> {
    crate::push::apns::render(&crate::delivery::notification(alert, title, body, 0)).to_vec()
}

/// The outcomes of `push`'s targets as the relay records them when every one was forwarded.
fn delivered(push: &SignedPush) -> Vec<Update> {
    push.targets()
        .iter()
        .map(|t| {
            let (state, detail) = receipt::state_of(&Outcome::Forwarded);
            Update {
                target: t.receipt_key(),
                state,
                detail,
            }
        })
        .collect()
}

/// The 201 body the relay answers a new signed push whose targets were all delivered: the
/// receipt begun, every target settled `delivered`, rendered as `POST /v2/pushes` renders it.
/// The HTTP part of a signed push (`bench-intake` answers this without a store or APNs).
pub fn signed_answer(push: &SignedPush, topic: &str, now_ms: i64) -> Vec<u8> {
    let targets: Vec<String> = push.targets().iter().map(|t| t.receipt_key()).collect();
    let mut r = receipts::fresh(
        push.request_id(),
        push.canonical_hash(),
        push.signer_key_id(),
        topic,
        &targets,
        now_ms,
    );
    receipts::update(&mut r, &delivered(push), now_ms);
    receipt::render(&r).to_string().into_bytes()
}

/// The lease a benchmark push's receipt is begun with (the relay's default
/// `RELAY_RETRY_LEASE_MS`).
const LEASE_MS: i64 = 30_000;

/// What one signed push's store part ended in, for the benchmark's tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedStoreOutcome {
    /// Begun, every target admitted as a forward, the outcomes recorded.
    Recorded,
    /// The receipt existed already (a replay or a conflict): nothing admitted.
    Existing,
    /// A target was not admitted as a forward (a policy decision, not a store failure).
    NotForwarded,
    /// A store call failed.
    Failed,
}

impl SignedStoreOutcome {
    /// The tally's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recorded => "forwarded",
            Self::Existing => "existing",
            Self::NotForwarded => "not_forwarded",
            Self::Failed => "error",
        }
    }
}

/// The store part of a signed push on Redis alone: the relay's own `Store`, driven through
/// the three calls `POST /v2/pushes` makes for a push (the receipt begun, each target
/// admitted, the outcomes recorded), with no HTTP, no signature and no APNs.
pub struct SignedStorePart {
    store: Store,
    ttl_ms: i64,
}

impl SignedStorePart {
    /// Connects to `url` under `prefix` with `pool_size` connections and the device policy
    /// the benchmark's relays run with (`rate_capacity` tokens, `refill_per_s` back a
    /// second; the rest are the defaults). Waits until Redis answers.
    pub async fn connect(
        url: &str,
        prefix: &str,
        pool_size: usize,
        rate_capacity: u32,
        refill_per_s: f64,
    ) -> anyhow::Result<Self> {
        let settings = RedisSettings {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            pool_size: pool_size.max(1),
            timeout: Duration::from_secs(2),
        };
        let policy = Policy::from_seconds(75, 6, 1800, 1800, 7200, rate_capacity, refill_per_s);
        let redis = RedisStore::connect(&settings, policy.clone())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !redis.ready() {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "Redis at the given URL did not answer within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fanout = Fanout::redis(&settings, redis.pool().clone(), crate::clock::Clock::System)?;
        let store = Store::redis(redis, None, fanout, policy, RedisFailure::Reject);
        Ok(Self {
            store,
            ttl_ms: 7 * 24 * 3_600_000,
        })
    }

    /// The store calls of one accepted push at `now_ms`, in the relay's order.
    pub async fn push(&self, push: &SignedPush, topic: &str, now_ms: i64) -> SignedStoreOutcome {
        let owner = receipts::owner_token();
        let claim = Claim {
            owner: &owner,
            lease_ms: LEASE_MS,
        };
        let by = push.signer_key_id().to_owned();
        let begun = crate::signed::settle::begin_receipt(
            &self.store,
            push,
            topic,
            &by,
            &claim,
            now_ms,
            self.ttl_ms,
            None,
        )
        .await;
        match begun {
            Ok(Begun::New(_)) => {}
            Ok(_) => return SignedStoreOutcome::Existing,
            Err(_) => return SignedStoreOutcome::Failed,
        }
        let mut forwarded = true;
        for i in 0..push.targets().len() {
            let alert = push.alert(i);
            let admitted = self.store.policy().admit(alert.key(), now_ms).await;
            match admitted {
                Ok(a) => forwarded &= matches!(a.decision, Decision::Forward(_)),
                Err(_) => return SignedStoreOutcome::Failed,
            }
        }
        let updates = delivered(push);
        let changes = receipts::Changes {
            push_id: push.request_id(),
            updates: &updates,
            guard: Guard::Always,
            ttl_ms: self.ttl_ms,
        };
        let recorded = self.store.receipts().update(&changes, now_ms).await;
        match recorded {
            Err(_) => SignedStoreOutcome::Failed,
            Ok(_) if !forwarded => SignedStoreOutcome::NotForwarded,
            Ok(_) => SignedStoreOutcome::Recorded,
        }
    }
}
