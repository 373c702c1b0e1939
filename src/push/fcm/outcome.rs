//! What an FCM send came to, classified into the relay's [`VerdictClass`]es.
//!
//! Google's error body is
//! `{"error":{"code":404,"message":"...","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`.
//! It is read through `serde_json::Value`, so a missing, null or oddly typed member (or a
//! body that is not JSON at all) only means less information, never a panic. The FCM
//! `errorCode` wins over the HTTP status; without one the status decides.
//!
//! Only `UNREGISTERED` deletes a registration. A bare 404 does not: a wrong `FCM_URL`, a
//! wrong project or a proxy answering 404 would otherwise wipe every Android registration
//! the relay holds, one push at a time.

use std::time::Duration;

use crate::push::VerdictClass;

/// Which exchange produced the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The OAuth2 token request to the service account's `token_uri`.
    Token,
    /// The `messages:send` request.
    Send,
}

impl Stage {
    /// `token` or `send`, for a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Token => "token",
            Stage::Send => "send",
        }
    }
}

/// The bounded reason behind an outcome: one metric label each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// 200.
    Delivered,
    /// `UNREGISTERED`: the app was uninstalled or the token expired.
    Unregistered,
    /// `INVALID_ARGUMENT`, or another 400/4xx payload error.
    InvalidArgument,
    /// The relay refused to build the message (a malformed registration token, tag or
    /// alert): nothing was sent. The front-end validates registrations, so this is a bug.
    InvalidInput,
    /// `SENDER_ID_MISMATCH`: the token belongs to another Firebase project.
    SenderIdMismatch,
    /// `THIRD_PARTY_AUTH_ERROR`: FCM's own APNs/web-push credentials for the project.
    ThirdPartyAuth,
    /// 401 `UNAUTHENTICATED` or 403 `PERMISSION_DENIED` from FCM (wrong project, the
    /// service account lacks the role, the access token is refused even when fresh).
    Auth,
    /// The token endpoint refused the assertion (`invalid_grant`, `invalid_scope`, 401,
    /// 403): wrong key, revoked key, wrong `token_uri`, clock far off.
    TokenRefused,
    /// The token endpoint answered 200 with no usable access token.
    TokenResponse,
    /// 404 without `UNREGISTERED`: a wrong `FCM_URL`, path or proxy, not a dead token.
    NotFound,
    /// TLS failed: the server's certificate is not trusted (`FCM_CA_FILE`?) or invalid.
    Tls,
    /// 429 / `QUOTA_EXCEEDED`.
    Quota,
    /// 502, 503, 504 / `UNAVAILABLE`.
    Unavailable,
    /// 500 / `INTERNAL`.
    Internal,
    /// No answer within the request timeout (or 408).
    Timeout,
    /// The connection could not be made or broke.
    Unreachable,
    /// Anything else.
    Other,
}

impl Reason {
    /// Every reason, to pre-register metric series.
    pub const ALL: [Reason; 17] = [
        Reason::Delivered,
        Reason::Unregistered,
        Reason::InvalidArgument,
        Reason::InvalidInput,
        Reason::SenderIdMismatch,
        Reason::ThirdPartyAuth,
        Reason::Auth,
        Reason::TokenRefused,
        Reason::TokenResponse,
        Reason::NotFound,
        Reason::Tls,
        Reason::Quota,
        Reason::Unavailable,
        Reason::Internal,
        Reason::Timeout,
        Reason::Unreachable,
        Reason::Other,
    ];

    /// The reason as the core reads it: its label, and (for `UNREGISTERED` only) that the
    /// registration is forgotten. A 400 `INVALID_ARGUMENT` is a payload error and a bare
    /// 404 a wrong URL or project, never a dead device.
    pub fn to_push(self) -> crate::push::Reason {
        let said = crate::push::Reason::named(self.label());
        if self == Reason::Unregistered {
            said.forgetting()
        } else {
            said
        }
    }

