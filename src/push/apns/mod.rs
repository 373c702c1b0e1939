//! Apple Push Notification service: the provider token ([`token`]), the HTTP/2 client
//! ([`client`]), the request bodies ([`payload`]), and what Apple's answers mean
//! ([`classify`]).

pub mod client;
pub mod payload;
pub mod token;

use std::path::PathBuf;
use std::time::Duration;

use super::Verdict;
use crate::secret::Secret;

/// The APNs module's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// JWT `iss`: the developer team id.
    pub team_id: String,
    /// JWT header `kid`.
    pub key_id: String,
    /// The PKCS#8 PEM of the ES256 signing key.
    pub key_pem: Secret,
    /// The default `apns-topic`.
    pub topic: String,
    /// Production endpoint base URL, without a trailing slash.
    pub production_url: String,
    /// Sandbox endpoint base URL, without a trailing slash.
    pub sandbox_url: String,
    /// Extra trusted roots (PEM file).
    pub ca_file: Option<PathBuf>,
    /// One request's timeout, connection set-up included.
    pub request_timeout: Duration,
}

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

/// Classifies an HTTP answer from APNs.
pub fn classify(status: u16, reason: Option<&str>) -> Verdict {
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

/// A bounded label for a reason: the reason when Apple documents it, else `other` (`none`
/// when empty).
pub fn reason_label(reason: &str) -> &'static str {
    KNOWN_REASONS
        .iter()
        .find(|k| **k == reason)
        .copied()
        .unwrap_or(if reason.is_empty() { "none" } else { "other" })
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
        assert_eq!(classify(200, None), Verdict::Delivered);
        for r in TOKEN_REASONS {
            assert!(
                matches!(classify(400, Some(r)), Verdict::TokenRejected { .. }),
                "{r}"
            );
        }
        assert!(matches!(classify(410, None), Verdict::TokenRejected { .. }));
        for r in CREDENTIAL_REASONS {
            assert!(
                matches!(classify(403, Some(r)), Verdict::CredentialsRejected { .. }),
                "{r}"
            );
        }
        assert!(matches!(
            classify(400, Some("BadTopic")),
            Verdict::CredentialsRejected { .. }
        ));
        assert!(matches!(
            classify(403, None),
            Verdict::CredentialsRejected { .. }
        ));
        assert!(matches!(
            classify(429, Some("TooManyRequests")),
            Verdict::Throttled { .. }
        ));
        assert!(matches!(
            classify(503, Some("ServiceUnavailable")),
            Verdict::ServerError { status: 503, .. }
        ));
        assert!(matches!(
            classify(413, Some("PayloadTooLarge")),
            Verdict::Refused { status: 413, .. }
        ));
    }
}
