//! The reasons Apple gives ([`Reason`], typed, `other` for one it does not document) and
//! what an answer means to the core ([`classify`]).

use crate::policy::DeadReason;
use crate::push::{Verdict, VerdictClass};

/// A reason Apple documents for the HTTP/2 provider API (`{"reason":"..."}` of an error
/// answer), or [`Reason::Other`] for one it does not. Metric labels and receipts use
/// [`Reason::as_str`], so they stay bounded whatever Apple (or a proxy) sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
pub enum Reason {
    /// `BadCollapseId`.
    BadCollapseId,
    /// `BadDeviceToken`.
    BadDeviceToken,
    /// `BadExpirationDate`.
    BadExpirationDate,
    /// `BadMessageId`.
    BadMessageId,
    /// `BadPriority`.
    BadPriority,
    /// `BadTopic`.
    BadTopic,
    /// `DeviceTokenNotForTopic`.
    DeviceTokenNotForTopic,
    /// `DuplicateHeaders`.
    DuplicateHeaders,
    /// `IdleTimeout`.
    IdleTimeout,
    /// `InvalidPushType`.
    InvalidPushType,
    /// `MissingDeviceToken`.
    MissingDeviceToken,
    /// `MissingTopic`.
    MissingTopic,
    /// `PayloadEmpty`.
    PayloadEmpty,
    /// `TopicDisallowed`.
    TopicDisallowed,
    /// `BadCertificate`.
    BadCertificate,
    /// `BadCertificateEnvironment`.
    BadCertificateEnvironment,
    /// `ExpiredProviderToken`.
    ExpiredProviderToken,
    /// `Forbidden`.
    Forbidden,
    /// `InvalidProviderToken`.
    InvalidProviderToken,
    /// `MissingProviderToken`.
    MissingProviderToken,
    /// `UnrelatedKeyIdInToken`.
    UnrelatedKeyIdInToken,
    /// `BadPath`.
    BadPath,
    /// `MethodNotAllowed`.
    MethodNotAllowed,
    /// `ExpiredToken`.
    ExpiredToken,
    /// `Unregistered`.
    Unregistered,
    /// `PayloadTooLarge`.
    PayloadTooLarge,
    /// `TooManyProviderTokenUpdates`.
    TooManyProviderTokenUpdates,
    /// `TooManyRequests`.
    TooManyRequests,
    /// `InternalServerError`.
    InternalServerError,
    /// `ServiceUnavailable`.
    ServiceUnavailable,
    /// `Shutdown`.
    Shutdown,
    /// A reason Apple does not document (labelled `other`).
    #[serde(other)]
    Other,
}

impl Reason {
    /// Every documented reason, for bounded metric labels (the metrics module registers
    /// its series from here).
    #[allow(dead_code)]
    pub const ALL: [Reason; 31] = [
        Reason::BadCollapseId,
        Reason::BadDeviceToken,
        Reason::BadExpirationDate,
        Reason::BadMessageId,
        Reason::BadPriority,
        Reason::BadTopic,
        Reason::DeviceTokenNotForTopic,
        Reason::DuplicateHeaders,
        Reason::IdleTimeout,
        Reason::InvalidPushType,
        Reason::MissingDeviceToken,
        Reason::MissingTopic,
        Reason::PayloadEmpty,
        Reason::TopicDisallowed,
        Reason::BadCertificate,
        Reason::BadCertificateEnvironment,
        Reason::ExpiredProviderToken,
        Reason::Forbidden,
        Reason::InvalidProviderToken,
        Reason::MissingProviderToken,
        Reason::UnrelatedKeyIdInToken,
        Reason::BadPath,
        Reason::MethodNotAllowed,
        Reason::ExpiredToken,
        Reason::Unregistered,
        Reason::PayloadTooLarge,
        Reason::TooManyProviderTokenUpdates,
        Reason::TooManyRequests,
        Reason::InternalServerError,
        Reason::ServiceUnavailable,
        Reason::Shutdown,
    ];

