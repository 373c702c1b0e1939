//! Signed pushes with receipts (`/v2/pushes`, `SIGNED.md`): senders that can sign get
//! authenticated, idempotent pushes and a receipt that says, target by target, what became
//! of each.
//!
//! - [`canonical`]: RFC 8785 canonical JSON and the `sha256:` payload hash;
//! - [`request`]: the strict request parser into a typed [`request::SignedPush`] with its
//!   signed bytes and canonical hash; each target becomes a v1 [`crate::delivery::Alert`];
//! - [`sig`]: Ed25519 (ring): verification, key files, signing helpers, the read
//!   `Authorization` header, the freshness window;
//! - the HTTP surface, by route: [`front`] (the front-end's settings and the checks every
//!   route shares), `accept` (`POST /v2/pushes`), `reads` (a receipt read), `events` (its
//!   event stream); [`settle`] is what follows acceptance (the receipt, delivery, background
//!   settlement), [`labels`] the metrics' label sets.
//!
//! The pure parts do no I/O and read no clock: the handlers pass `now_ms` in.

pub mod abandoned;
mod accept;
pub mod canonical;
pub mod enrolment;
pub mod error;
mod events;
pub mod front;
pub mod labels;
pub mod queued;
mod reads;
pub mod receipt;
pub mod request;
pub mod settle;
pub mod sig;
pub mod signers;
mod takeover;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use error::{only, GET, POST};
use front::Signed;

/// The `/v2` routes.
pub fn routes(signed: Arc<Signed>) -> Router {
    Router::new()
        .route("/v2/pushes", post(accept::push).fallback(only(POST)))
        .route("/v2/pushes/{id}", get(reads::read).fallback(only(GET)))
        .route(
            "/v2/pushes/{id}/events",
            get(events::events).fallback(only(GET)),
        )
        .with_state(signed)
}

/// Strict base64: standard with padding, and URL-safe without (the crate's engines refuse
/// wrong padding, stray bytes and non-zero leftover bits).
pub(crate) mod b64 {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;

    /// Standard alphabet, padded.
    pub fn encode_std(bytes: &[u8]) -> String {
        STANDARD.encode(bytes)
    }

    /// Standard alphabet, padding required.
    pub fn decode_std(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
        STANDARD.decode(text)
    }

    /// URL-safe alphabet, no padding.
    pub fn encode_url_nopad(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// URL-safe alphabet, padding refused.
    pub fn decode_url_nopad(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
        URL_SAFE_NO_PAD.decode(text)
    }
}
