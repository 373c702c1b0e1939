//! The service account and the OAuth2 access token (the JWT-bearer grant, RFC 7523, as
//! Google does it).
//!
//! The assertion is an RS256 JWT, header `{"typ":"JWT","alg":"RS256","kid":<private_key_id>}`
//! (no `kid` when the key has no id), claims `iss` = `client_email`, `scope` =
//! [`FCM_SCOPE`], `aud` = `token_uri`, `iat` = now, `exp` = `iat` + 3600 (Google's
//! maximum). It is posted as
//! `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<jwt>` to `token_uri`,
//! which answers `{"access_token","expires_in","token_type":"Bearer"}`.
//!
//! [`TokenCache`] keeps the access token until shortly before it expires
//! ([`refresh_margin_ms`]) and lets only one token request be in flight: concurrent sends
//! wait for it (or keep using the current token while it is still valid) and share its
//! result, success or failure. Times come from the relay's [`Clock`]: the system clock in
//! production (Google checks `iat` against real time, as Apple does the APNs provider
//! token's), a manual one in the unit tests below.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use tokio::time::Instant;

use super::error::ServiceAccountError;
use super::outcome::{Failure, FcmOutcome, Reason, Stage};
use crate::clock::Clock;
use crate::secret::Secret;

/// The OAuth2 scope for sending FCM messages.
pub const FCM_SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
/// `exp` - `iat` of the assertion: Google's maximum.
const ASSERTION_LIFETIME_S: u64 = 3600;

/// A Google service account, parsed from its JSON key. The private key is kept only as a
/// signing key; `Debug` shows the other fields and redacts it; errors never quote it.
#[derive(Clone)]
pub struct ServiceAccount {
    project_id: String,
    client_email: String,
    private_key_id: Option<String>,
    token_uri: String,
    key: EncodingKey,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("project_id", &self.project_id)
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("private_key", &"[redacted]")
            .finish()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

impl ServiceAccount {
    /// Parses a service account's JSON key (what the Firebase console downloads), and signs
    /// once to prove the key works. `type` must be `service_account`; `project_id`,
    /// `client_email`, `private_key` (an RSA key in PEM) and `token_uri` (an http(s) URL)
    /// are required; `private_key_id` is used as `kid` when present. Other members are
    /// ignored.
    pub fn from_json(text: &str) -> Result<Self, ServiceAccountError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ServiceAccountError::NotJson {
                line: e.line(),
                column: e.column(),
            })?;
        let obj = v.as_object().ok_or(ServiceAccountError::NotObject)?;
        let optional = |field: &'static str| -> Result<Option<&str>, ServiceAccountError> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.as_str())),
                Some(_) => Err(ServiceAccountError::Invalid {
                    field,
                    reason: "not a string".into(),
                }),
            }
        };
        let required = |field: &'static str| -> Result<&str, ServiceAccountError> {
            optional(field)?.ok_or(ServiceAccountError::Missing { field })
        };
        let invalid = |field: &'static str, reason: &str| ServiceAccountError::Invalid {
            field,
            reason: reason.to_owned(),
        };

        let kind = required("type")?;
        if kind != "service_account" {
            // Google's other key types are short lowercase words: safe to show.
            let shown =
                if kind.len() <= 32 && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    format!("\"{kind}\"")
                } else {
                    "another value".to_owned()
                };
            return Err(invalid(
                "type",
                &format!("is {shown}, expected \"service_account\""),
            ));
        }

        let project_id = required("project_id")?;
        if project_id.len() > 100
            || !project_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':' | b'_'))
        {
            return Err(invalid(
                "project_id",
                "must be at most 100 of A-Z a-z 0-9 - . : _",
            ));
        }

        let private_key_id = optional("private_key_id")?;
        if private_key_id.is_some_and(|id| {
            id.len() > 128
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }) {
            return Err(invalid(
                "private_key_id",
                "must be at most 128 of A-Z a-z 0-9 - _ .",
            ));
        }

        let client_email = required("client_email")?;
        if client_email.len() > 254
            || !client_email.contains('@')
            || client_email.bytes().any(|b| !b.is_ascii_graphic())
        {
            return Err(invalid("client_email", "not an e-mail address"));
        }

        let token_uri = required("token_uri")?;
        check_url(token_uri).map_err(|reason| invalid("token_uri", reason))?;

        let pem = required("private_key")?;
        // A key pasted into an environment variable often arrives with literal "\n".
        let pem = if !pem.contains('\n') && pem.contains("\\n") {
            pem.replace("\\n", "\n")
        } else {
            pem.to_owned()
        };
        if !pem.contains("-----BEGIN PRIVATE KEY-----")
            && !pem.contains("-----BEGIN RSA PRIVATE KEY-----")
        {
            return Err(invalid(
                "private_key",
                "not a PEM private key (Google issues RSA keys as PKCS#8 PEM)",
            ));
        }
        let key = EncodingKey::from_rsa_pem(pem.as_bytes())
            .map_err(|_| invalid("private_key", "not an RSA private key in PEM"))?;

        let account = Self {
            project_id: project_id.to_owned(),
            client_email: client_email.to_owned(),
            private_key_id: private_key_id.map(str::to_owned),
            token_uri: token_uri.to_owned(),
            key,
        };
        account.sign_assertion(0).map_err(|_| {
            invalid(
                "private_key",
                "cannot sign RS256 (an RSA key of 2048 to 8192 bits is required)",
            )
        })?;
        Ok(account)
    }

    /// The Firebase project messages go to.
    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    /// Where access tokens come from: the assertion's `aud`.
    pub fn token_uri(&self) -> &str {
        &self.token_uri
    }

    /// Signs the assertion for `iat` (Unix seconds).
    fn sign_assertion(&self, iat: u64) -> Result<Secret, jsonwebtoken::errors::Error> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = self.private_key_id.clone();
        let claims = Claims {
            iss: &self.client_email,
            scope: FCM_SCOPE,
            aud: &self.token_uri,
            iat,
            exp: iat + ASSERTION_LIFETIME_S,
        };
        jsonwebtoken::encode(&header, &claims, &self.key).map(Secret::new)
    }

    /// The form body of the token request for `iat`.
    pub(crate) fn token_request_body(
        &self,
        iat: u64,
    ) -> Result<Secret, jsonwebtoken::errors::Error> {
        let jwt = self.sign_assertion(iat)?;
        // The JWT is base64url and dots: nothing in it needs percent-encoding.
        Ok(Secret::new(format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={}",
            jwt.expose()
        )))
    }
}

