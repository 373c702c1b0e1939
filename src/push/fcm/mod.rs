//! Firebase Cloud Messaging (HTTP v1): wakes Android devices with data-only messages.
//!
//! - `auth`: the service account's JSON key ([`ServiceAccount`]), the RS256 JWT-bearer
//!   assertion, and the OAuth2 access token cache (one request in flight, replaced shortly
//!   before expiry);
//! - `message`: what a registration token may be ([`is_valid_registration_token`]) and the
//!   exact message JSON for a [`Notify`];
//! - `outcome`: what FCM's and the token endpoint's answers mean ([`FcmOutcome`], one per
//!   [`crate::push::VerdictClass`], with a bounded [`Reason`]);
//! - `client`: [`FcmClient`], HTTPS to FCM and the token endpoint (HTTP/2 or HTTP/1.1, as
//!   ALPN decides), each send bounded by [`SEND_TIMEOUT`];
//! - `error`: why a service account key is refused ([`ServiceAccountError`]).
//!
//! Only `UNREGISTERED` deletes a registration; a 400 `INVALID_ARGUMENT` is a payload error
//! and a bare 404 a wrong URL or project, never a dead device.
//!
//! Secrets never leave this module in text: the private key, the assertion, the access
//! token and the registration token appear in no `Debug`, error, log line or metric label.

mod auth;
mod client;
mod error;
mod message;
mod outcome;

/// What [`FcmOutcome::class`] returns, re-exported so the module's users name it here.
pub use super::VerdictClass;
pub use auth::{ServiceAccount, FCM_SCOPE};
pub(crate) use client::check_base_url;
pub use client::{FcmClient, Settings, DEFAULT_URL, SEND_TIMEOUT};
pub use error::ServiceAccountError;
pub use message::{is_valid_registration_token, Notify, MAX_ALERT_CHARS};
pub use outcome::{Failure, FcmOutcome, Reason, Stage};
