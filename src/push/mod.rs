//! Push services: the delivery core knows a [`Push`] and the verdict classes, never a
//! service's wire format.
//!
//! - [`apns`]: Apple Push Notification service over HTTP/2 (the provider token, the client,
//!   the payloads, the classification of Apple's answers);
//! - [`fcm`]: Firebase Cloud Messaging HTTP v1 (the service account and its OAuth2 access
//!   token, the client, the data-only messages, the classification of Google's answers);
//! - [`tls`]: the one TLS client configuration every outbound connection uses.
//!
//! Every answer a service gives is classified into one of the [`VerdictClass`]es, which is
//! what the core acts on: delivered (done), retryable (queue it), token dead (forget the
//! device), relay misconfigured (an operator must act; never retried), rejected (this
//! request cannot succeed; never retried).

pub mod apns;
pub mod fcm;
pub mod tls;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::device::{DeviceToken, Environment};

/// A boxed future, for the object-safe [`Push`] trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the core does about an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictClass {
    /// The service accepted the notification.
    Delivered,
    /// A later attempt may succeed (no answer, overload, throttling): queue and retry.
    Retryable,
    /// The device token is dead or belongs elsewhere: the sender should forget it.
    TokenDead,
    /// The service refuses the relay itself (credentials, topic): every request fails until
    /// an operator fixes the configuration. Never retried.
    Misconfigured,
    /// This request cannot succeed as it is (a payload the service refuses). Never retried.
    Rejected,
}

/// What APNs said, with the detail the callers' answers carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// 200: Apple accepted the notification.
    Delivered,
    /// The token is dead or not for this topic/environment (410, or a token reason). The
    /// sender should forget the device; retrying cannot help.
    TokenRejected {
        /// Apple's reason.
        reason: String,
    },
    /// Apple refused the relay's own credentials or topic (403, or a credential reason).
    /// Every request will fail until an operator fixes the configuration: never retried.
    CredentialsRejected {
        /// Apple's reason.
        reason: String,
    },
    /// 429: Apple throttles this device. Transient: worth retrying later.
    Throttled {
        /// Apple's reason.
        reason: String,
    },
    /// 5xx: Apple's side failed. Transient.
    ServerError {
        /// HTTP status.
        status: u16,
        /// Apple's reason, if any.
        reason: String,
    },
    /// Another 4xx: the request itself was refused (bad collapse id, payload too large...).
    /// Retrying the same request cannot help.
    Refused {
        /// HTTP status.
        status: u16,
        /// Apple's reason, if any.
        reason: String,
    },
    /// No answer: connection failure or timeout. Transient.
    Unreachable,
}

impl Verdict {
    /// The class the core acts on.
    pub fn class(&self) -> VerdictClass {
        match self {
            Verdict::Delivered => VerdictClass::Delivered,
            Verdict::Unreachable | Verdict::ServerError { .. } | Verdict::Throttled { .. } => {
                VerdictClass::Retryable
            }
            Verdict::TokenRejected { .. } => VerdictClass::TokenDead,
            Verdict::CredentialsRejected { .. } => VerdictClass::Misconfigured,
            Verdict::Refused { .. } => VerdictClass::Rejected,
        }
    }

    /// Whether a later attempt may succeed: such a notification is queued for retry.
    pub fn transient(&self) -> bool {
        self.class() == VerdictClass::Retryable
    }

    /// Whether trying APNs's other environment could help (auto mode).
    pub fn wrong_environment(&self) -> bool {
        matches!(self, Verdict::TokenRejected { reason } if reason == "BadDeviceToken" || reason == "DeviceTokenNotForTopic")
    }

    /// Apple's reason, or "" when there is none.
    pub fn reason(&self) -> &str {
        match self {
            Verdict::Delivered | Verdict::Unreachable => "",
            Verdict::TokenRejected { reason }
            | Verdict::CredentialsRejected { reason }
            | Verdict::Throttled { reason }
            | Verdict::ServerError { reason, .. }
            | Verdict::Refused { reason, .. } => reason,
        }
    }

    /// A bounded label for metrics: Apple's reason when it is one Apple documents.
    pub fn reason_label(&self) -> &'static str {
        match self {
            Verdict::Delivered => "none",
            Verdict::Unreachable => "unreachable",
            other => apns::reason_label(other.reason()),
        }
    }
}

/// The kind of an APNs notification (`apns-push-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A visible alert (`alert`).
    Alert,
    /// A background wake-up (`background`, content-available).
    Background,
}

/// One notification to one device, ready to send.
#[derive(Debug, Clone)]
pub struct Message {
    /// The device token (path of the request).
    pub device: DeviceToken,
    /// `apns-id`: the same for every attempt of this notification.
    pub id: String,
    /// `apns-topic`; `None` uses the module's configured topic.
    pub topic: Option<String>,
    /// `apns-push-type`.
    pub kind: Kind,
    /// `apns-priority` (10 or 5).
    pub priority: u8,
    /// `apns-collapse-id`, if any.
    pub collapse_id: Option<String>,
    /// `apns-expiration`, Unix seconds.
    pub expiration_s: u64,
    /// The JSON body.
    pub body: bytes::Bytes,
}

/// One exchange's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The classified answer.
    pub verdict: Verdict,
    /// HTTP status, 0 when unreachable.
    pub status: u16,
}

/// A push service the core sends through. Object-safe so tests can stand in a fake and the
/// core holds `Arc<dyn Push>`.
pub trait Push: Send + Sync + std::fmt::Debug {
    /// Sends one message to one environment, within `budget` (connection set-up included).
    /// An `ExpiredProviderToken` answer refreshes the provider token and retries once,
    /// within the same budget.
    fn send<'a>(
        &'a self,
        env: Environment,
        message: &'a Message,
        budget: Duration,
    ) -> BoxFuture<'a, Reply>;

    /// The longest one request may take (`APNS_REQUEST_TIMEOUT_MS`).
    fn request_timeout(&self) -> Duration;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let v = |s, r| apns::classify(s, Some(r));
        assert_eq!(Verdict::Delivered.class(), VerdictClass::Delivered);
        assert_eq!(v(410, "Unregistered").class(), VerdictClass::TokenDead);
        assert_eq!(
            v(403, "InvalidProviderToken").class(),
            VerdictClass::Misconfigured
        );
        assert_eq!(v(429, "TooManyRequests").class(), VerdictClass::Retryable);
        assert_eq!(
            v(503, "ServiceUnavailable").class(),
            VerdictClass::Retryable
        );
        assert_eq!(Verdict::Unreachable.class(), VerdictClass::Retryable);
        assert_eq!(v(413, "PayloadTooLarge").class(), VerdictClass::Rejected);
        assert!(v(400, "BadDeviceToken").wrong_environment());
        assert!(v(400, "DeviceTokenNotForTopic").wrong_environment());
        assert!(!v(410, "Unregistered").wrong_environment());
        assert_eq!(v(400, "BadCollapseId").reason_label(), "BadCollapseId");
        assert_eq!(v(400, "<script>token=abc").reason_label(), "other");
        assert_eq!(apns::classify(500, None).reason_label(), "none");
    }
}