/// Checks an http(s) URL with a host; the reason never quotes it.
pub(crate) fn check_url(url: &str) -> Result<hyper::Uri, &'static str> {
    let uri: hyper::Uri = url.parse().map_err(|_| "not a URL")?;
    match uri.scheme_str() {
        Some("https") | Some("http") => {}
        _ => return Err("must start with https:// or http://"),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    Ok(uri)
}

/// A cached OAuth2 access token.
pub(crate) struct AccessToken {
    value: Secret,
    /// When it expires (ms since the epoch).
    expires_at_ms: i64,
    /// When to start replacing it.
    refresh_at_ms: i64,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("value", &self.value)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("refresh_at_ms", &self.refresh_at_ms)
            .finish()
    }
}

/// While a refresh fails, a token is still used until this long before its expiry at most.
const HARD_MARGIN_MS: i64 = 10_000;

/// How long before expiry a token of `life_ms` is replaced: 10% of its life, but at least
/// 5 minutes, and never more than half its life (so a short-lived token is still reused).
/// For Google's 3599 s tokens that is about 6 minutes.
pub(crate) fn refresh_margin_ms(life_ms: i64) -> i64 {
    (life_ms / 10).max(300_000.min(life_ms / 2))
}

impl AccessToken {
    /// A token obtained at `obtained_ms` that lives `expires_in_s`.
    pub(crate) fn new(value: Secret, obtained_ms: i64, expires_in_s: u64) -> Self {
        let life_ms = (expires_in_s.min(86_400 * 365) * 1000) as i64;
        let expires_at_ms = obtained_ms + life_ms;
        Self {
            value,
            expires_at_ms,
            refresh_at_ms: expires_at_ms - refresh_margin_ms(life_ms),
        }
    }

    pub(crate) fn expose(&self) -> &str {
        self.value.expose()
    }

    fn fresh(&self, now_ms: i64) -> bool {
        now_ms < self.refresh_at_ms
    }

    fn usable(&self, now_ms: i64) -> bool {
        now_ms
            < self.expires_at_ms - HARD_MARGIN_MS.min((self.expires_at_ms - self.refresh_at_ms) / 2)
    }
}

