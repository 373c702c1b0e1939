//! The signed front-end (`/v2/pushes`): its settings and shared parts, and the checks every
//! route makes the same way (the signer, active; a signature verified and counted).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::abandoned::Abandonment;
use super::error::{ApiError, Code};
use super::labels::Route;
use super::sig::{self, ReadAuthorization};
use super::signers::{Known, Signers};
use crate::admission::Admission;
use crate::delivery::Delivery;
use crate::metrics;
use crate::store::{Store, StoreError};

/// The signed front-end's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The topic of a push that names none (`APNS_TOPIC`), if any.
    pub default_topic: Option<String>,
    /// Ciphertext cap (`RELAY_MAX_CIPHERTEXT_CHARS`), as for v1.
    pub max_ciphertext_chars: usize,
    /// How long ids and receipts are kept, ms.
    pub receipt_ttl_ms: i64,
    /// Time a client has to send its body.
    pub body_timeout: Duration,
    /// A target `accepted` for longer than this, ms, was left by a replica that stopped
    /// ([`super::abandoned`]): twice `RELAY_RETRY_LEASE_MS`.
    pub abandon_after_ms: i64,
    /// How long the request that accepts a push (or takes it over) holds its lease, ms:
    /// `RELAY_RETRY_LEASE_MS`, which exceeds twice the APNs request timeout.
    pub lease_ms: i64,
    /// Background settlements at once on this replica (`RELAY_SIGNED_MAX_SETTLEMENTS`).
    pub max_settlements: usize,
}

/// The signed front-end.
#[derive(Debug)]
pub struct Signed {
    /// Places for background settlements: beyond them a push is left to replays and
    /// readers, so lost replies cannot pile up tasks of up to the staleness window each.
    pub(super) settling: Arc<tokio::sync::Semaphore>,
    pub(super) settings: Settings,
    pub(super) delivery: Arc<Delivery>,
    pub(super) signers: Arc<Signers>,
    pub(super) admission: Arc<Admission>,
    /// Several regions: each signer's pushes and reads decided in its home region.
    pub(super) regions: Option<Arc<crate::region::Regions>>,
    /// Seals the request kept beside a push's lease for a taker (the retry queue's key);
    /// `None`: nothing is kept (no APNs credentials, so nothing to deliver).
    pub(super) keeper: Option<Arc<crate::store::queue::Sealer>>,
}

impl Signed {
    /// The front-end over the delivery core, with this replica's signer cache, admitting
    /// through the relay-wide `admission` (v1's in-flight limit and source buckets).
    pub(crate) fn new(
        settings: Settings,
        delivery: Arc<Delivery>,
        signers: Arc<Signers>,
        admission: Arc<Admission>,
    ) -> Self {
        Self {
            settling: Arc::new(tokio::sync::Semaphore::new(settings.max_settlements)),
            settings,
            delivery,
            signers,
            admission,
            regions: None,
            keeper: None,
        }
    }

    /// Keeps each push's request beside its lease, sealed by `keeper`, so a reader that
    /// finds the lease lapsed can take the push over ([`super::takeover`]).
    pub(crate) fn with_keeper(mut self, keeper: Option<crate::store::queue::Sealer>) -> Self {
        self.keeper = keeper.map(Arc::new);
        self
    }

    /// Decides each signer's pushes and reads in its home region (`RELAY_REGION`).
    pub(crate) fn with_regions(mut self, regions: Option<Arc<crate::region::Regions>>) -> Self {
        self.regions = regions;
        self
    }

    /// A signed read sent to its signer's home region: `Ok` with the request when it is
    /// decided here (this region is home, it is a hop, or its Authorization names no key id:
    /// refused here as anywhere), `Err` with the answer to return otherwise (the home's, or
    /// 503 `unavailable` when the home cannot be reached).
    pub(super) async fn read_at_home(&self, req: Request) -> Result<Request, Response> {
        let Some(regions) = &self.regions else {
            return Ok(req);
        };
        let key_id = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| ReadAuthorization::parse(Some(v.as_bytes())).ok())
            .map(|a| a.key_id().to_owned());
        let Some(key_id) = key_id else {
            return Ok(req);
        };
        match regions
            .relay(
                "signed",
                key_id.as_bytes(),
                req,
                0,
                self.settings.body_timeout,
            )
            .await
        {
            crate::region::Relay::Here(req) => Ok(req),
            crate::region::Relay::Answered(resp) => Err(resp),
            crate::region::Relay::Unreachable | crate::region::Relay::Unreadable(_) => {
                Err(ApiError::unavailable().into_response())
            }
        }
    }

    pub(super) fn store(&self) -> &Arc<Store> {
        self.delivery.store()
    }

    pub(super) fn now_ms(&self) -> i64 {
        self.delivery.clock().now_ms()
    }

    /// When a target counts as abandoned.
    pub fn abandonment(&self) -> Abandonment {
        Abandonment {
            after_ms: self.settings.abandon_after_ms,
            ttl_ms: self.settings.receipt_ttl_ms,
        }
    }
}

pub(super) fn json(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn unavailable(e: &StoreError) -> ApiError {
    tracing::warn!(error = %e, "signed push: the shared store did not answer");
    ApiError::unavailable()
}

pub(super) fn finish(route: Route, code: Code, started: Instant, resp: Response) -> Response {
    metrics::signed_request(route.as_str(), code.as_str(), started.elapsed());
    resp
}

/// The signer of `key_id`, active: 403 when unknown or revoked, 503 when the store fails.
pub(super) async fn signer(s: &Signed, key_id: &str) -> Result<Arc<Known>, ApiError> {
    let known = s
        .signers
        .get(key_id)
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(ApiError::unknown_signer)?;
    if known.signer.revoked_ms.is_some() {
        return Err(ApiError::revoked_signer());
    }
    Ok(known)
}

pub(super) fn verified(r: Result<(), sig::SigError>) -> Result<(), ApiError> {
    metrics::signature_verification(r.is_ok());
    r.map_err(ApiError::from)
}
