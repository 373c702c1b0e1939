//! The one error envelope of `/v2` and the admin API:
//! `{"error":{"code":"<code>","message":"<short text>","pushId":"<id, when known>"}}`.
//! Authentication and authorization failures (401, 403) stay distinct from payload errors
//! (400, 422), conflicts (409), missing pushes (404) and readiness (503).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The machine-readable code of an answer: the envelope's `code` and the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// 201: a new push was accepted.
    Created,
    /// 200: an exact replay, answered with the stored receipt.
    Replayed,
    /// 200: a receipt read or an event stream.
    Ok,
    /// 400: the body breaks the schema.
    InvalidRequest,
    /// 413: the body is over the limit.
    TooLarge,
    /// 401: no usable credentials.
    Unauthorized,
    /// 401: the signature does not verify.
    BadSignature,
    /// 403: no such signer.
    UnknownSigner,
    /// 403: the signer was revoked.
    RevokedSigner,
    /// 403: the signer may not push to this topic.
    TopicNotAllowed,
    /// 403: authenticated, but not allowed this.
    Forbidden,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 409: the request id is taken by another request.
    RequestIdConflict,
    /// 422: outside the freshness window.
    StaleRequest,
    /// 429: the request's source is over its bucket.
    RateLimited,
    /// 503: the shared store cannot answer.
    Unavailable,
}

impl Code {
    /// The wire and label text.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Created => "created",
            Code::Replayed => "replayed",
            Code::Ok => "ok",
            Code::InvalidRequest => "invalid_request",
            Code::TooLarge => "too_large",
            Code::Unauthorized => "unauthorized",
            Code::BadSignature => "bad_signature",
            Code::UnknownSigner => "unknown_signer",
            Code::RevokedSigner => "revoked_signer",
            Code::TopicNotAllowed => "topic_not_allowed",
            Code::Forbidden => "forbidden",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::RequestIdConflict => "request_id_conflict",
            Code::StaleRequest => "stale_request",
            Code::RateLimited => "rate_limited",
            Code::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code, also the metric label.
    pub code: Code,
    /// Short text; names a member, never repeats a value.
    pub message: String,
    /// The push the error is about, when known.
    pub push_id: Option<String>,
    /// The methods the path takes, for a 405's `Allow`.
    pub allow: Option<&'static str>,
    /// `Retry-After` of a 429, in seconds (a 503 always says 1).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: Code, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            push_id: None,
            allow: None,
            retry_after_s: None,
        }
    }

    /// Names the push.
    pub fn with_push(mut self, push_id: &str) -> Self {
        self.push_id = Some(push_id.to_owned());
        self
    }

    /// 400: the body breaks the schema.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Code::InvalidRequest, message)
    }

    /// 413.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::TooLarge,
            format!("the body is over {limit} bytes"),
        )
    }

    /// 401: no usable credentials.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, Code::Unauthorized, message)
    }

    /// 401: the signature does not verify (or is not 64 bytes of base64url).
    pub fn bad_signature() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            Code::BadSignature,
            "the signature does not verify under the signer's key",
        )
    }

    /// 403: no such signer.
    pub fn unknown_signer() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            Code::UnknownSigner,
            "signerKeyId is not enrolled",
        )
    }

    /// 403: the signer was revoked.
    pub fn revoked_signer() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            Code::RevokedSigner,
            "the signer was revoked",
        )
    }

    /// 403: the signer may not push to this topic.
    pub fn topic_not_allowed() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            Code::TopicNotAllowed,
            "the signer is not bound to this topic",
        )
    }

    /// 403: authenticated, but not allowed this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, Code::Forbidden, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, Code::NotFound, message)
    }

    /// 405 for a path that takes the methods `allow` (its `Allow` header).
    pub fn method_not_allowed(allow: &'static str) -> Self {
        Self {
            allow: Some(allow),
            ..Self::new(
                StatusCode::METHOD_NOT_ALLOWED,
                Code::MethodNotAllowed,
                "method not allowed",
            )
        }
    }

    /// 409: the request id is taken by another request.
    pub fn conflict() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            Code::RequestIdConflict,
            "requestId was used with another payload",
        )
    }

    /// 422: outside the freshness window.
    pub fn stale(what: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            Code::StaleRequest,
            format!("{what} is outside the freshness window (5 minutes before to 30 s after the relay's clock)"),
        )
    }

    /// 503: the shared store cannot answer.
    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::Unavailable,
            "the relay's shared store is unavailable; retry the same request",
        )
    }

    /// 503: the relay is at its in-flight limit (`RELAY_MAX_INFLIGHT`).
    pub fn overloaded() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::Unavailable,
            "the relay is at its in-flight limit; retry the same request",
        )
    }

    /// 429: the request's source is over its bucket; a token is back in `retry_after_s`.
    pub fn rate_limited(retry_after_s: u64) -> Self {
        Self {
            retry_after_s: Some(retry_after_s),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                Code::RateLimited,
                "this source is over its request rate; retry after Retry-After",
            )
        }
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        let mut e = serde_json::json!({"code": self.code.as_str(), "message": self.message});
        if let Some(id) = &self.push_id {
            e["pushId"] = serde_json::Value::from(id.as_str());
        }
        serde_json::json!({ "error": e }).to_string()
    }
}

