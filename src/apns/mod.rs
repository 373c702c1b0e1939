//! Delivery to Apple Push Notification service.
//!
//! - [`payload`] builds the request body;
//! - [`token`] signs and caches the provider JWT;
//! - [`client`] speaks HTTP/2 over TLS to APNs;
//! - this module names a notification and classifies APNs's answers.

pub mod client;
pub mod payload;
pub mod token;

use crate::envelope::{hex, Envelope, Priority};

/// How long a notification stays worth delivering: the protocol's staleness window. Apps
/// treat a payload older than 10 minutes as stale, so APNs may drop it after that too.
pub const STALENESS_S: u64 = 600;

/// Reasons that mean the device token is dead or belongs elsewhere.
pub const TOKEN_REASONS: &[&str] = &[
    "BadDeviceToken",
    "DeviceTokenNotForTopic",
    "Unregistered",
    "ExpiredToken",
];

/// Reasons that mean the relay's own credentials or topic are wrong.
pub const CREDENTIAL_REASONS: &[&str] = &[
    "InvalidProviderToken",
    "ExpiredProviderToken",
    "MissingProviderToken",
    "TopicDisallowed",
    "BadTopic",
    "Forbidden",
];

/// Everything one APNs request needs, derived from an accepted envelope.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The device token (path of the request).
    pub device: crate::envelope::DeviceToken,
    /// `apns-id`: the same for every attempt of this notification.
    pub apns_id: String,
    /// `apns-collapse-id`.
    pub collapse_id: String,
    /// `apns-priority` and the interruption level.
    pub priority: Priority,
    /// `apns-expiration`: acceptance + [`STALENESS_S`], Unix seconds.
    pub expiration_s: u64,
    /// The JSON body.
    pub body: bytes::Bytes,
}

impl Notification {
    /// `apns-priority`: 10 for time-sensitive, 5 for passive.
    pub fn priority_header(&self) -> u8 {
        match self.priority {
            Priority::TimeSensitive => 10,
            Priority::Passive => 5,
        }
    }

    /// Builds the notification for an envelope accepted at `accepted_s`.
    pub fn new(envelope: &Envelope, accepted_s: u64, title: &str, body: &str) -> Self {
        Self {
            device: envelope.device.clone(),
            apns_id: apns_id(envelope),
            collapse_id: envelope.collapse_id.as_str().to_owned(),
            priority: envelope.priority,
            expiration_s: accepted_s + STALENESS_S,
            body: payload::build(envelope, title, body).into(),
        }
    }
}

/// A UUID derived from the envelope (SHA-256 of device, collapseId and ciphertext), so every
/// attempt of one notification, on any replica, carries the same `apns-id`.
pub fn apns_id(envelope: &Envelope) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(envelope.device.expose().as_bytes());
    ctx.update(b"\n");
    ctx.update(envelope.collapse_id.as_str().as_bytes());
    ctx.update(b"\n");
    ctx.update(envelope.ciphertext.as_bytes());
    let d = ctx.finish();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d.as_ref()[..16]);
    // RFC 9562 version 8 (custom) with the RFC variant bits.
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// What APNs said, classified by what the relay must do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// 200: Apple accepted the notification.
    Delivered,
    /// The token is dead or not for this topic/environment (410, or a token reason). The
    /// daemon should forget the device; retrying cannot help.
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
    /// Classifies an HTTP answer from APNs.
    pub fn classify(status: u16, reason: Option<&str>) -> Self {
        let r = reason.unwrap_or("").to_owned();
        if status == 200 {
            return Verdict::Delivered;
        }
        if status == 410 || TOKEN_REASONS.contains(&r.as_str()) {
            return Verdict::TokenRejected { reason: r };
        }
        if status == 403 || CREDENTIAL_REASONS.contains(&r.as_str()) {
            return Verdict::CredentialsRejected { reason: r };
        }
        match status {
            429 => Verdict::Throttled { reason: r },
            500..=599 => Verdict::ServerError { status, reason: r },
            _ => Verdict::Refused { status, reason: r },
        }
    }

    /// Whether a later attempt may succeed: no answer, 5xx, or 429. Such a notification is
    /// queued for retry instead of being refused.
    pub fn transient(&self) -> bool {
        matches!(
            self,
            Verdict::Unreachable | Verdict::ServerError { .. } | Verdict::Throttled { .. }
        )
    }

    /// Whether trying another environment could help (auto mode).
    pub fn wrong_environment(&self) -> bool {
        matches!(self, Verdict::TokenRejected { reason } if reason == "BadDeviceToken" || reason == "DeviceTokenNotForTopic")
    }

    /// A bounded label for metrics: Apple's reason when it is one Apple documents.
    pub fn reason_label(&self) -> &'static str {
        let reason = match self {
            Verdict::Delivered => return "none",
            Verdict::Unreachable => return "unreachable",
            Verdict::TokenRejected { reason }
            | Verdict::CredentialsRejected { reason }
            | Verdict::Throttled { reason }
            | Verdict::ServerError { reason, .. }
            | Verdict::Refused { reason, .. } => reason.as_str(),
        };
        KNOWN_REASONS
            .iter()
            .find(|k| **k == reason)
            .copied()
            .unwrap_or(if reason.is_empty() { "none" } else { "other" })
    }
}

