//! Answers of mailbox paths: the spec's error shape `{"error":"<code>","status":<status>}`
//! (401 with `WWW-Authenticate: Bearer`, 429 with `Retry-After`), and the relay's one 404,
//! `{"v":1,"error":"not found"}`, for anything that is not there.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// An error answer on a mailbox path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailboxError {
    /// The relay's one 404.
    NotFound,
    /// 400.
    BadRequest,
    /// 401: no usable bearer.
    Unauthorized,
    /// 403: another bearer holds the mailbox.
    Forbidden,
    /// 405, with the methods the path takes.
    MethodNotAllowed(&'static str),
    /// 409: other bytes are at that seq.
    Conflict,
    /// 413.
    TooLarge,
    /// 429 with the whole seconds to wait (at least 1).
    RateLimited(u64),
    /// 502: an ICE provider failed.
    Upstream,
    /// 503: the shared store is unavailable.
    Unavailable,
    /// 507: the direction is full.
    Full,
}

impl MailboxError {
    /// The status.
    pub fn status(self) -> StatusCode {
        match self {
            MailboxError::NotFound => StatusCode::NOT_FOUND,
            MailboxError::BadRequest => StatusCode::BAD_REQUEST,
            MailboxError::Unauthorized => StatusCode::UNAUTHORIZED,
            MailboxError::Forbidden => StatusCode::FORBIDDEN,
            MailboxError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            MailboxError::Conflict => StatusCode::CONFLICT,
            MailboxError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            MailboxError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            MailboxError::Upstream => StatusCode::BAD_GATEWAY,
            MailboxError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            MailboxError::Full => StatusCode::INSUFFICIENT_STORAGE,
        }
    }

    fn code(self) -> &'static str {
        match self {
            MailboxError::NotFound => "not_found",
            MailboxError::BadRequest => "bad_request",
            MailboxError::Unauthorized => "unauthorized",
            MailboxError::Forbidden => "forbidden",
            MailboxError::MethodNotAllowed(_) => "method_not_allowed",
            MailboxError::Conflict => "conflict",
            MailboxError::TooLarge => "too_large",
            MailboxError::RateLimited(_) => "rate_limited",
            MailboxError::Upstream => "upstream_unavailable",
            MailboxError::Unavailable => "unavailable",
            MailboxError::Full => "mailbox_full",
        }
    }

    /// The body.
    pub fn body(self) -> String {
        match self {
            MailboxError::NotFound => r#"{"v":1,"error":"not found"}"#.to_owned(),
            e => format!(
                r#"{{"error":"{}","status":{}}}"#,
                e.code(),
                e.status().as_u16()
            ),
        }
    }
}

impl IntoResponse for MailboxError {
    fn into_response(self) -> Response {
        let mut r = (self.status(), self.body()).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        match self {
            MailboxError::Unauthorized => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            MailboxError::RateLimited(s) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(s.max(1)));
            }
            MailboxError::Unavailable => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            MailboxError::MethodNotAllowed(allow) => {
                h.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            // The body was not read: the connection cannot carry another request.
            MailboxError::TooLarge => {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specs_bodies() {
        assert_eq!(
            MailboxError::RateLimited(3).body(),
            r#"{"error":"rate_limited","status":429}"#
        );
        assert_eq!(
            MailboxError::Full.body(),
            r#"{"error":"mailbox_full","status":507}"#
        );
        assert_eq!(
            MailboxError::Upstream.body(),
            r#"{"error":"upstream_unavailable","status":502}"#
        );
        assert_eq!(
            MailboxError::NotFound.body(),
            r#"{"v":1,"error":"not found"}"#
        );
        let r = MailboxError::RateLimited(0).into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let r = MailboxError::Unauthorized.into_response();
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }
}
