//! The link's bearer: `Authorization: Bearer <token>`, or for a WebSocket (browsers cannot
//! set headers) the offered subprotocol `zerobyte.bearer.<token>`, which the relay never
//! echoes. The relay keeps and compares only its SHA-256.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};

use super::error::MailboxError;

/// The subprotocol every mailbox socket speaks.
pub const SUBPROTOCOL: &str = "zerobyte.v1";
/// The prefix of the subprotocol that carries the bearer.
pub const BEARER_SUBPROTOCOL: &str = "zerobyte.bearer.";

/// A bearer token: 22 to 256 of `[A-Za-z0-9._~+/=-]`.
pub fn is_bearer(s: &str) -> bool {
    (22..=256).contains(&s.len())
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-')
        })
}

/// A presented bearer: the token (to derive the registration key) and its SHA-256 hex (all
/// the store ever sees).
#[derive(Clone)]
pub struct Bearer {
    token: crate::secret::Secret,
    hash: String,
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer([redacted])")
    }
}

impl Bearer {
    fn new(token: &str) -> Self {
        let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        Self {
            token: crate::secret::Secret::new(token),
            hash: crate::device::hex(d.as_ref()),
        }
    }

    /// SHA-256 of the token, lowercase hex.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The token's bytes, for the registration key only.
    pub fn token_bytes(&self) -> &[u8] {
        self.token.expose().as_bytes()
    }
}

/// The bearer of an HTTP request: exactly one `Authorization: Bearer <token>`.
pub fn from_headers(headers: &HeaderMap) -> Option<Bearer> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    // The scheme is case-insensitive (RFC 7235, 2.1): `bearer` and `BEARER` are `Bearer`.
    let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    is_bearer(token).then(|| Bearer::new(token))
}

/// The bearer of an HTTP request as an extractor: 401 without a usable one.
impl<S: Send + Sync> FromRequestParts<S> for Bearer {
    type Rejection = MailboxError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        from_headers(&parts.headers).ok_or(MailboxError::Unauthorized)
    }
}

/// The bearer of a WebSocket upgrade: the header, else the offered
/// `zerobyte.bearer.<token>` subprotocol.
pub fn from_upgrade(headers: &HeaderMap) -> Option<Bearer> {
    if headers.contains_key(header::AUTHORIZATION) {
        return from_headers(headers);
    }
    let mut found = None;
    for v in headers.get_all(header::SEC_WEBSOCKET_PROTOCOL) {
        for p in v.to_str().ok()?.split(',').map(str::trim) {
            if let Some(token) = p.strip_prefix(BEARER_SUBPROTOCOL) {
                if found.is_some() || !is_bearer(token) {
                    return None;
                }
                found = Some(Bearer::new(token));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use proptest::prelude::*;

    const TOKEN: &str = "Zq3k8r2mT1u0wQabcdefgh";

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn bearers() {
        let b = from_headers(&headers(&[(
            header::AUTHORIZATION,
            &format!("Bearer {TOKEN}"),
        )]))
        .unwrap();
        assert_eq!(b.hash().len(), 64);
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            let h = headers(&[(header::AUTHORIZATION, &format!("{scheme} {TOKEN}"))]);
            assert_eq!(from_headers(&h).unwrap().hash(), b.hash(), "{scheme}");
        }
        assert!(!format!("{b:?}").contains(TOKEN));
        for bad in [
            "",
            "Bearer",
            "Bearer short",
            "Basic abc",
            &format!("Bearers {TOKEN}"),
            &format!("Bearer {TOKEN} x"),
        ] {
            assert!(
                from_headers(&headers(&[(header::AUTHORIZATION, bad)])).is_none(),
                "{bad}"
            );
        }
        let two = headers(&[
            (header::AUTHORIZATION, &format!("Bearer {TOKEN}")),
            (header::AUTHORIZATION, &format!("Bearer {TOKEN}")),
        ]);
        assert!(from_headers(&two).is_none());
        let ws = headers(&[(
            header::SEC_WEBSOCKET_PROTOCOL,
            &format!("zerobyte.v1, zerobyte.bearer.{TOKEN}"),
        )]);
        assert_eq!(from_upgrade(&ws).unwrap().hash(), b.hash());
        let none = headers(&[(header::SEC_WEBSOCKET_PROTOCOL, "zerobyte.v1")]);
        assert!(from_upgrade(&none).is_none());
        let twice = headers(&[(
            header::SEC_WEBSOCKET_PROTOCOL,
            &format!("zerobyte.bearer.{TOKEN}, zerobyte.bearer.{TOKEN}"),
        )]);
        assert!(from_upgrade(&twice).is_none());
    }

    proptest! {
        #[test]
        fn no_header_panics(v in "[ -~]{0,300}") {
            let _ = from_headers(&headers(&[(header::AUTHORIZATION, &v)]));
            let _ = from_upgrade(&headers(&[(header::SEC_WEBSOCKET_PROTOCOL, &v)]));
        }
    }
}