    /// The metric label: lowercase, fixed, never derived from upstream text.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Delivered => "delivered",
            Reason::Unregistered => "unregistered",
            Reason::InvalidArgument => "invalid_argument",
            Reason::InvalidInput => "invalid_input",
            Reason::SenderIdMismatch => "sender_id_mismatch",
            Reason::ThirdPartyAuth => "third_party_auth",
            Reason::Auth => "auth",
            Reason::TokenRefused => "token_refused",
            Reason::TokenResponse => "token_response",
            Reason::NotFound => "not_found",
            Reason::Tls => "tls",
            Reason::Quota => "quota",
            Reason::Unavailable => "unavailable",
            Reason::Internal => "internal",
            Reason::Timeout => "timeout",
            Reason::Unreachable => "unreachable",
            Reason::Other => "other",
        }
    }
}

/// The details of an outcome other than [`FcmOutcome::Delivered`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status, 0 when there was no answer.
    pub status: u16,
    /// Why, bounded.
    pub reason: Reason,
    /// Which request failed.
    pub stage: Stage,
    /// `Retry-After`, when the answer carried one (capped at one day).
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub(crate) fn new(stage: Stage, status: u16, reason: Reason) -> Self {
        Self {
            status,
            reason,
            stage,
            retry_after: None,
        }
    }
}

/// What one [`FcmClient::send`](super::FcmClient::send) came to. One variant per
/// [`VerdictClass`]; `Debug` carries no secret (statuses and bounded reasons only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FcmOutcome {
    /// 200: FCM accepted the message. `name` is FCM's `projects/<p>/messages/<id>`, when
    /// the answer had one.
    Delivered {
        /// FCM's message name.
        name: Option<String>,
    },
    /// The registration token is dead: FCM answered `UNREGISTERED` (404, or 400 with that
    /// error code). The only outcome on which the relay deletes the registration.
    TokenDead(Failure),
    /// This message cannot succeed as it is: FCM refused it (400 `INVALID_ARGUMENT` and
    /// other payload errors, other 4xx), or the relay refused to build it. Never retried,
    /// but the registration is kept: a payload error says nothing about the device.
    Rejected(Failure),
    /// The relay's own setup is wrong: 401/403 from FCM (`THIRD_PARTY_AUTH_ERROR`,
    /// `SENDER_ID_MISMATCH`, `PERMISSION_DENIED`, `UNAUTHENTICATED` after one refresh), the
    /// token endpoint refusing the assertion, a 404 without `UNREGISTERED` (wrong URL), a
    /// TLS certificate that is not trusted. Every send fails until an operator acts; never
    /// retried, never deletes the registration.
    Misconfigured(Failure),
    /// Transient: 429 `QUOTA_EXCEEDED` (see `retry_after`), 500 `INTERNAL`, 503
    /// `UNAVAILABLE`, other 5xx, timeouts, connection errors, of either request. Worth
    /// retrying later with backoff, honouring `retry_after`.
    Retryable(Failure),
}

impl FcmOutcome {
    /// The bounded reason.
    pub fn reason(&self) -> Reason {
        match self {
            FcmOutcome::Delivered { .. } => Reason::Delivered,
            FcmOutcome::TokenDead(f)
            | FcmOutcome::Rejected(f)
            | FcmOutcome::Misconfigured(f)
            | FcmOutcome::Retryable(f) => f.reason,
        }
    }

