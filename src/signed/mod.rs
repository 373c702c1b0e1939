//! Signed pushes with receipts (`/v2/pushes`, `SIGNED.md`): senders that can sign get
//! authenticated, idempotent pushes and a receipt that says, target by target, what became
//! of each.
//!
//! - [`canonical`]: RFC 8785 canonical JSON and the `sha256:` payload hash;
//! - [`request`]: the strict request parser into a typed [`request::SignedPush`] with its
//!   signed bytes and canonical hash; each target becomes a v1 [`crate::delivery::Alert`];
//! - [`sig`]: Ed25519 (ring): verification, key files, signing helpers, the read
//!   `Authorization` header, the freshness window.
//!
//! The pure parts do no I/O and read no clock: the handlers pass `now_ms` in.

pub mod abandoned;
pub mod api;
pub mod canonical;
pub mod error;
pub mod receipt;
pub mod request;
pub mod sig;
pub mod signers;

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
