//! The v1 answers, in the hosted reference relay's shape: what the delivery core made of
//! an alert, or why the intake refused it before the core saw it. Each answer knows, in
//! one place, its HTTP status, its `{"v":1,...}` body, its `Retry-After`, and its bounded
//! metric label.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::delivery::Outcome;
use crate::push::{Reason, Verdict, VerdictClass};

/// How a v1 request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The delivery core took the alert: what happened to it.
    Delivered(Outcome),
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

/// How v1 names a service's failure verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The token is dead (410).
    TokenRejected(Reason),
    /// The service throttled the device (429) and the alert could not be queued.
    Throttled(Reason),
    /// The service refused the relay's credentials or topic.
    CredentialsRejected(Reason),
    /// No answer, and the alert could not be queued.
    Unreachable,
    /// Any other error: its status and reason.
    Error(u16, Reason),
}

impl Failure {
    fn of(v: Verdict) -> Self {
        match v.class {
            VerdictClass::TokenDead => Failure::TokenRejected(v.reason),
            VerdictClass::Misconfigured => Failure::CredentialsRejected(v.reason),
            VerdictClass::Retryable if v.status == 429 => Failure::Throttled(v.reason),
            VerdictClass::Retryable if v.status == 0 => Failure::Unreachable,
            _ => Failure::Error(v.status, v.reason),
        }
    }
}

impl From<Outcome> for Answer {
    fn from(o: Outcome) -> Self {
        Answer::Delivered(o)
    }
}

impl Answer {
    /// The HTTP status of the answer.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Answer::Delivered(o) => match o {
                Outcome::Forwarded
                | Outcome::DryRun
                | Outcome::Coalesced
                | Outcome::Suppressed
                | Outcome::Queued => StatusCode::ACCEPTED,
                Outcome::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
                Outcome::Remembered(_) => StatusCode::GONE,
                Outcome::Failed(v) => match Failure::of(*v) {
                    Failure::TokenRejected(_) => StatusCode::GONE,
                    Failure::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
                    Failure::CredentialsRejected(_) | Failure::Unreachable | Failure::Error(..) => {
                        StatusCode::BAD_GATEWAY
                    }
                },
                Outcome::NotConfigured => StatusCode::BAD_GATEWAY,
                Outcome::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            },
            Answer::ClientRateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Answer::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Answer::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Answer::Unreadable | Answer::Invalid(_) => StatusCode::BAD_REQUEST,
            Answer::Timeout => StatusCode::REQUEST_TIMEOUT,
            Answer::NotFound => StatusCode::NOT_FOUND,
            Answer::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Answer::IntakeDisabled { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// The JSON body of the answer, in the reference relay's shape.
    /// The body of the answers every request of a healthy relay gets, as written bytes: no
    /// JSON value is built for them ([`Answer::body`] gives the same text).
    fn fixed_body(&self) -> Option<&'static str> {
        match self {
            Answer::Delivered(Outcome::Forwarded | Outcome::DryRun) => {
                Some(r#"{"v":1,"outcome":"forwarded"}"#)
            }
            Answer::Delivered(Outcome::Coalesced) => Some(r#"{"v":1,"outcome":"coalesced"}"#),
            Answer::Delivered(Outcome::Suppressed) => Some(r#"{"v":1,"outcome":"suppressed"}"#),
            Answer::Delivered(Outcome::Queued) => Some(r#"{"v":1,"outcome":"queued"}"#),
            _ => None,
        }
    }

    pub(crate) fn body(&self) -> Value {
        let error = |text: &str| json!({"v": 1, "error": text});
        let rejected = |reason: &str| json!({"v": 1, "error": "device token rejected by APNs", "reason": reason});
        match self {
            Answer::Delivered(o) => match o {
                Outcome::Forwarded | Outcome::DryRun => json!({"v": 1, "outcome": "forwarded"}),
                Outcome::Coalesced => json!({"v": 1, "outcome": "coalesced"}),
                Outcome::Suppressed => json!({"v": 1, "outcome": "suppressed"}),
                Outcome::Queued => json!({"v": 1, "outcome": "queued"}),
                Outcome::RateLimited { .. } => error("device is rate limited"),
                Outcome::Remembered(reason) => {
                    rejected(crate::push::apns::reason::spelling(*reason))
                }
                Outcome::Failed(v) => match Failure::of(*v) {
                    Failure::TokenRejected(reason) => rejected(reason.text()),
                    Failure::Throttled(reason) => {
                        json!({"v": 1, "error": "APNs rate limited this device", "reason": reason.text()})
                    }
                    Failure::CredentialsRejected(reason) => {
                        json!({"v": 1, "error": "relay APNs credentials rejected", "reason": reason.text()})
                    }
                    Failure::Unreachable => error("APNs unreachable"),
                    Failure::Error(status, reason) => {
                        json!({"v": 1, "error": "APNs error", "apnsStatus": status, "reason": reason.text()})
                    }
                },
                Outcome::NotConfigured => error("relay is not configured for APNs delivery"),
                Outcome::StoreUnavailable => error("relay state unavailable"),
            },
            Answer::Overloaded => error("relay overloaded"),
            Answer::ClientRateLimited { .. } => error("client is rate limited"),
            Answer::TooLarge => error("body too large"),
            Answer::Unreadable => error("body could not be read"),
            Answer::Timeout => error("body not received in time"),
            Answer::Invalid(text) => error(text),
            Answer::NotFound => error("not found"),
            Answer::MethodNotAllowed { .. } => error("method not allowed"),
            Answer::IntakeDisabled { text } => error(text),
        }
    }

    /// `Retry-After` seconds, when the answer carries one.
    pub(crate) fn retry_after(&self) -> Option<u64> {
        match self {
            Answer::Delivered(Outcome::RateLimited { retry_after_s })
            | Answer::ClientRateLimited { retry_after_s } => Some(*retry_after_s),
            Answer::Delivered(Outcome::StoreUnavailable) | Answer::Overloaded => Some(1),
            _ => None,
        }
    }

    /// The bounded metric label and log name.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Answer::Delivered(o) => match o {
                Outcome::Forwarded => "forwarded",
                Outcome::DryRun => "dry_run",
                Outcome::Coalesced => "coalesced",
                Outcome::Suppressed => "suppressed",
                Outcome::RateLimited { .. } => "rate_limited",
                Outcome::Remembered(_) => "token_remembered",
                Outcome::Failed(v) => match Failure::of(*v) {
                    Failure::TokenRejected(_) => "token_rejected",
                    Failure::Throttled(_) => "apns_throttled",
                    Failure::CredentialsRejected(_) => "credentials_rejected",
                    Failure::Unreachable => "apns_unreachable",
                    Failure::Error(..) => "apns_error",
                },
                Outcome::NotConfigured => "not_configured",
                Outcome::StoreUnavailable => "store_unavailable",
                Outcome::Queued => "queued",
            },
            Answer::Overloaded => "overloaded",
            Answer::ClientRateLimited { .. } => "client_rate_limited",
            Answer::TooLarge => "too_large",
            Answer::Unreadable => "unreadable",
            Answer::Timeout => "timeout",
            Answer::Invalid(_) => "invalid",
            Answer::NotFound => "not_found",
            Answer::MethodNotAllowed { .. } => "method_not_allowed",
            Answer::IntakeDisabled { .. } => "intake_disabled",
        }
    }
}

