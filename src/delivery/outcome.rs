//! One vocabulary for how a request ended, delivery outcomes and intake failures alike.
//! Each outcome knows, in one place, its HTTP status, its body in the hosted reference
//! relay's v1 shape, its `Retry-After`, and its bounded metric label; signed pushes map the
//! delivery outcomes onto receipt states instead.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::push::Reason;
use crate::store::receipts::State;

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// APNs accepted it.
    Forwarded,
    /// Dry run (`RELAY_DRY_RUN=true`, no credentials): logged, not sent; v1 answers it as
    /// forwarded.
    DryRun,
    /// Duplicate within the dedup window, or while its forward waits in the retry queue.
    Coalesced,
    /// Held by flap suppression.
    Suppressed,
    /// The device's bucket is empty.
    RateLimited {
        /// Seconds until a token is back.
        retry_after_s: u64,
    },
    /// APNs rejected the device token just now.
    TokenRejected {
        /// The service's reason.
        reason: Reason,
    },
    /// The token is in the dead-token memory: answered like APNs answered it, without
    /// asking APNs again (counted apart from APNs's own answers).
    TokenRemembered {
        /// Apple's reason when it was buried.
        reason: &'static str,
    },
    /// APNs throttled the device (429) and the notification could not be queued.
    ApnsThrottled {
        /// The service's reason.
        reason: Reason,
    },
    /// APNs rejected the relay's credentials.
    CredentialsRejected {
        /// The service's reason.
        reason: Reason,
    },
    /// No answer from APNs, and the notification could not be queued.
    ApnsUnreachable,
    /// Any other APNs error.
    ApnsError {
        /// APNs's HTTP status.
        status: u16,
        /// The service's reason.
        reason: Reason,
    },
    /// No APNs credentials and not a dry run.
    NotConfigured,
    /// The policy store could not answer.
    StoreUnavailable,
    /// APNs failed transiently; the notification waits in the retry queue.
    Queued,
    /// Too many requests in flight (`RELAY_MAX_INFLIGHT`).
    Overloaded,
    /// The sending client's address is over its bucket.
    ClientRateLimited {
        /// Seconds until a token is back.
        retry_after_s: u64,
    },
    /// The body is over 8192 bytes (declared or actual).
    TooLarge,
    /// The body could not be read (the connection broke mid-body).
    Unreadable,
    /// The body did not arrive within `RELAY_BODY_TIMEOUT_MS`.
    Timeout,
    /// The envelope broke a rule; the text names the field.
    Invalid(String),
    /// No such path.
    NotFound,
    /// Another method on a known path; `allow` is the `Allow` header.
    MethodNotAllowed {
        /// The methods the path takes.
        allow: &'static str,
    },
    /// Unsigned pushes are not taken here (`RELAY_V1_INTAKE`).
    IntakeDisabled {
        /// Why: the text of the 403.
        text: &'static str,
    },
}

/// Every label with the status it is answered with, for the series registered at start-up.
pub const LABELS: &[(&str, &str)] = &[
    ("forwarded", "202"),
    ("dry_run", "202"),
    ("coalesced", "202"),
    ("suppressed", "202"),
    ("queued", "202"),
    ("rate_limited", "429"),
    ("token_rejected", "410"),
    ("token_remembered", "410"),
    ("apns_throttled", "429"),
    ("credentials_rejected", "502"),
    ("apns_unreachable", "502"),
    ("apns_error", "502"),
    ("not_configured", "502"),
    ("store_unavailable", "503"),
    ("overloaded", "503"),
    ("client_rate_limited", "429"),
    ("too_large", "413"),
    ("unreadable", "400"),
    ("timeout", "408"),
    ("invalid", "400"),
    ("not_found", "404"),
    ("method_not_allowed", "405"),
    ("intake_disabled", "403"),
];