/// Every reason Apple documents for the HTTP/2 provider API, for bounded metric labels.
pub const KNOWN_REASONS: &[&str] = &[
    "BadCollapseId",
    "BadDeviceToken",
    "BadExpirationDate",
    "BadMessageId",
    "BadPriority",
    "BadTopic",
    "DeviceTokenNotForTopic",
    "DuplicateHeaders",
    "IdleTimeout",
    "InvalidPushType",
    "MissingDeviceToken",
    "MissingTopic",
    "PayloadEmpty",
    "TopicDisallowed",
    "BadCertificate",
    "BadCertificateEnvironment",
    "ExpiredProviderToken",
    "Forbidden",
    "InvalidProviderToken",
    "MissingProviderToken",
    "UnrelatedKeyIdInToken",
    "BadPath",
    "MethodNotAllowed",
    "ExpiredToken",
    "Unregistered",
    "PayloadTooLarge",
    "TooManyProviderTokenUpdates",
    "TooManyRequests",
    "InternalServerError",
    "ServiceUnavailable",
    "Shutdown",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_design() {
        assert_eq!(Verdict::classify(200, None), Verdict::Delivered);
        for r in TOKEN_REASONS {
            assert!(
                matches!(
                    Verdict::classify(400, Some(r)),
                    Verdict::TokenRejected { .. }
                ),
                "{r}"
            );
        }
        assert!(matches!(
            Verdict::classify(410, Some("Unregistered")),
            Verdict::TokenRejected { .. }
        ));
        assert!(matches!(
            Verdict::classify(410, None),
            Verdict::TokenRejected { .. }
        ));
        for r in CREDENTIAL_REASONS {
            assert!(
                matches!(
                    Verdict::classify(403, Some(r)),
                    Verdict::CredentialsRejected { .. }
                ),
                "{r}"
            );
        }
        assert!(matches!(
            Verdict::classify(400, Some("BadTopic")),
            Verdict::CredentialsRejected { .. }
        ));
        assert!(matches!(
            Verdict::classify(403, None),
            Verdict::CredentialsRejected { .. }
        ));
        assert!(matches!(
            Verdict::classify(429, Some("TooManyRequests")),
            Verdict::Throttled { .. }
        ));
        assert!(matches!(
            Verdict::classify(503, Some("ServiceUnavailable")),
            Verdict::ServerError { status: 503, .. }
        ));
        assert!(matches!(
            Verdict::classify(413, Some("PayloadTooLarge")),
            Verdict::Refused { status: 413, .. }
        ));
    }

    #[test]
    fn wrong_environment_only_for_the_two_reasons() {
        assert!(Verdict::classify(400, Some("BadDeviceToken")).wrong_environment());
        assert!(Verdict::classify(400, Some("DeviceTokenNotForTopic")).wrong_environment());
        assert!(!Verdict::classify(410, Some("Unregistered")).wrong_environment());
    }

    #[test]
    fn reason_labels_are_bounded() {
        assert_eq!(
            Verdict::classify(400, Some("BadCollapseId")).reason_label(),
            "BadCollapseId"
        );
        assert_eq!(
            Verdict::classify(400, Some("<script>token=abc")).reason_label(),
            "other"
        );
        assert_eq!(Verdict::classify(500, None).reason_label(), "none");
    }

    #[test]
    fn apns_id_is_a_stable_uuid() {
        let body = serde_json::json!({"v":1,"device":"ab".repeat(32),"ciphertext":"A".repeat(68),
            "collapseId":"93bc5d02dc2a24b5365347573b6f5115","priority":"passive","event":true});
        let e = crate::envelope::parse(&serde_json::to_vec(&body).unwrap(), 3800).unwrap();
        let id = apns_id(&e);
        assert_eq!(id, apns_id(&e));
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "8");
        let parts: Vec<_> = id.split('-').map(str::len).collect();
        assert_eq!(parts, vec![8, 4, 4, 4, 12]);
    }
}