/// Renders an answer: its status, JSON body and `Retry-After`.
pub(crate) fn respond(outcome: &Answer) -> Response {
    let mut resp = match outcome.fixed_body() {
        Some(text) => (outcome.status(), text).into_response(),
        None => (outcome.status(), outcome.body().to_string()).into_response(),
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = outcome.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    if let Answer::MethodNotAllowed { allow } = outcome {
        h.insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    // The body was not read whole: the connection cannot carry another request.
    if matches!(outcome, Answer::Timeout | Answer::TooLarge) {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DeadReason;
    use crate::push::apns::reason::{classify, tests::parse};

    fn apns(status: u16, reason: &str) -> Answer {
        Answer::Delivered(Outcome::of(classify(status, Some(parse(reason)))))
    }

    /// The written bodies are the JSON bodies, byte for byte.
    #[test]
    fn fixed_bodies_are_the_json_bodies() {
        let fixed = [
            Outcome::Forwarded,
            Outcome::DryRun,
            Outcome::Coalesced,
            Outcome::Suppressed,
            Outcome::Queued,
        ];
        for o in fixed {
            let a = Answer::Delivered(o);
            assert_eq!(a.fixed_body(), Some(a.body().to_string().as_str()), "{a:?}");
        }
        assert_eq!(Answer::Overloaded.fixed_body(), None);
    }

    /// Every answer's (label, status) is registered at start-up.
    #[test]
    fn every_answer_is_in_the_registered_labels() {
        let all = [
            Answer::Delivered(Outcome::Forwarded),
            Answer::Delivered(Outcome::DryRun),
            Answer::Delivered(Outcome::Coalesced),
            Answer::Delivered(Outcome::Suppressed),
            Answer::Delivered(Outcome::RateLimited { retry_after_s: 1 }),
            apns(410, "Unregistered"),
            Answer::Delivered(Outcome::Remembered(DeadReason::Uninstalled)),
            apns(429, "TooManyRequests"),
            apns(403, "InvalidProviderToken"),
            Answer::Delivered(Outcome::Failed(Verdict::UNREACHABLE)),
            apns(500, "InternalServerError"),
            Answer::Delivered(Outcome::NotConfigured),
            Answer::Delivered(Outcome::StoreUnavailable),
            Answer::Delivered(Outcome::Queued),
            Answer::Overloaded,
            Answer::ClientRateLimited { retry_after_s: 1 },
            Answer::TooLarge,
            Answer::Unreadable,
            Answer::Timeout,
            Answer::Invalid("x".into()),
            Answer::NotFound,
            Answer::MethodNotAllowed { allow: "GET" },
            Answer::IntakeDisabled { text: "x" },
        ];
        assert_eq!(all.len(), LABELS.len());
        let mut seen = std::collections::HashSet::new();
        for a in &all {
            let status = a.status();
            let pair = (a.label(), status.as_str());
            assert!(LABELS.contains(&pair), "{pair:?}");
            seen.insert(a.label());
        }
        assert_eq!(seen.len(), LABELS.len());
    }

    #[test]
    fn service_failures_in_the_references_words() {
        assert_eq!(
            apns(410, "Unregistered").body(),
            json!({"v":1,"error":"device token rejected by APNs","reason":"Unregistered"})
        );
        assert_eq!(
            apns(400, "BadTopic").body(),
            json!({"v":1,"error":"relay APNs credentials rejected","reason":"BadTopic"})
        );
        assert_eq!(
            apns(413, "PayloadTooLarge").body(),
            json!({"v":1,"error":"APNs error","apnsStatus":413,"reason":"PayloadTooLarge"})
        );
        let no_reason = Answer::Delivered(Outcome::of(classify(500, None)));
        assert_eq!(
            no_reason.body(),
            json!({"v":1,"error":"APNs error","apnsStatus":500,"reason":""})
        );
        assert_eq!(
            Answer::Delivered(Outcome::Remembered(DeadReason::Foreign)).body(),
            json!({"v":1,"error":"device token rejected by APNs","reason":"BadDeviceToken"})
        );
    }
}