/// What a token request produced.
pub(crate) struct Fetched {
    pub value: Secret,
    pub expires_in_s: u64,
}

/// The access token cache with single-flight refresh.
#[derive(Default)]
pub(crate) struct TokenCache {
    current: Mutex<Option<Arc<AccessToken>>>,
    flight: tokio::sync::Mutex<()>,
    /// Token requests completed (success or not).
    attempts: AtomicU64,
    /// The failure of the last completed request, if it failed.
    last_failure: Mutex<Option<FcmOutcome>>,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("cached", &self.current().is_some())
            .field("attempts", &self.attempts.load(Ordering::SeqCst))
            .finish()
    }
}

impl TokenCache {
    fn current(&self) -> Option<Arc<AccessToken>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The token to send with: the cached one while fresh; else one token request
    /// (`fetch`) shared by every concurrent caller. While a refresh is in flight, callers
    /// holding a still-valid token use it instead of waiting. Callers that waited for a
    /// request that failed get its failure instead of asking again; when a refresh fails
    /// but the old token is still valid, the old token is used. Waiting for someone else's
    /// request ends at `deadline` (a timeout, stage `token`).
    pub(crate) async fn get<F, Fut>(
        &self,
        clock: &Clock,
        deadline: Instant,
        fetch: F,
    ) -> Result<Arc<AccessToken>, FcmOutcome>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Fetched, FcmOutcome>>,
    {
        let cur = self.current();
        let now = clock.now_ms();
        if let Some(t) = cur.as_ref().filter(|t| t.fresh(now)) {
            return Ok(t.clone());
        }
        let seen = self.attempts.load(Ordering::SeqCst);
        let _flight = match self.flight.try_lock() {
            Ok(g) => g,
            Err(_) => {
                if let Some(t) = cur.filter(|t| t.usable(now)) {
                    return Ok(t);
                }
                match tokio::time::timeout_at(deadline, self.flight.lock()).await {
                    Ok(g) => g,
                    Err(_) => {
                        return Err(FcmOutcome::Retryable(Failure::new(
                            Stage::Token,
                            0,
                            Reason::Timeout,
                        )))
                    }
                }
            }
        };
        // Someone else may have refreshed (or failed to) while this caller waited.
        let cur = self.current();
        let now = clock.now_ms();
        if let Some(t) = cur.as_ref().filter(|t| t.fresh(now)) {
            return Ok(t.clone());
        }
        if self.attempts.load(Ordering::SeqCst) != seen {
            let failure = self
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(failure) = failure {
                return match cur.filter(|t| t.usable(now)) {
                    Some(t) => Ok(t),
                    None => Err(failure),
                };
            }
        }
        let started = clock.now_ms();
        let result = fetch().await;
        let out = match result {
            Ok(f) => {
                let token = Arc::new(AccessToken::new(f.value, started, f.expires_in_s));
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
                *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(token)
            }
            Err(failure) => {
                *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(failure.clone());
                match cur.filter(|t| t.usable(clock.now_ms())) {
                    Some(t) => {
                        tracing::warn!(
                            reason = failure.label(),
                            "FCM access token refresh failed; the current token is still valid"
                        );
                        Ok(t)
                    }
                    None => Err(failure),
                }
            }
        };
        self.attempts.fetch_add(1, Ordering::SeqCst);
        out
    }