    /// A bounded metric label: the reason's (one of the 17 of [`Reason::ALL`], fixed
    /// strings never derived from upstream text). The class's label is the caller's (its
    /// `outcome` vocabulary).
    pub fn label(&self) -> &'static str {
        self.reason().label()
    }

    /// The class the core acts on.
    pub fn class(&self) -> VerdictClass {
        match self {
            FcmOutcome::Delivered { .. } => VerdictClass::Delivered,
            FcmOutcome::TokenDead(_) => VerdictClass::TokenDead,
            FcmOutcome::Rejected(_) => VerdictClass::Rejected,
            FcmOutcome::Misconfigured(_) => VerdictClass::Misconfigured,
            FcmOutcome::Retryable(_) => VerdictClass::Retryable,
        }
    }

    /// The class as a log field.
    pub(crate) fn class_str(&self) -> &'static str {
        self.class().as_str()
    }

    /// The failure details, `None` when delivered.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            FcmOutcome::Delivered { .. } => None,
            FcmOutcome::TokenDead(f)
            | FcmOutcome::Rejected(f)
            | FcmOutcome::Misconfigured(f)
            | FcmOutcome::Retryable(f) => Some(f),
        }
    }

    /// HTTP status of the last answer (200 when delivered, 0 without an answer).
    pub fn status(&self) -> u16 {
        self.failure().map_or(200, |f| f.status)
    }

    /// Whether the relay must delete the registration: [`FcmOutcome::TokenDead`]
    /// (`UNREGISTERED`) only.
    pub fn deletes_registration(&self) -> bool {
        matches!(self, FcmOutcome::TokenDead(_))
    }

    /// `Retry-After` of the answer, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.failure().and_then(|f| f.retry_after)
    }
}

/// Keeps at most `max` characters of `s` that are ASCII letters, digits, `_`, `-` or `.`,
/// for diagnostic codes taken from an upstream answer (log lines only, never metric labels).
pub(crate) fn sanitize_code(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(max)
        .collect()
}

/// What could be read from Google's error body.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct GoogleError {
    /// `error.status`, e.g. `NOT_FOUND`.
    pub status: Option<String>,
    /// The first `errorCode` of an `FcmError` detail, e.g. `UNREGISTERED`.
    pub error_code: Option<String>,
}

/// Reads `{"error":{"status":..,"details":[{"@type":"...FcmError","errorCode":..}]}}`.
pub(crate) fn parse_google_error(body: &[u8]) -> GoogleError {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return GoogleError::default();
    };
    let Some(err) = v.get("error").and_then(|e| e.as_object()) else {
        return GoogleError::default();
    };
    let status = err
        .get("status")
        .and_then(|s| s.as_str())
        .map(|s| sanitize_code(s, 64));
    let details = err.get("details").and_then(|d| d.as_array());
    let mut typed = None;
    let mut untyped = None;
    for d in details.into_iter().flatten() {
        let Some(code) = d.get("errorCode").and_then(|c| c.as_str()) else {
            continue;
        };
        let is_fcm = d
            .get("@type")
            .and_then(|t| t.as_str())
            .is_some_and(|t| t.ends_with("google.firebase.fcm.v1.FcmError"));
        if is_fcm && typed.is_none() {
            typed = Some(code);
        } else if untyped.is_none() {
            untyped = Some(code);
        }
    }
    GoogleError {
        status,
        error_code: typed
            .or(untyped)
            .map(|c| sanitize_code(c, 64))
            .filter(|c| !c.is_empty()),
    }
}

/// Classifies an answer of `messages:send`. `retry_after` is the raw header, `now_ms` the
/// time it arrived (for an HTTP-date `Retry-After`).
pub(crate) fn classify_send(
    status: u16,
    body: &[u8],
    retry_after: Option<&str>,
    now_ms: i64,
) -> FcmOutcome {
    if (200..300).contains(&status) {
        let name = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_owned));
        return FcmOutcome::Delivered { name };
    }
    let google = parse_google_error(body);
    let fail = |reason| {
        let mut f = Failure::new(Stage::Send, status, reason);
        f.retry_after = retry_after.and_then(|h| parse_retry_after(h, now_ms));
        f
    };
    match google.error_code.as_deref() {
        Some("UNREGISTERED") if status == 404 || status == 400 => {
            return FcmOutcome::TokenDead(fail(Reason::Unregistered))
        }
        Some("INVALID_ARGUMENT") => return FcmOutcome::Rejected(fail(Reason::InvalidArgument)),
        Some("SENDER_ID_MISMATCH") => {
            return FcmOutcome::Misconfigured(fail(Reason::SenderIdMismatch))
        }
        Some("THIRD_PARTY_AUTH_ERROR") => {
            return FcmOutcome::Misconfigured(fail(Reason::ThirdPartyAuth))
        }
        Some("QUOTA_EXCEEDED") => return FcmOutcome::Retryable(fail(Reason::Quota)),
        Some("UNAVAILABLE") => return FcmOutcome::Retryable(fail(Reason::Unavailable)),
        Some("INTERNAL") => return FcmOutcome::Retryable(fail(Reason::Internal)),
        // UNSPECIFIED_ERROR, an unknown code, or none: the status decides.
        _ => {}
    }
    by_status(Stage::Send, status, retry_after, now_ms)
}