impl Outcome {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Forwarded
            | Outcome::DryRun
            | Outcome::Coalesced
            | Outcome::Suppressed
            | Outcome::Queued => StatusCode::ACCEPTED,
            Outcome::RateLimited { .. }
            | Outcome::ApnsThrottled { .. }
            | Outcome::ClientRateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Outcome::TokenRejected { .. } | Outcome::TokenRemembered { .. } => StatusCode::GONE,
            Outcome::CredentialsRejected { .. }
            | Outcome::ApnsUnreachable
            | Outcome::ApnsError { .. }
            | Outcome::NotConfigured => StatusCode::BAD_GATEWAY,
            Outcome::StoreUnavailable | Outcome::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Outcome::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Outcome::Unreadable | Outcome::Invalid(_) => StatusCode::BAD_REQUEST,
            Outcome::Timeout => StatusCode::REQUEST_TIMEOUT,
            Outcome::NotFound => StatusCode::NOT_FOUND,
            Outcome::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Outcome::IntakeDisabled { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// The JSON body of the answer, in the reference relay's shape.
    pub fn body(&self) -> Value {
        let error = |text: &str| json!({"v": 1, "error": text});
        match self {
            Outcome::Forwarded | Outcome::DryRun => json!({"v": 1, "outcome": "forwarded"}),
            Outcome::Coalesced => json!({"v": 1, "outcome": "coalesced"}),
            Outcome::Suppressed => json!({"v": 1, "outcome": "suppressed"}),
            Outcome::Queued => json!({"v": 1, "outcome": "queued"}),
            Outcome::RateLimited { .. } => error("device is rate limited"),
            Outcome::TokenRejected { reason } => {
                json!({"v": 1, "error": "device token rejected by APNs", "reason": reason.text()})
            }
            Outcome::TokenRemembered { reason } => {
                json!({"v": 1, "error": "device token rejected by APNs", "reason": reason})
            }
            Outcome::ApnsThrottled { reason } => {
                json!({"v": 1, "error": "APNs rate limited this device", "reason": reason.text()})
            }
            Outcome::CredentialsRejected { reason } => {
                json!({"v": 1, "error": "relay APNs credentials rejected", "reason": reason.text()})
            }
            Outcome::ApnsUnreachable => error("APNs unreachable"),
            Outcome::ApnsError { status, reason } => {
                json!({"v": 1, "error": "APNs error", "apnsStatus": status, "reason": reason.text()})
            }
            Outcome::NotConfigured => error("relay is not configured for APNs delivery"),
            Outcome::StoreUnavailable => error("relay state unavailable"),
            Outcome::Overloaded => error("relay overloaded"),
            Outcome::ClientRateLimited { .. } => error("client is rate limited"),
            Outcome::TooLarge => error("body too large"),
            Outcome::Unreadable => error("body could not be read"),
            Outcome::Timeout => error("body not received in time"),
            Outcome::Invalid(text) => error(text),
            Outcome::NotFound => error("not found"),
            Outcome::MethodNotAllowed { .. } => error("method not allowed"),
            Outcome::IntakeDisabled { text } => error(text),
        }
    }

    /// `Retry-After` seconds, when the answer carries one.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Outcome::RateLimited { retry_after_s }
            | Outcome::ClientRateLimited { retry_after_s } => Some(*retry_after_s),
            Outcome::StoreUnavailable | Outcome::Overloaded => Some(1),
            _ => None,
        }
    }

    /// The bounded metric label and log name.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::DryRun => "dry_run",
            Outcome::Coalesced => "coalesced",
            Outcome::Suppressed => "suppressed",
            Outcome::RateLimited { .. } => "rate_limited",
            Outcome::TokenRejected { .. } => "token_rejected",
            Outcome::TokenRemembered { .. } => "token_remembered",
            Outcome::ApnsThrottled { .. } => "apns_throttled",
            Outcome::CredentialsRejected { .. } => "credentials_rejected",
            Outcome::ApnsUnreachable => "apns_unreachable",
            Outcome::ApnsError { .. } => "apns_error",
            Outcome::NotConfigured => "not_configured",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Queued => "queued",
            Outcome::Overloaded => "overloaded",
            Outcome::ClientRateLimited { .. } => "client_rate_limited",
            Outcome::TooLarge => "too_large",
            Outcome::Unreadable => "unreadable",
            Outcome::Timeout => "timeout",
            Outcome::Invalid(_) => "invalid",
            Outcome::NotFound => "not_found",
            Outcome::MethodNotAllowed { .. } => "method_not_allowed",
            Outcome::IntakeDisabled { .. } => "intake_disabled",
        }
    }
}