/// `Allow` of a path that takes POST.
pub(crate) const POST: &str = "POST";
/// `Allow` of a path that takes GET (axum answers HEAD beside it).
pub(crate) const GET: &str = "GET, HEAD";
/// `Allow` of a path that takes PUT.
pub(crate) const PUT: &str = "PUT";

/// The 405 handler of a path that takes the methods `allow`.
pub(crate) fn only(allow: &'static str) -> impl Fn() -> std::future::Ready<Response> + Clone {
    move || std::future::ready(ApiError::method_not_allowed(allow).into_response())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, self.body()).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(allow) = self.allow {
            h.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        match self.status {
            StatusCode::SERVICE_UNAVAILABLE => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                let after = self.retry_after_s.unwrap_or(1);
                h.insert(header::RETRY_AFTER, HeaderValue::from(after));
            }
            StatusCode::UNAUTHORIZED => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Signature"),
                );
            }
            // The body was not read: the connection cannot carry another request.
            StatusCode::PAYLOAD_TOO_LARGE => {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        resp
    }
}

/// A refusal at the door: 503 at the in-flight limit, 429 over the source's bucket.
impl From<crate::admission::Refused> for ApiError {
    fn from(r: crate::admission::Refused) -> Self {
        match r {
            crate::admission::Refused::Overloaded => ApiError::overloaded(),
            crate::admission::Refused::RateLimited { retry_after_s } => {
                ApiError::rate_limited(retry_after_s)
            }
        }
    }
}

/// Every signature failure, malformed or not verifying, is one answer: 401 `bad_signature`.
impl From<super::sig::SigError> for ApiError {
    fn from(_: super::sig::SigError) -> Self {
        ApiError::bad_signature()
    }
}

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn a_405_names_the_methods_of_its_path() {
        for allow in [GET, POST, PUT] {
            let resp = only(allow)().await;
            assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
            assert_eq!(resp.headers()[header::ALLOW], allow);
        }
        let other = ApiError::not_found("x").into_response();
        assert!(other.headers().get(header::ALLOW).is_none());
    }

    use super::*;

    #[test]
    fn the_envelope() {
        let e = ApiError::conflict().with_push("p-1");
        let v: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["code"], "request_id_conflict");
        assert_eq!(v["error"]["pushId"], "p-1");
        let v: serde_json::Value = serde_json::from_str(&ApiError::invalid("x").body()).unwrap();
        assert!(v["error"].get("pushId").is_none());
        assert_eq!(
            ApiError::unavailable().into_response().headers()["retry-after"],
            "1"
        );
    }

    #[test]
    fn refusals_at_the_door_say_when_to_come_back() {
        let busy = ApiError::overloaded().into_response();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()["retry-after"], "1");
        let e = ApiError::rate_limited(7);
        assert_eq!(e.code.as_str(), "rate_limited");
        let limited = e.into_response();
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.headers()["retry-after"], "7");
    }
}