/// Classifies a non-200 answer of the token endpoint.
pub(crate) fn classify_token_error(
    status: u16,
    retry_after: Option<&str>,
    now_ms: i64,
) -> FcmOutcome {
    match status {
        400 | 401 | 403 => {
            FcmOutcome::Misconfigured(Failure::new(Stage::Token, status, Reason::TokenRefused))
        }
        _ => by_status(Stage::Token, status, retry_after, now_ms),
    }
}

fn by_status(stage: Stage, status: u16, retry_after: Option<&str>, now_ms: i64) -> FcmOutcome {
    let mut f = Failure::new(stage, status, Reason::Other);
    f.retry_after = retry_after.and_then(|h| parse_retry_after(h, now_ms));
    let with = |reason| Failure {
        reason,
        ..f.clone()
    };
    match status {
        400 => FcmOutcome::Rejected(with(Reason::InvalidArgument)),
        401 | 403 => FcmOutcome::Misconfigured(with(Reason::Auth)),
        404 => FcmOutcome::Misconfigured(with(Reason::NotFound)),
        408 => FcmOutcome::Retryable(with(Reason::Timeout)),
        429 => FcmOutcome::Retryable(with(Reason::Quota)),
        500 => FcmOutcome::Retryable(with(Reason::Internal)),
        502..=504 => FcmOutcome::Retryable(with(Reason::Unavailable)),
        501 | 505..=599 => FcmOutcome::Retryable(f),
        402..=499 => FcmOutcome::Rejected(f),
        // 1xx/3xx: a proxy or URL that is not FCM.
        _ => FcmOutcome::Misconfigured(f),
    }
}