    /// FCM refused `rejected` (401): drop it, unless it was already replaced, so a burst of
    /// 401s for one token causes one refresh.
    pub(crate) fn invalidate(&self, rejected: &Arc<AccessToken>) {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.as_ref().is_some_and(|t| Arc::ptr_eq(t, rejected)) {
            *cur = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealrelay_testkit::mock_fcm::FIXTURE_RSA_PEM as KEY;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    impl TokenCache {
        /// Token requests completed so far.
        fn attempts(&self) -> u64 {
            self.attempts.load(Ordering::SeqCst)
        }
    }

    fn account_json(overrides: &[(&str, serde_json::Value)], remove: &[&str]) -> String {
        let mut v = serde_json::json!({
            "type": "service_account",
            "project_id": "demo-project",
            "private_key_id": "0123456789abcdef0123456789abcdef01234567",
            "private_key": KEY,
            "client_email": "relay@demo-project.iam.gserviceaccount.com",
            "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": "https://oauth2.googleapis.com/token",
            "universe_domain": "googleapis.com"
        });
        for (k, val) in overrides {
            v[*k] = val.clone();
        }
        for k in remove {
            v.as_object_mut().unwrap().remove(*k);
        }
        v.to_string()
    }

    /// No line of the key's base64 body, nor a 16-character prefix of one, in `text`.
    fn assert_no_key(text: &str) {
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        for line in KEY
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() > 16)
        {
            assert!(!text.contains(&line[..16]), "{text}");
        }
    }

    #[test]
    fn parses_a_google_key() {
        let a = ServiceAccount::from_json(&account_json(&[], &[])).unwrap();
        assert_eq!(a.project_id(), "demo-project");
        assert_eq!(a.client_email, "relay@demo-project.iam.gserviceaccount.com");
        assert_eq!(
            a.private_key_id.as_deref(),
            Some("0123456789abcdef0123456789abcdef01234567")
        );
        assert_eq!(a.token_uri(), "https://oauth2.googleapis.com/token");
        let dbg = format!("{a:?}");
        assert!(dbg.contains("[redacted]") && dbg.contains("demo-project"));
        assert_no_key(&dbg);
        // Without a key id: no `kid`.
        let a = ServiceAccount::from_json(&account_json(&[], &["private_key_id"])).unwrap();
        let jwt = a.sign_assertion(1).unwrap();
        assert_eq!(jsonwebtoken::decode_header(jwt.expose()).unwrap().kid, None);
    }

    #[test]
    fn literal_backslash_n_in_the_key_is_accepted() {
        let flat = KEY.replace('\n', "\\n");
        let json = account_json(&[("private_key", flat.into())], &[]);
        assert!(ServiceAccount::from_json(&json).is_ok());
    }

    #[test]
    fn every_missing_field_is_named() {
        for f in [
            "type",
            "project_id",
            "private_key",
            "client_email",
            "token_uri",
        ] {
            let e = ServiceAccount::from_json(&account_json(&[], &[f])).unwrap_err();
            assert_eq!(e, ServiceAccountError::Missing { field: f });
            assert!(e.to_string().contains(&format!("`{f}`")), "{e}");
            let e = ServiceAccount::from_json(&account_json(&[(f, serde_json::Value::Null)], &[]))
                .unwrap_err();
            assert_eq!(e, ServiceAccountError::Missing { field: f });
            let e = ServiceAccount::from_json(&account_json(&[(f, "  ".into())], &[])).unwrap_err();
            assert_eq!(e, ServiceAccountError::Missing { field: f });
            let e = ServiceAccount::from_json(&account_json(&[(f, 5.into())], &[])).unwrap_err();
            assert!(
                matches!(e, ServiceAccountError::Invalid { field, .. } if field == f),
                "{e}"
            );
        }
    }

    #[test]
    fn invalid_fields_are_named_without_the_key() {
        let ec = sealrelay_testkit::pki::generate_auth_key().unwrap().0;
        let truncated: String =
            KEY.lines().take(8).collect::<Vec<_>>().join("\n") + "\n-----END PRIVATE KEY-----\n";
        let cases: Vec<(&str, serde_json::Value)> = vec![
            ("type", "authorized_user".into()),
            ("project_id", "has/slash".into()),
            ("private_key_id", "has space".into()),
            ("client_email", "no-at-sign".into()),
            ("token_uri", "ftp://example.com/token".into()),
            ("token_uri", "not a url".into()),
            ("token_uri", "/token".into()),
            ("private_key", "just text".into()),
            ("private_key", ec.into()),
            ("private_key", truncated.into()),
            ("private_key", KEY.replace("MII", "MIJ").into()),
        ];
        for (field, value) in cases {
            let e = ServiceAccount::from_json(&account_json(&[(field, value.clone())], &[]))
                .unwrap_err();
            assert!(
                matches!(&e, ServiceAccountError::Invalid { field: f, .. } if *f == field),
                "{field}: {e:?}"
            );
            let text = format!("{e} {e:?}");
            assert!(text.contains(field), "{text}");
            assert_no_key(&text);
        }
        let e =
            ServiceAccount::from_json(&account_json(&[("type", "authorized_user".into())], &[]))
                .unwrap_err();
        assert!(e.to_string().contains("\"authorized_user\""), "{e}");
    }

    #[test]
    fn not_json_errors_never_quote_the_text() {
        let text = account_json(&[], &[]);
        let broken = &text[..text.len() - 3];
        let e = ServiceAccount::from_json(broken).unwrap_err();
        assert!(matches!(e, ServiceAccountError::NotJson { .. }), "{e:?}");
        assert_no_key(&format!("{e} {e:?}"));
        // A bad escape right inside the key.
        let bad = text.replacen("MII", "MII\\q", 1);
        let e = ServiceAccount::from_json(&bad).unwrap_err();
        assert!(matches!(e, ServiceAccountError::NotJson { .. }), "{e:?}");
        assert_no_key(&format!("{e} {e:?}"));
        assert_eq!(
            ServiceAccount::from_json("[1]").unwrap_err(),
            ServiceAccountError::NotObject
        );
    }

    fn b64url_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| -> u32 {
            match c {
                b'A'..=b'Z' => (c - b'A') as u32,
                b'a'..=b'z' => (c - b'a' + 26) as u32,
                b'0'..=b'9' => (c - b'0' + 52) as u32,
                b'-' => 62,
                b'_' => 63,
                _ => panic!("bad base64url"),
            }
        };
        let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
        for &c in s.as_bytes() {
            acc = (acc << 6) | val(c);
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
                acc &= (1 << bits) - 1;
            }
        }
        out
    }

    #[test]
    fn assertion_header_claims_and_signature() {
        let a = ServiceAccount::from_json(&account_json(&[], &[])).unwrap();
        let jwt = a.sign_assertion(1_700_000_000).unwrap();
        let parts: Vec<&str> = jwt.expose().split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value = serde_json::from_slice(&b64url_decode(parts[0])).unwrap();
        assert_eq!(
            header,
            serde_json::json!({"typ":"JWT","alg":"RS256","kid":"0123456789abcdef0123456789abcdef01234567"})
        );
        let claims: serde_json::Value = serde_json::from_slice(&b64url_decode(parts[1])).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({
                "iss": "relay@demo-project.iam.gserviceaccount.com",
                "scope": "https://www.googleapis.com/auth/firebase.messaging",
                "aud": "https://oauth2.googleapis.com/token",
                "iat": 1_700_000_000u64,
                "exp": 1_700_003_600u64,
            })
        );
        // RS256 = RSASSA-PKCS1-v1_5 with SHA-256, checked with ring against the key's public half.
        use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
        let der = PrivateKeyDer::from_pem_slice(KEY.as_bytes()).unwrap();
        let pair = ring::signature::RsaKeyPair::from_pkcs8(der.secret_der()).unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            ring::signature::KeyPair::public_key(&pair)
                .as_ref()
                .to_vec(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        public
            .verify(signed.as_bytes(), &b64url_decode(parts[2]))
            .unwrap();
        assert!(public.verify(b"other", &b64url_decode(parts[2])).is_err());
        let body = a.token_request_body(1_700_000_000).unwrap();
        assert_eq!(
            body.expose(),
            format!(
                "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={}",
                jwt.expose()
            )
        );
        assert_eq!(format!("{jwt:?} {body:?}"), "[redacted] [redacted]");
    }

    #[test]
    fn refresh_margin() {
        assert_eq!(refresh_margin_ms(3_599_000), 359_900);
        assert_eq!(refresh_margin_ms(3_000_000), 300_000);
        assert_eq!(refresh_margin_ms(600_000), 300_000);
        assert_eq!(refresh_margin_ms(120_000), 60_000);
        assert_eq!(refresh_margin_ms(0), 0);
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    fn ok(n: usize) -> Result<Fetched, FcmOutcome> {
        Ok(Fetched {
            value: Secret::new(format!("tok-{n}")),
            expires_in_s: 3599,
        })
    }

    fn unavailable() -> FcmOutcome {
        FcmOutcome::Retryable(Failure::new(Stage::Token, 503, Reason::Unavailable))
    }

    #[tokio::test]
    async fn cached_until_the_refresh_margin() {
        let clock = Clock::manual(1_700_000_000_000);
        let cache = TokenCache::default();
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            ok(n)
        };
        let get = || cache.get(&clock, deadline(), fetch);
        assert_eq!(get().await.unwrap().expose(), "tok-0");
        clock.advance_ms(3_599_000 - 359_900 - 1);
        assert_eq!(get().await.unwrap().expose(), "tok-0");
        clock.advance_ms(1);
        assert_eq!(get().await.unwrap().expose(), "tok-1");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn single_flight_under_concurrency() {
        let clock = Clock::manual(1_700_000_000_000);
        let cache = Arc::new(TokenCache::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let (cache, calls, gate, clock) =
                (cache.clone(), calls.clone(), gate.clone(), clock.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get(&clock, deadline(), || async {
                        let n = calls.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        ok(n)
                    })
                    .await
                    .map(|t| t.expose().to_owned())
            }));
        }
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), "tok-0");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.attempts(), 1);
    }

    #[tokio::test]
    async fn waiters_share_a_failure_and_never_stampede() {
        let clock = Clock::manual(1_700_000_000_000);
        let cache = Arc::new(TokenCache::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (cache, calls, gate, clock) =
                (cache.clone(), calls.clone(), gate.clone(), clock.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get(&clock, deadline(), || async {
                        calls.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Err(unavailable())
                    })
                    .await
                    .map(|_| ())
            }));
        }
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap_err(), unavailable());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // A later caller asks again (and succeeds).
        let t = cache
            .get(&clock, deadline(), || async { ok(7) })
            .await
            .unwrap();
        assert_eq!(t.expose(), "tok-7");
    }

    #[tokio::test]
    async fn old_token_is_used_while_refreshing_and_when_refresh_fails() {
        let clock = Clock::manual(1_700_000_000_000);
        let cache = Arc::new(TokenCache::default());
        cache
            .get(&clock, deadline(), || async { ok(0) })
            .await
            .unwrap();
        // Into the refresh window, still valid.
        clock.advance_ms(3_400_000);
        let gate = Arc::new(tokio::sync::Notify::new());
        let refresher = {
            let (cache, gate, clock) = (cache.clone(), gate.clone(), clock.clone());
            tokio::spawn(async move {
                cache
                    .get(&clock, deadline(), || async move {
                        gate.notified().await;
                        Err(unavailable())
                    })
                    .await
                    .map(|t| t.expose().to_owned())
            })
        };
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        // While the refresh hangs, others are not held up.
        let other = cache
            .get(&clock, deadline(), || async { ok(99) })
            .await
            .unwrap();
        assert_eq!(other.expose(), "tok-0");
        gate.notify_one();
        // The refresh failed, but tok-0 is still valid: it is used.
        assert_eq!(refresher.await.unwrap().unwrap(), "tok-0");
        // Past expiry, a failure is a failure.
        clock.advance_ms(200_000);
        assert_eq!(
            cache
                .get(&clock, deadline(), || async { Err(unavailable()) })
                .await
                .unwrap_err(),
            unavailable()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_another_request_ends_at_the_deadline() {
        let clock = Clock::manual(1_700_000_000_000);
        let cache = Arc::new(TokenCache::default());
        let gate = Arc::new(tokio::sync::Notify::new());
        let holder = {
            let (cache, gate, clock) = (cache.clone(), gate.clone(), clock.clone());
            tokio::spawn(async move {
                cache
                    .get(
                        &clock,
                        Instant::now() + Duration::from_secs(60),
                        || async move {
                            gate.notified().await;
                            ok(0)
                        },
                    )
                    .await
                    .map(|t| t.expose().to_owned())
            })
        };
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        let waited = cache
            .get(&clock, started + Duration::from_secs(2), || async { ok(1) })
            .await
            .unwrap_err();
        assert_eq!(
            waited,
            FcmOutcome::Retryable(Failure::new(Stage::Token, 0, Reason::Timeout))
        );
        assert!((Duration::from_secs(2)..Duration::from_secs(3)).contains(&started.elapsed()));
        gate.notify_one();
        assert_eq!(holder.await.unwrap().unwrap(), "tok-0");
    }

    #[tokio::test]
    async fn invalidate_drops_only_the_rejected_token() {
        let clock = Clock::manual(1_700_000_000_000);
        let cache = TokenCache::default();
        let a = cache
            .get(&clock, deadline(), || async { ok(0) })
            .await
            .unwrap();
        let stale = Arc::new(AccessToken::new(Secret::new("old"), 0, 10));
        cache.invalidate(&stale);
        assert!(Arc::ptr_eq(
            &a,
            &cache
                .get(&clock, deadline(), || async { ok(1) })
                .await
                .unwrap()
        ));
        cache.invalidate(&a);
        assert_eq!(
            cache
                .get(&clock, deadline(), || async { ok(2) })
                .await
                .unwrap()
                .expose(),
            "tok-2"
        );
        assert!(!format!("{a:?} {cache:?}").contains("tok-"));
    }
}