    /// Apple's name for the reason; `other` for one it does not document.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadCollapseId => "BadCollapseId",
            Reason::BadDeviceToken => "BadDeviceToken",
            Reason::BadExpirationDate => "BadExpirationDate",
            Reason::BadMessageId => "BadMessageId",
            Reason::BadPriority => "BadPriority",
            Reason::BadTopic => "BadTopic",
            Reason::DeviceTokenNotForTopic => "DeviceTokenNotForTopic",
            Reason::DuplicateHeaders => "DuplicateHeaders",
            Reason::IdleTimeout => "IdleTimeout",
            Reason::InvalidPushType => "InvalidPushType",
            Reason::MissingDeviceToken => "MissingDeviceToken",
            Reason::MissingTopic => "MissingTopic",
            Reason::PayloadEmpty => "PayloadEmpty",
            Reason::TopicDisallowed => "TopicDisallowed",
            Reason::BadCertificate => "BadCertificate",
            Reason::BadCertificateEnvironment => "BadCertificateEnvironment",
            Reason::ExpiredProviderToken => "ExpiredProviderToken",
            Reason::Forbidden => "Forbidden",
            Reason::InvalidProviderToken => "InvalidProviderToken",
            Reason::MissingProviderToken => "MissingProviderToken",
            Reason::UnrelatedKeyIdInToken => "UnrelatedKeyIdInToken",
            Reason::BadPath => "BadPath",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::ExpiredToken => "ExpiredToken",
            Reason::Unregistered => "Unregistered",
            Reason::PayloadTooLarge => "PayloadTooLarge",
            Reason::TooManyProviderTokenUpdates => "TooManyProviderTokenUpdates",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalServerError => "InternalServerError",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::Shutdown => "Shutdown",
            Reason::Other => "other",
        }
    }

    /// The tombstone a token refused for this reason earns, for the reasons that say it
    /// will never work again.
    pub fn buries(self) -> Option<DeadReason> {
        match self {
            Reason::Unregistered => Some(DeadReason::Uninstalled),
            Reason::ExpiredToken => Some(DeadReason::Expired),
            Reason::BadDeviceToken => Some(DeadReason::Foreign),
            _ => None,
        }
    }

    /// The class a reason decides whatever the status: the device token is dead or
    /// belongs elsewhere, or the relay's own credentials or topic are wrong. `None`: the
    /// status decides.
    pub fn class(self) -> Option<VerdictClass> {
        match self {
            // The token is dead, or not for this topic or environment: forget the device
            // (or, in auto mode, try the other environment first).
            Reason::BadDeviceToken
            | Reason::DeviceTokenNotForTopic
            | Reason::Unregistered
            | Reason::ExpiredToken => Some(VerdictClass::TokenDead),
            // The relay's provider token or topic: an operator must act.
            Reason::InvalidProviderToken
            | Reason::ExpiredProviderToken
            | Reason::MissingProviderToken
            | Reason::TopicDisallowed
            | Reason::BadTopic
            | Reason::Forbidden => Some(VerdictClass::Misconfigured),
            _ => None,
        }
    }

    /// Whether the token may belong to APNs's other environment.
    pub fn wrong_environment(self) -> bool {
        matches!(
            self,
            Reason::BadDeviceToken | Reason::DeviceTokenNotForTopic
        )
    }

    /// Whether the token is malformed for the environment that answered.
    pub fn bad_token(self) -> bool {
        self == Reason::BadDeviceToken
    }

    /// The reason as the core reads it: Apple's name, the tombstone it earns, and whether
    /// the other environment may take the token. (Whether a registration is forgotten
    /// depends on the status too: [`classify`] adds it.)
    pub fn to_push(self) -> crate::push::Reason {
        let said = crate::push::Reason::named(self.as_str());
        let said = match self.buries() {
            Some(dead) => said.burying(dead),
            None => said,
        };
        if self.wrong_environment() {
            said.other_environment(self.bad_token())
        } else {
            said
        }
    }

    /// Whether a fresh provider token may fix the answer (retried once).
    pub fn expired_provider_token(self) -> bool {
        self == Reason::ExpiredProviderToken
    }
}