impl Outcome {
    /// What a signed push's receipt records for a target whose first outcome this is: its
    /// state and the extra JSON members (`retryAfterS`, `failure`), from bounded values only
    /// (Apple's reasons as their documented names or `other`).
    pub fn receipt_state(&self) -> (State, String) {
        let failure = |status: Option<u16>, reason: &str| match status {
            Some(s) => format!(r#""failure":{{"apnsStatus":{s},"reason":"{reason}"}}"#),
            None => format!(r#""failure":{{"reason":"{reason}"}}"#),
        };
        let relay = |why: &str| format!(r#""failure":{{"reason":"{why}"}}"#);
        match self {
            Outcome::Forwarded => (State::Delivered, String::new()),
            Outcome::DryRun => (State::DryRun, String::new()),
            Outcome::Coalesced => (State::Coalesced, String::new()),
            Outcome::Suppressed => (State::Suppressed, String::new()),
            Outcome::Queued => (State::Queued, String::new()),
            Outcome::RateLimited { retry_after_s } => (
                State::RateLimited,
                format!(r#""retryAfterS":{retry_after_s}"#),
            ),
            Outcome::TokenRejected { reason } => (State::Rejected, failure(None, reason.label())),
            Outcome::TokenRemembered { reason } => (State::Rejected, failure(None, reason)),
            Outcome::CredentialsRejected { reason } => {
                (State::Failed, failure(Some(403), reason.label()))
            }
            Outcome::ApnsThrottled { reason } => {
                (State::Failed, failure(Some(429), reason.label()))
            }
            Outcome::ApnsError { status, reason } => {
                (State::Failed, failure(Some(*status), reason.label()))
            }
            other => (State::Failed, relay(other.label())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_states_carry_only_bounded_details() {
        assert_eq!(Outcome::Forwarded.receipt_state().0, State::Delivered);
        assert_eq!(Outcome::DryRun.receipt_state().0, State::DryRun);
        assert_eq!(
            Outcome::RateLimited { retry_after_s: 7 }.receipt_state(),
            (State::RateLimited, r#""retryAfterS":7"#.to_owned())
        );
        let apns = |r| Reason::Apns(crate::push::apns::tests::parse(r));
        let (s, d) = Outcome::ApnsError {
            status: 500,
            reason: apns("<script>x"),
        }
        .receipt_state();
        assert_eq!(s, State::Failed);
        assert_eq!(d, r#""failure":{"apnsStatus":500,"reason":"other"}"#);
        let (s, d) = Outcome::TokenRejected {
            reason: apns("Unregistered"),
        }
        .receipt_state();
        assert_eq!(
            (s, d.as_str()),
            (State::Rejected, r#""failure":{"reason":"Unregistered"}"#)
        );
        assert_eq!(
            Outcome::NotConfigured.receipt_state().1,
            r#""failure":{"reason":"not_configured"}"#
        );
        // Every detail is valid JSON inside an object.
        for o in [
            Outcome::ApnsUnreachable,
            Outcome::StoreUnavailable,
            Outcome::Queued,
        ] {
            let (_, d) = o.receipt_state();
            let obj = format!(
                "{{\"state\":\"x\"{}{d}}}",
                if d.is_empty() { "" } else { "," }
            );
            serde_json::from_str::<serde_json::Value>(&obj).unwrap();
        }
    }

    /// Every outcome's (label, status) is registered at start-up.
    #[test]
    fn every_outcome_is_in_the_registered_labels() {
        let all = [
            Outcome::Forwarded,
            Outcome::DryRun,
            Outcome::Coalesced,
            Outcome::Suppressed,
            Outcome::RateLimited { retry_after_s: 1 },
            Outcome::TokenRejected {
                reason: Reason::None,
            },
            Outcome::TokenRemembered {
                reason: "Unregistered",
            },
            Outcome::ApnsThrottled {
                reason: Reason::None,
            },
            Outcome::CredentialsRejected {
                reason: Reason::None,
            },
            Outcome::ApnsUnreachable,
            Outcome::ApnsError {
                status: 500,
                reason: Reason::None,
            },
            Outcome::NotConfigured,
            Outcome::StoreUnavailable,
            Outcome::Queued,
            Outcome::Overloaded,
            Outcome::ClientRateLimited { retry_after_s: 1 },
            Outcome::TooLarge,
            Outcome::Unreadable,
            Outcome::Timeout,
            Outcome::Invalid("x".into()),
            Outcome::NotFound,
            Outcome::MethodNotAllowed { allow: "GET" },
            Outcome::IntakeDisabled { text: "x" },
        ];
        assert_eq!(all.len(), LABELS.len());
        for o in &all {
            let status = o.status();
            let pair = (o.label(), status.as_str());
            assert!(LABELS.contains(&pair), "{pair:?}");
        }
    }
}