/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Parses `Retry-After`: delta-seconds or an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
/// Anything else is `None`; a date in the past is zero; capped at [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        let secs = v.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at_s = parse_imf_fixdate(v)?;
    let wait_ms = (at_s.saturating_mul(1000)).saturating_sub(now_ms).max(0);
    Some(Duration::from_millis(wait_ms as u64).min(MAX_RETRY_AFTER))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` to Unix seconds.
fn parse_imf_fixdate(s: &str) -> Option<i64> {
    let rest = s.split_once(", ")?.1;
    let parts: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: i64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as i64
        + 1;
    let year: i64 = year.parse().ok().filter(|y| (1970..=9999).contains(y))?;
    let hms: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, sec] = hms.as_slice() else {
        return None;
    };
    if *h > 23 || *m > 59 || *sec > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn google(code: u16, status: &str, error_code: Option<&str>) -> String {
        let details = match error_code {
            Some(c) => format!(
                r#","details":[{{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"{c}"}}]"#
            ),
            None => String::new(),
        };
        format!(r#"{{"error":{{"code":{code},"message":"m","status":"{status}"{details}}}}}"#)
    }

    fn send(status: u16, body: &str) -> FcmOutcome {
        classify_send(status, body.as_bytes(), None, 0)
    }

    #[test]
    fn delivered_with_name() {
        assert_eq!(
            send(200, r#"{"name":"projects/p/messages/0:1%ab"}"#),
            FcmOutcome::Delivered {
                name: Some("projects/p/messages/0:1%ab".into())
            }
        );
        assert_eq!(send(200, "not json"), FcmOutcome::Delivered { name: None });
        assert_eq!(
            send(200, r#"{"name":5}"#),
            FcmOutcome::Delivered { name: None }
        );
    }

    #[test]
    fn google_error_codes() {
        let cases: &[(u16, &str, Option<&str>, &str, Reason)] = &[
            (
                404,
                "NOT_FOUND",
                Some("UNREGISTERED"),
                "token_dead",
                Reason::Unregistered,
            ),
            (
                400,
                "INVALID_ARGUMENT",
                Some("UNREGISTERED"),
                "token_dead",
                Reason::Unregistered,
            ),
            (
                400,
                "INVALID_ARGUMENT",
                Some("INVALID_ARGUMENT"),
                "rejected",
                Reason::InvalidArgument,
            ),
            (
                403,
                "PERMISSION_DENIED",
                Some("SENDER_ID_MISMATCH"),
                "misconfigured",
                Reason::SenderIdMismatch,
            ),
            (
                401,
                "UNAUTHENTICATED",
                Some("THIRD_PARTY_AUTH_ERROR"),
                "misconfigured",
                Reason::ThirdPartyAuth,
            ),
            (
                403,
                "PERMISSION_DENIED",
                None,
                "misconfigured",
                Reason::Auth,
            ),
            (401, "UNAUTHENTICATED", None, "misconfigured", Reason::Auth),
            (
                429,
                "RESOURCE_EXHAUSTED",
                Some("QUOTA_EXCEEDED"),
                "retryable",
                Reason::Quota,
            ),
            (
                503,
                "UNAVAILABLE",
                Some("UNAVAILABLE"),
                "retryable",
                Reason::Unavailable,
            ),
            (
                500,
                "INTERNAL",
                Some("INTERNAL"),
                "retryable",
                Reason::Internal,
            ),
            (
                500,
                "INTERNAL",
                Some("UNSPECIFIED_ERROR"),
                "retryable",
                Reason::Internal,
            ),
            (
                400,
                "FAILED_PRECONDITION",
                Some("SOMETHING_NEW"),
                "rejected",
                Reason::InvalidArgument,
            ),
            // A 404 without UNREGISTERED is a wrong URL or project, never a dead token.
            (404, "NOT_FOUND", None, "misconfigured", Reason::NotFound),
            // UNREGISTERED only counts with 404/400.
            (
                500,
                "INTERNAL",
                Some("UNREGISTERED"),
                "retryable",
                Reason::Internal,
            ),
        ];
        for (status, gstatus, code, verdict, reason) in cases {
            let o = send(*status, &google(*status, gstatus, *code));
            assert_eq!(o.class_str(), *verdict, "{status} {code:?}");
            assert_eq!(o.reason(), *reason, "{status} {code:?}");
            assert_eq!(o.status(), *status);
            assert_eq!(o.deletes_registration(), *verdict == "token_dead");
        }
    }

    #[test]
    fn bare_statuses() {
        let cases: &[(u16, &str, Reason)] = &[
            (400, "rejected", Reason::InvalidArgument),
            (401, "misconfigured", Reason::Auth),
            (403, "misconfigured", Reason::Auth),
            (404, "misconfigured", Reason::NotFound),
            (408, "retryable", Reason::Timeout),
            (413, "rejected", Reason::Other),
            (429, "retryable", Reason::Quota),
            (500, "retryable", Reason::Internal),
            (501, "retryable", Reason::Other),
            (502, "retryable", Reason::Unavailable),
            (503, "retryable", Reason::Unavailable),
            (504, "retryable", Reason::Unavailable),
            (599, "retryable", Reason::Other),
            (302, "misconfigured", Reason::Other),
            (100, "misconfigured", Reason::Other),
        ];
        for (status, verdict, reason) in cases {
            let o = send(*status, "<html>oops</html>");
            assert_eq!((o.class_str(), o.reason()), (*verdict, *reason), "{status}");
        }
    }

    #[test]
    fn odd_bodies_never_panic() {
        let bodies = [
            "",
            "null",
            "[]",
            "\"x\"",
            r#"{"error":"string"}"#,
            r#"{"error":null}"#,
            r#"{"error":{"details":"nope"}}"#,
            r#"{"error":{"details":[1,null,"x",{"errorCode":5},{"@type":7,"errorCode":null}]}}"#,
            r#"{"error":{"status":5,"code":"x","details":[{}]}}"#,
            r#"{"error":{"details":[{"errorCode":""}]}}"#,
            "{\"error\":{\"details\":[{\"errorCode\":\"\u{1F600}\"}]}}",
            r#"{"error":{"details":[{"errorCode":"UNREGISTERED"}]}}"#,
            "\u{0}\u{ff}garbage",
        ];
        for b in bodies {
            let o = send(404, b);
            assert!(!matches!(o, FcmOutcome::Delivered { .. }));
        }
        // An untyped detail still counts (robustness), a typed one wins over it.
        assert!(send(
            404,
            r#"{"error":{"details":[{"errorCode":"UNREGISTERED"}]}}"#
        )
        .deletes_registration());
        let mixed = r#"{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","errorCode":"UNREGISTERED"},{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"INVALID_ARGUMENT"}]}}"#;
        assert_eq!(send(400, mixed).reason(), Reason::InvalidArgument);
        // Codes are sanitized before use.
        let g = parse_google_error(
            br#"{"error":{"status":"NOT FOUND\n<b>","details":[{"errorCode":"UNREG ISTERED"}]}}"#,
        );
        assert_eq!(g.status.as_deref(), Some("NOTFOUNDb"));
        assert_eq!(g.error_code.as_deref(), Some("UNREGISTERED"));
    }

    #[test]
    fn retry_after_forms() {
        let now = 784_111_777_000; // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("17", now), Some(Duration::from_secs(17)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_imf_fixdate("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_imf_fixdate("Tue, 29 Feb 2000 12:00:00 GMT"),
            Some(951_825_600)
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "soon",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            ", , ,",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
        let o = classify_send(
            429,
            google(429, "RESOURCE_EXHAUSTED", Some("QUOTA_EXCEEDED")).as_bytes(),
            Some("30"),
            now,
        );
        assert_eq!(o.retry_after(), Some(Duration::from_secs(30)));
        assert_eq!(o.class(), VerdictClass::Retryable);
    }

    #[test]
    fn token_endpoint_statuses() {
        for s in [400, 401, 403] {
            let o = classify_token_error(s, None, 0);
            assert_eq!(
                (o.class(), o.reason()),
                (VerdictClass::Misconfigured, Reason::TokenRefused)
            );
            assert_eq!(o.failure().unwrap().stage, Stage::Token);
        }
        assert_eq!(
            classify_token_error(503, Some("5"), 0).retry_after(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            classify_token_error(500, None, 0).reason(),
            Reason::Internal
        );
        assert_eq!(
            classify_token_error(404, None, 0).reason(),
            Reason::NotFound
        );
        assert_eq!(classify_token_error(429, None, 0).reason(), Reason::Quota);
    }

    #[test]
    fn classes_follow_the_design() {
        let class = |status, code| {
            let o = send(status, &google(status, "X", code));
            (o.class(), o.deletes_registration())
        };
        assert_eq!(
            send(200, "{}").class(),
            VerdictClass::Delivered,
            "delivered"
        );
        assert_eq!(
            class(404, Some("UNREGISTERED")),
            (VerdictClass::TokenDead, true)
        );
        assert_eq!(
            class(400, Some("INVALID_ARGUMENT")),
            (VerdictClass::Rejected, false)
        );
        assert_eq!(class(404, None), (VerdictClass::Misconfigured, false));
        for s in [401, 403] {
            assert_eq!(class(s, None), (VerdictClass::Misconfigured, false));
        }
        for s in [429, 500, 502, 503, 504] {
            assert_eq!(class(s, None), (VerdictClass::Retryable, false));
        }
        let local = FcmOutcome::Rejected(Failure::new(Stage::Send, 0, Reason::InvalidInput));
        assert_eq!(
            (local.class(), local.label()),
            (VerdictClass::Rejected, "invalid_input")
        );
    }

    #[test]
    fn labels_are_bounded_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            let l = r.label();
            assert!(
                l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{l}"
            );
            assert!(seen.insert(l), "duplicate {l}");
        }
    }
}