/// Classifies an HTTP answer from APNs: a token or credential reason decides first, then
/// 410 (token dead), 403 (credentials), 429 and 5xx (retryable), and any other status is
/// a refusal of this request.
pub fn classify(status: u16, reason: Option<Reason>) -> Verdict {
    if status == 200 {
        return Verdict::DELIVERED;
    }
    let by_reason = reason.and_then(Reason::class);
    let class = match (status, by_reason) {
        (410, _) | (_, Some(VerdictClass::TokenDead)) => VerdictClass::TokenDead,
        (403, _) | (_, Some(VerdictClass::Misconfigured)) => VerdictClass::Misconfigured,
        (429, _) | (500..=599, _) => VerdictClass::Retryable,
        _ => VerdictClass::Rejected,
    };
    let said = reason.map_or(crate::push::Reason::NONE, Reason::to_push);
    // A mailbox registration is forgotten on a 410, or on `BadDeviceToken`.
    let forgets = status == 410 || reason.is_some_and(Reason::bad_token);
    Verdict {
        class,
        status,
        reason: if forgets { said.forgetting() } else { said },
    }
}

/// How APNs spells the reason a token was buried for, as a 410 answered from memory and a
/// signed receipt repeat it.
pub fn spelling(dead: DeadReason) -> &'static str {
    match dead {
        DeadReason::Uninstalled => "Unregistered",
        DeadReason::Expired => "ExpiredToken",
        DeadReason::Foreign => "BadDeviceToken",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The reason as Apple's answer names it.
    pub(crate) fn parse(s: &str) -> Reason {
        serde_json::from_value(serde_json::Value::from(s)).unwrap()
    }

    #[test]
    fn classes() {
        let v = |s, r| classify(s, Some(parse(r)));
        assert_eq!(Verdict::DELIVERED.class(), VerdictClass::Delivered);
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
        assert_eq!(Verdict::UNREACHABLE.class(), VerdictClass::Retryable);
        assert_eq!(v(413, "PayloadTooLarge").class(), VerdictClass::Rejected);
        assert!(v(400, "BadDeviceToken").wrong_environment());
        assert!(v(400, "DeviceTokenNotForTopic").wrong_environment());
        assert!(!v(410, "Unregistered").wrong_environment());
        assert_eq!(v(400, "BadCollapseId").reason_label(), "BadCollapseId");
        assert_eq!(v(400, "<script>token=abc").reason_label(), "other");
        assert_eq!(classify(500, None).reason_label(), "none");
    }

    /// One answer and what the core reads off it.
    struct Case {
        name: &'static str,
        status: u16,
        reason: Option<&'static str>,
        label: &'static str,
        buries: Option<DeadReason>,
        other_environment: bool,
        malformed: bool,
        forgets: bool,
    }

    const fn case(name: &'static str, status: u16, reason: Option<&'static str>) -> Case {
        Case {
            name,
            status,
            reason,
            label: "none",
            buries: None,
            other_environment: false,
            malformed: false,
            forgets: false,
        }
    }

    /// What the core reads off an answer, one row per case: the label, whether the token
    /// is buried, tried in the other environment, malformed, and the registration forgotten.
    #[test]
    fn what_an_answer_tells_the_core() {
        let bad = Some("BadDeviceToken");
        let cases = [
            Case {
                forgets: true,
                ..case("410 without a body", 410, None)
            },
            case("500 without a body", 500, None),
            Case {
                label: "BadDeviceToken",
                buries: Some(DeadReason::Foreign),
                other_environment: true,
                malformed: true,
                forgets: true,
                ..case("bad token", 400, bad)
            },
            Case {
                label: "DeviceTokenNotForTopic",
                other_environment: true,
                ..case("not for topic", 400, Some("DeviceTokenNotForTopic"))
            },
            Case {
                label: "Unregistered",
                buries: Some(DeadReason::Uninstalled),
                forgets: true,
                ..case("unregistered", 410, Some("Unregistered"))
            },
            Case {
                label: "ExpiredToken",
                buries: Some(DeadReason::Expired),
                ..case("expired token on a 400", 400, Some("ExpiredToken"))
            },
            Case {
                label: "other",
                ..case("unknown reason", 400, Some("Whatever"))
            },
        ];
        for c in cases {
            let v = classify(c.status, c.reason.map(parse));
            let name = c.name;
            assert_eq!(v.reason_label(), c.label, "{name}");
            assert_eq!(v.reason.text(), c.reason.map_or("", |_| c.label), "{name}");
            assert_eq!(v.reason.buries(), c.buries, "{name}");
            assert_eq!(v.wrong_environment(), c.other_environment, "{name}");
            assert_eq!(v.bad_token(), c.malformed, "{name}");
            assert_eq!(v.forgets_registration(), c.forgets, "{name}");
        }
    }

    #[test]
    fn only_the_reasons_of_a_dead_token_bury_it() {
        for (reason, dead) in [
            ("Unregistered", Some(DeadReason::Uninstalled)),
            ("ExpiredToken", Some(DeadReason::Expired)),
            ("BadDeviceToken", Some(DeadReason::Foreign)),
            ("DeviceTokenNotForTopic", None),
            ("TooManyRequests", None),
            ("InvalidProviderToken", None),
            ("SomethingApplePlansNext", None),
        ] {
            assert_eq!(parse(reason).buries(), dead, "{reason}");
            if let Some(d) = dead {
                // The 410 body quotes Apple's own name for it.
                assert_eq!(spelling(d), reason);
            }
        }
    }

    /// Reasons that mean the device token is dead or belongs elsewhere.
    const TOKEN_REASONS: &[&str] = &[
        "BadDeviceToken",
        "DeviceTokenNotForTopic",
        "Unregistered",
        "ExpiredToken",
    ];

    /// Reasons that mean the relay's own credentials or topic are wrong.
    const CREDENTIAL_REASONS: &[&str] = &[
        "InvalidProviderToken",
        "ExpiredProviderToken",
        "MissingProviderToken",
        "TopicDisallowed",
        "BadTopic",
        "Forbidden",
    ];

    fn c(status: u16, reason: Option<&str>) -> Verdict {
        classify(status, reason.map(parse))
    }

    #[test]
    fn classification_follows_design() {
        assert_eq!(c(200, None), Verdict::DELIVERED);
        for r in TOKEN_REASONS {
            assert_eq!(c(400, Some(r)).class, VerdictClass::TokenDead, "{r}");
        }
        assert_eq!(c(410, None).class, VerdictClass::TokenDead);
        for r in CREDENTIAL_REASONS {
            assert_eq!(c(403, Some(r)).class, VerdictClass::Misconfigured, "{r}");
        }
        assert_eq!(c(400, Some("BadTopic")).class, VerdictClass::Misconfigured);
        assert_eq!(c(403, None).class, VerdictClass::Misconfigured);
        let throttled = c(429, Some("TooManyRequests"));
        assert_eq!(
            (throttled.class, throttled.status),
            (VerdictClass::Retryable, 429)
        );
        let server = c(503, Some("ServiceUnavailable"));
        assert_eq!(
            (server.class, server.status),
            (VerdictClass::Retryable, 503)
        );
        let refused = c(413, Some("PayloadTooLarge"));
        assert_eq!(
            (refused.class, refused.status),
            (VerdictClass::Rejected, 413)
        );
        // Only those reasons decide a class of their own.
        for r in Reason::ALL {
            let listed =
                TOKEN_REASONS.contains(&r.as_str()) || CREDENTIAL_REASONS.contains(&r.as_str());
            assert_eq!(r.class().is_some(), listed, "{r:?}");
        }
    }

    #[test]
    fn reasons_parse_from_apples_answers() {
        for r in Reason::ALL {
            assert_eq!(parse(r.as_str()), r);
            let body = format!(r#"{{"reason":"{}"}}"#, r.as_str());
            let parsed: std::collections::HashMap<String, Reason> =
                serde_json::from_str(&body).unwrap();
            assert_eq!(parsed["reason"], r);
        }
        let unknown: std::collections::HashMap<String, Reason> =
            serde_json::from_str(r#"{"reason":"<script>token=abc"}"#).unwrap();
        assert_eq!(unknown["reason"], Reason::Other);
        assert_eq!(Reason::Other.as_str(), "other");
    }
}
