//! Push services: the delivery core knows a [`Push`], a service-neutral [`Notification`]
//! and the [`Verdict`] a service gives, never a service's wire format.
//!
//! - [`apns`]: Apple Push Notification service over HTTP/2 (the provider token, the client,
//!   the payloads, the typed reasons Apple gives and what they mean);
//! - [`fcm`]: Firebase Cloud Messaging HTTP v1 (the service account and its OAuth2 access
//!   token, the client, the data-only messages, the classification of Google's answers);
//! - [`frames`]: the request body both services' clients send, in DATA frames small enough
//!   that the requests waiting on a connection share one write;
//! - [`tls`]: the one TLS client configuration every outbound connection uses;
//! - `seam`: the service-neutral types this module re-exports, in a leaf of their own so
//!   that the services' modules use them without climbing back here.
//!
//! Every answer a service gives is classified into one of the [`VerdictClass`]es, which is
//! what the core acts on: delivered (done), retryable (queue it), token dead (forget the
//! device), relay misconfigured (an operator must act; never retried), rejected (this
//! request cannot succeed; never retried). The service's own reason rides along as a
//! [`Reason`] its module builds from its typed reasons: a bounded name for answers and
//! labels, and what the answer implies (bury the token, try the other environment, forget
//! the registration).

pub mod apns;
pub mod fcm;
pub mod frames;
mod seam;
pub mod tls;

pub use seam::{
    BoxFuture, EnvironmentMode, Kind, Notification, Payload, Priority, Push, Reason, Service,
    Verdict, VerdictClass,
};
