//! A stand-in for FCM HTTP v1 and Google's OAuth2 token endpoint, over TLS, for tests.
//!
//! Independent of the client code: it checks what Google checks that matters here.
//!
//! - `POST /token`: the JWT-bearer grant. The assertion must be RS256-signed by the service
//!   account's key, with `kid` = `private_key_id` (or none), `iss` = `client_email`, a `scope`
//!   including firebase.messaging, `aud` = this token URL, `iat` not in the future (60 s
//!   skew), `exp` - `iat` at most 3600 and `exp` not past. It answers
//!   `{"access_token","expires_in","token_type":"Bearer"}` or 400 `invalid_grant`.
//! - `POST /v1/projects/<project>/messages:send`: needs `Authorization: Bearer <a token it
//!   issued, not expired>` (else 401), the right project (else 403), and exactly
//!   `message.token`, `message.data` (string to string), `message.android.priority`
//!   (normal|high) and `message.android.ttl` (`"<n>s"`), else 400 `INVALID_ARGUMENT`; all
//!   errors in Google's shape. It records every message that passes and answers as
//!   scripted per registration token, else `{"name":"projects/<p>/messages/<id>"}`.
//!
//! Its certificate comes from [`crate::pki`] (a fresh CA per mock, written to a file for
//! `FCM_CA_FILE`). It binds 127.0.0.1:0, serves HTTP/2 and HTTP/1.1 by ALPN (HTTP/1.1 only
//! when asked, like some egress proxies), and stops when dropped. Its clock can be moved
//! ([`MockFcm::advance_clock`]) to expire the tokens it issued.
//!
//! The service account's RSA key is a committed, throwaway fixture (`fixtures/`): ring,
//! the one crypto provider here, cannot generate RSA keys.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::pki::Pki;

/// The firebase.messaging OAuth2 scope.
pub const SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
/// The default access token lifetime, as Google answers.
pub const DEFAULT_TOKEN_LIFETIME_S: u64 = 3599;
/// A throwaway 2048-bit RSA key (PKCS#8 PEM), committed for tests only.
pub const FIXTURE_RSA_PEM: &str = include_str!("../fixtures/test-only-rsa.pem");
/// A second, unrelated throwaway key, to sign with the wrong key.
pub const FIXTURE_RSA_OTHER_PEM: &str = include_str!("../fixtures/test-only-rsa-other.pem");

/// Which RSA key the service account has.
#[derive(Clone, Default)]
pub enum KeySource {
    /// [`FIXTURE_RSA_PEM`]. The default.
    #[default]
    Fixture,
    /// [`FIXTURE_RSA_OTHER_PEM`].
    FixtureOther,
    /// This PKCS#8 PEM.
    Pem(String),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeySource::Fixture => "Fixture",
            KeySource::FixtureOther => "FixtureOther",
            KeySource::Pem(_) => "Pem(<redacted>)",
        })
    }
}

impl KeySource {
    /// The PEM.
    pub fn pem(&self) -> String {
        match self {
            KeySource::Fixture => FIXTURE_RSA_PEM.to_owned(),
            KeySource::FixtureOther => FIXTURE_RSA_OTHER_PEM.to_owned(),
            KeySource::Pem(p) => p.clone(),
        }
    }
}

/// The public half of a PKCS#8 RSA key, as the DER `RSAPublicKey` ring verifies with.
fn rsa_public_der(private_pem: &str) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
    let der = PrivateKeyDer::from_pem_slice(private_pem.as_bytes())
        .map_err(|_| anyhow::anyhow!("the service account key is not PEM"))?;
    let pair = ring::signature::RsaKeyPair::from_pkcs8(der.secret_der())
        .map_err(|_| anyhow::anyhow!("the service account key is not a PKCS#8 RSA key"))?;
    Ok(ring::signature::KeyPair::public_key(&pair)
        .as_ref()
        .to_vec())
}

/// The service account the mock accepts.
#[derive(Clone)]
pub struct MockServiceAccount {
    /// `project_id`.
    pub project_id: String,
    /// `client_email`: the assertion's `iss`.
    pub client_email: String,
    /// `private_key_id`: the assertion's `kid`.
    pub private_key_id: String,
    /// `private_key`, PKCS#8 PEM.
    pub private_key_pem: String,
    /// `token_uri`: the mock's `/token`.
    pub token_uri: String,
}

impl std::fmt::Debug for MockServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServiceAccount")
            .field("project_id", &self.project_id)
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("private_key_pem", &"<redacted>")
            .finish()
    }
}

impl MockServiceAccount {
    /// The JSON key, shaped like the one the Google Cloud console downloads.
    pub fn to_json(&self) -> String {
        json!({
            "type": "service_account",
            "project_id": self.project_id,
            "private_key_id": self.private_key_id,
            "private_key": self.private_key_pem,
            "client_email": self.client_email,
            "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_uri,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "universe_domain": "googleapis.com"
        })
        .to_string()
    }

    /// The same account with another private key (to sign with the wrong key).
    pub fn with_private_key(&self, pem: &str) -> Self {
        Self {
            private_key_pem: pem.to_owned(),
            ..self.clone()
        }
    }
}

/// How the mock is set up.
#[derive(Debug, Clone)]
pub struct MockFcmConfig {
    /// The Firebase project.
    pub project_id: String,
    /// The service account's e-mail.
    pub client_email: String,
    /// The service account's key id.
    pub private_key_id: String,
    /// The service account's RSA key.
    pub key: KeySource,
    /// Offer HTTP/2 by ALPN (`false`: HTTP/1.1 only, like some proxies).
    pub http2: bool,
    /// `expires_in` of issued access tokens.
    pub token_lifetime_s: u64,
}

impl Default for MockFcmConfig {
    fn default() -> Self {
        Self {
            project_id: "sealrelay-test".into(),
            client_email: "relay@sealrelay-test.iam.gserviceaccount.com".into(),
            private_key_id: "5e3a1c0ffee0ddba11c0ffee0ddba11c0ffee0d".into(),
            key: KeySource::Fixture,
            http2: true,
            token_lifetime_s: DEFAULT_TOKEN_LIFETIME_S,
        }
    }
}

/// A scripted `messages:send` answer, in Google's exact error shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MockReply {
    /// 200 with a message name (the normal answer; useful with a delay).
    Deliver,
    /// 404 `NOT_FOUND` / `UNREGISTERED`.
    Unregistered,
    /// 400 `INVALID_ARGUMENT` / `INVALID_ARGUMENT`.
    InvalidArgument,
    /// 429 `RESOURCE_EXHAUSTED` / `QUOTA_EXCEEDED`, with `Retry-After` when given.
    QuotaExceeded {
        /// `Retry-After` seconds.
        retry_after_s: Option<u64>,
    },
    /// 503 `UNAVAILABLE` / `UNAVAILABLE`, with `Retry-After` when given.
    Unavailable {
        /// `Retry-After` seconds.
        retry_after_s: Option<u64>,
    },
    /// 500 `INTERNAL` / `INTERNAL`.
    Internal,
    /// 403 `PERMISSION_DENIED` / `SENDER_ID_MISMATCH`.
    SenderIdMismatch,
    /// 401 `UNAUTHENTICATED` / `THIRD_PARTY_AUTH_ERROR`.
    ThirdPartyAuthError,
    /// Any status and body, verbatim.
    Raw {
        /// HTTP status.
        status: u16,
        /// The body.
        body: String,
    },
}

/// A scripted answer and how long to wait before giving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scripted {
    /// The answer.
    pub reply: MockReply,
    /// Wait this long first.
    pub delay: Duration,
}

impl From<MockReply> for Scripted {
    fn from(reply: MockReply) -> Self {
        Self {
            reply,
            delay: Duration::ZERO,
        }
    }
}

impl MockReply {
    /// This answer after `delay`.
    pub fn after(self, delay: Duration) -> Scripted {
        Scripted { reply: self, delay }
    }
}

/// A scripted answer of the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenReply {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: String,
    /// `Retry-After` seconds.
    pub retry_after_s: Option<u64>,
}

impl TokenReply {
    /// 503 with a Google-style error.
    pub fn unavailable() -> Self {
        Self {
            status: 503,
            body: r#"{"error":"temporarily_unavailable","error_description":"The service is unavailable."}"#.into(),
            retry_after_s: None,
        }
    }

    /// 400 `invalid_grant`.
    pub fn invalid_grant(description: &str) -> Self {
        Self {
            status: 400,
            body: json!({"error":"invalid_grant","error_description":description}).to_string(),
            retry_after_s: None,
        }
    }
}

/// One `messages:send` request that passed the auth and shape checks.
#[derive(Clone)]
pub struct ReceivedMessage {
    /// `message.token`.
    pub token: String,
    /// `message.data` (in the order sent only when serde_json keeps order; compare
    /// [`ReceivedMessage::body`] for the exact bytes).
    pub data: Vec<(String, String)>,
    /// `message.android.priority`.
    pub priority: String,
    /// `message.android.ttl`.
    pub ttl: String,
    /// The raw body.
    pub body: Bytes,
    /// Request headers (lowercase names).
    pub headers: HashMap<String, String>,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    /// The bearer access token.
    pub access_token: String,
    /// The status answered.
    pub status: u16,
}

impl std::fmt::Debug for ReceivedMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedMessage")
            .field(
                "data_keys",
                &self.data.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("priority", &self.priority)
            .field("ttl", &self.ttl)
            .field("version", &self.version)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl ReceivedMessage {
    /// A header's value, or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    /// A data member's value.
    pub fn data(&self, key: &str) -> Option<&str> {
        self.data
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Script {
    once: HashMap<String, VecDeque<Scripted>>,
    always: HashMap<String, Scripted>,
}

struct Shared {
    account: MockServiceAccount,
    public_key: jsonwebtoken::DecodingKey,
    audience: Mutex<String>,
    token_lifetime_s: AtomicU64,
    clock_offset_s: AtomicI64,
    issued: Mutex<HashMap<String, i64>>,
    script: Mutex<Script>,
    token_script: Mutex<VecDeque<TokenReply>>,
    send_delay: Mutex<Duration>,
    token_delay: Mutex<Duration>,
    messages: Mutex<Vec<ReceivedMessage>>,
    assertions: Mutex<Vec<String>>,
    rejections: Mutex<Vec<String>>,
    token_requests: AtomicUsize,
    tokens_issued: AtomicUsize,
    send_requests: AtomicUsize,
    unauthorized: AtomicUsize,
    delivered: AtomicUsize,
    connections: AtomicUsize,
    next_id: AtomicU64,
}

impl Shared {
    fn now_s(&self) -> i64 {
        let sys = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        sys + self.clock_offset_s.load(Ordering::SeqCst)
    }
}

/// A running mock FCM. Stops (closes its port and connections) when dropped.
pub struct MockFcm {
    addr: SocketAddr,
    pki: Pki,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for MockFcm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockFcm")
            .field("addr", &self.addr)
            .field("account", &self.shared.account)
            .finish_non_exhaustive()
    }
}

impl MockFcm {
    /// Starts a mock on a free port of 127.0.0.1, with a fresh CA and server certificate.
    pub async fn start(cfg: MockFcmConfig) -> anyhow::Result<Self> {
        use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
        let pki = Pki::new();
        let private_key_pem = cfg.key.pem();
        let public_key =
            jsonwebtoken::DecodingKey::from_rsa_der(&rsa_public_der(&private_key_pem)?);

        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pki.cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(pki.key_pem.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        tls.alpn_protocols = if cfg.http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let token_uri = format!("https://127.0.0.1:{}/token", addr.port());
        let account = MockServiceAccount {
            project_id: cfg.project_id,
            client_email: cfg.client_email,
            private_key_id: cfg.private_key_id,
            private_key_pem,
            token_uri: token_uri.clone(),
        };
        let shared = Arc::new(Shared {
            account,
            public_key,
            audience: Mutex::new(token_uri),
            token_lifetime_s: AtomicU64::new(cfg.token_lifetime_s),
            clock_offset_s: AtomicI64::new(0),
            issued: Mutex::default(),
            script: Mutex::default(),
            token_script: Mutex::default(),
            send_delay: Mutex::new(Duration::ZERO),
            token_delay: Mutex::new(Duration::ZERO),
            messages: Mutex::default(),
            assertions: Mutex::default(),
            rejections: Mutex::default(),
            token_requests: AtomicUsize::new(0),
            tokens_issued: AtomicUsize::new(0),
            send_requests: AtomicUsize::new(0),
            unauthorized: AtomicUsize::new(0),
            delivered: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
        });

        let (stop, mut stop_rx) = watch::channel(false);
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
                    _ = stop_rx.changed() => return,
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let s = s.clone();
                let mut stop_rx = stop_rx.clone();
                tokio::spawn(async move {
                    let accept =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp));
                    let Ok(Ok(tls)) = accept.await else {
                        return;
                    };
                    s.connections.fetch_add(1, Ordering::SeqCst);
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    let svc_shared = s.clone();
                    let svc = hyper::service::service_fn(move |req| {
                        let s = svc_shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&s, req).await) }
                    });
                    let io = TokioIo::new(tls);
                    if h2 {
                        let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .timer(TokioTimer::new())
                            .max_concurrent_streams(1000)
                            .serve_connection(io, svc);
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = stop_rx.changed() => {
                                conn.as_mut().graceful_shutdown();
                                let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                            }
                        }
                    } else {
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .serve_connection(io, svc);
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = stop_rx.changed() => {
                                conn.as_mut().graceful_shutdown();
                                let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                            }
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            pki,
            shared,
            stop,
        })
    }

    /// `https://127.0.0.1:<port>`: the client's `FCM_URL`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    /// `https://127.0.0.1:<port>/token`: the service account's `token_uri`.
    pub fn token_url(&self) -> String {
        format!("{}/token", self.url())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) that signed the server certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// A file holding that CA certificate, for `FCM_CA_FILE` (lives as long as the mock).
    pub fn ca_file(&self) -> &Path {
        &self.pki.ca_file
    }

    /// The service account the mock accepts.
    pub fn service_account(&self) -> &MockServiceAccount {
        &self.shared.account
    }

    /// Its JSON key (`FCM_SERVICE_ACCOUNT`).
    pub fn service_account_json(&self) -> String {
        self.shared.account.to_json()
    }

    /// The next `times` sends to `token` get this answer.
    pub fn reply_times(&self, token: &str, reply: impl Into<Scripted>, times: usize) {
        let reply = reply.into();
        let mut s = self.shared.script.lock().unwrap();
        let q = s.once.entry(token.to_owned()).or_default();
        for _ in 0..times {
            q.push_back(reply.clone());
        }
    }

    /// Every send to `token` gets this answer (after any queued ones).
    pub fn reply_always(&self, token: &str, reply: impl Into<Scripted>) {
        self.shared
            .script
            .lock()
            .unwrap()
            .always
            .insert(token.to_owned(), reply.into());
    }

    /// Forgets every scripted send answer.
    pub fn clear_replies(&self) {
        *self.shared.script.lock().unwrap() = Script::default();
    }

    /// Delays every `messages:send` answer.
    pub fn set_send_delay(&self, d: Duration) {
        *self.shared.send_delay.lock().unwrap() = d;
    }

    /// Delays every token answer.
    pub fn set_token_delay(&self, d: Duration) {
        *self.shared.token_delay.lock().unwrap() = d;
    }

    /// The next `times` token requests get this answer, whatever they carry.
    pub fn token_reply_times(&self, reply: TokenReply, times: usize) {
        let mut q = self.shared.token_script.lock().unwrap();
        for _ in 0..times {
            q.push_back(reply.clone());
        }
    }

    /// Every access token issued so far stops working (a send with it gets 401).
    pub fn expire_access_tokens(&self) {
        for exp in self.shared.issued.lock().unwrap().values_mut() {
            *exp = i64::MIN;
        }
    }

    /// `expires_in` of tokens issued from now on (0: dead on arrival).
    pub fn set_token_lifetime(&self, secs: u64) {
        self.shared.token_lifetime_s.store(secs, Ordering::SeqCst);
    }

    /// The `aud` the token endpoint demands (default: its own URL).
    pub fn set_expected_audience(&self, aud: &str) {
        *self.shared.audience.lock().unwrap() = aud.to_owned();
    }

    /// Moves the mock's clock (token expiry, assertion times) forward by `secs`.
    pub fn advance_clock(&self, secs: i64) {
        self.shared.clock_offset_s.fetch_add(secs, Ordering::SeqCst);
    }

    /// Token requests received, whatever the answer.
    pub fn token_requests(&self) -> usize {
        self.shared.token_requests.load(Ordering::SeqCst)
    }

    /// Access tokens issued.
    pub fn tokens_issued(&self) -> usize {
        self.shared.tokens_issued.load(Ordering::SeqCst)
    }

    /// `messages:send` requests received, whatever the answer.
    pub fn send_requests(&self) -> usize {
        self.shared.send_requests.load(Ordering::SeqCst)
    }

    /// `messages:send` requests answered 401 for a missing, unknown or expired token.
    pub fn unauthorized(&self) -> usize {
        self.shared.unauthorized.load(Ordering::SeqCst)
    }

    /// `messages:send` requests answered 200.
    pub fn delivered(&self) -> usize {
        self.shared.delivered.load(Ordering::SeqCst)
    }

    /// TLS connections accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Every message that passed the auth and shape checks, in arrival order.
    pub fn messages(&self) -> Vec<ReceivedMessage> {
        self.shared.messages.lock().unwrap().clone()
    }

    /// The messages for one registration token.
    pub fn messages_for(&self, token: &str) -> Vec<ReceivedMessage> {
        self.messages()
            .into_iter()
            .filter(|m| m.token == token)
            .collect()
    }

    /// Every assertion the token endpoint received (for leak scans).
    pub fn assertions(&self) -> Vec<String> {
        self.shared.assertions.lock().unwrap().clone()
    }

    /// Every access token issued (for leak scans).
    pub fn issued_access_tokens(&self) -> Vec<String> {
        self.shared.issued.lock().unwrap().keys().cloned().collect()
    }

    /// The `error_description` of every refused token request, in order.
    pub fn token_rejections(&self) -> Vec<String> {
        self.shared.rejections.lock().unwrap().clone()
    }
}

impl Drop for MockFcm {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn respond(status: u16, body: String, extra: &[(&str, String)]) -> Response<Full<Bytes>> {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=UTF-8");
    for (k, v) in extra {
        b = b.header(*k, v);
    }
    b.body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// Google's error body. `fcm_code` adds the FcmError detail, `violation` a BadRequest one.
pub fn google_error_body(
    code: u16,
    status: &str,
    message: &str,
    fcm_code: Option<&str>,
    violation: Option<(&str, &str)>,
) -> String {
    let mut details = Vec::new();
    if let Some(c) = fcm_code {
        details.push(json!({
            "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
            "errorCode": c
        }));
    }
    if let Some((field, description)) = violation {
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": field, "description": description}]
        }));
    }
    // Written by hand to keep Google's member order whatever serde_json's features.
    let mut out = format!(
        r#"{{"error":{{"code":{code},"message":{},"status":{}"#,
        Value::from(message),
        Value::from(status)
    );
    if !details.is_empty() {
        out.push_str(",\"details\":");
        out.push_str(&Value::Array(details).to_string());
    }
    out.push_str("}}");
    out
}

fn scripted_response(reply: &MockReply, name: &str) -> (u16, Response<Full<Bytes>>) {
    let retry = |s: &Option<u64>| -> Vec<(&'static str, String)> {
        s.map(|s| vec![("retry-after", s.to_string())])
            .unwrap_or_default()
    };
    let (status, body, extra) = match reply {
        MockReply::Deliver => (200, json!({ "name": name }).to_string(), vec![]),
        MockReply::Unregistered => (
            404,
            google_error_body(404, "NOT_FOUND", "Requested entity was not found.", Some("UNREGISTERED"), None),
            vec![],
        ),
        MockReply::InvalidArgument => (
            400,
            google_error_body(
                400,
                "INVALID_ARGUMENT",
                "The registration token is not a valid FCM registration token",
                Some("INVALID_ARGUMENT"),
                None,
            ),
            vec![],
        ),
        MockReply::QuotaExceeded { retry_after_s } => (
            429,
            google_error_body(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute'.",
                Some("QUOTA_EXCEEDED"),
                None,
            ),
            retry(retry_after_s),
        ),
        MockReply::Unavailable { retry_after_s } => (
            503,
            google_error_body(503, "UNAVAILABLE", "The service is currently unavailable.", Some("UNAVAILABLE"), None),
            retry(retry_after_s),
        ),
        MockReply::Internal => (
            500,
            google_error_body(500, "INTERNAL", "Internal error encountered.", Some("INTERNAL"), None),
            vec![],
        ),
        MockReply::SenderIdMismatch => (
            403,
            google_error_body(403, "PERMISSION_DENIED", "SenderId mismatch", Some("SENDER_ID_MISMATCH"), None),
            vec![],
        ),
        MockReply::ThirdPartyAuthError => (
            401,
            google_error_body(
                401,
                "UNAUTHENTICATED",
                "Auth error from APNS or Web Push Service",
                Some("THIRD_PARTY_AUTH_ERROR"),
                None,
            ),
            vec![],
        ),
        MockReply::Raw { status, body } => (*status, body.clone(), vec![]),
    };
    (status, respond(status, body, &extra))
}

async fn handle(s: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    if path == "/token" {
        return handle_token(s, req).await;
    }
    if let Some(project) = path
        .strip_prefix("/v1/projects/")
        .and_then(|p| p.strip_suffix("/messages:send"))
    {
        let project = project.to_owned();
        return handle_send(s, &project, req).await;
    }
    respond(
        404,
        google_error_body(
            404,
            "NOT_FOUND",
            "Requested entity was not found.",
            None,
            None,
        ),
        &[],
    )
}

// ---------------------------------------------------------------------------------------
// The token endpoint.

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn parse_form(body: &str) -> Option<HashMap<String, String>> {
    let mut m = HashMap::new();
    for pair in body.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(percent_decode(k)?, percent_decode(v)?);
    }
    Some(m)
}

const BAD_TIMES: &str = "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.";

/// Checks an assertion as Google does: `Err((error, error_description))`.
fn check_assertion(s: &Shared, jwt: &str) -> Result<(), (&'static str, String)> {
    let grant = |d: &str| ("invalid_grant", d.to_owned());
    let header = jsonwebtoken::decode_header(jwt).map_err(|_| grant("Invalid JWT: malformed"))?;
    if header.alg != jsonwebtoken::Algorithm::RS256 {
        return Err(grant("Invalid JWT: the algorithm must be RS256"));
    }
    // Google picks the key by `kid`, and tries the account's keys when there is none.
    if header
        .kid
        .as_deref()
        .is_some_and(|kid| kid != s.account.private_key_id)
    {
        return Err(grant(
            "Invalid JWT Signature: kid does not name a key of this service account",
        ));
    }
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    v.validate_exp = false;
    v.validate_nbf = false;
    v.validate_aud = false;
    v.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Value>(jwt, &s.public_key, &v)
        .map_err(|_| grant("Invalid JWT Signature."))?
        .claims;
    if claims.get("iss").and_then(Value::as_str) != Some(s.account.client_email.as_str()) {
        return Err(grant("Invalid grant: account not found"));
    }
    let scopes = claims.get("scope").and_then(Value::as_str).unwrap_or("");
    if !scopes.split(' ').any(|sc| sc == SCOPE) {
        return Err((
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.".to_owned(),
        ));
    }
    let audience = s.audience.lock().unwrap().clone();
    if claims.get("aud").and_then(Value::as_str) != Some(audience.as_str()) {
        return Err(grant(&format!(
            "Invalid JWT: Failed audience check. The right audience is {audience}"
        )));
    }
    let (Some(iat), Some(exp)) = (
        claims.get("iat").and_then(Value::as_i64),
        claims.get("exp").and_then(Value::as_i64),
    ) else {
        return Err(grant(BAD_TIMES));
    };
    let now = s.now_s();
    if iat > now + 60 || exp <= iat || exp - iat > 3600 || exp + 60 <= now {
        return Err(grant(BAD_TIMES));
    }
    Ok(())
}

fn random_hex(n: usize) -> String {
    use ring::rand::SecureRandom;
    let mut b = vec![0u8; n];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn handle_token(s: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    s.token_requests.fetch_add(1, Ordering::SeqCst);
    let delay = *s.token_delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let method_ok = req.method() == hyper::Method::POST;
    let form_ok = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let scripted = s.token_script.lock().unwrap().pop_front();
    if let Some(r) = scripted {
        let extra: Vec<(&str, String)> = r
            .retry_after_s
            .map(|x| vec![("retry-after", x.to_string())])
            .unwrap_or_default();
        return respond(r.status, r.body, &extra);
    }
    let refuse = |error: &str, description: String| {
        s.rejections.lock().unwrap().push(description.clone());
        respond(
            400,
            json!({"error": error, "error_description": description}).to_string(),
            &[],
        )
    };
    if !method_ok || !form_ok {
        return refuse(
            "invalid_request",
            "Expected a POST of application/x-www-form-urlencoded".into(),
        );
    }
    let Some(form) = std::str::from_utf8(&body).ok().and_then(parse_form) else {
        return refuse("invalid_request", "Malformed form body".into());
    };
    if form.get("grant_type").map(String::as_str)
        != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
    {
        return refuse("unsupported_grant_type", "Invalid grant_type".into());
    }
    let Some(assertion) = form.get("assertion") else {
        return refuse(
            "invalid_request",
            "Missing required parameter: assertion".into(),
        );
    };
    s.assertions.lock().unwrap().push(assertion.clone());
    if let Err((error, description)) = check_assertion(s, assertion) {
        return refuse(error, description);
    }
    let token = format!("ya29.mock-{}", random_hex(32));
    let lifetime = s.token_lifetime_s.load(Ordering::SeqCst);
    s.issued
        .lock()
        .unwrap()
        .insert(token.clone(), s.now_s() + lifetime as i64);
    s.tokens_issued.fetch_add(1, Ordering::SeqCst);
    respond(
        200,
        json!({"access_token": token, "expires_in": lifetime, "token_type": "Bearer"}).to_string(),
        &[],
    )
}

// ---------------------------------------------------------------------------------------
// messages:send.

struct Parsed {
    token: String,
    data: Vec<(String, String)>,
    priority: String,
    ttl: String,
}

fn invalid(field: &str, description: &str) -> (String, String) {
    (field.to_owned(), description.to_owned())
}

fn only_keys(
    obj: &serde_json::Map<String, Value>,
    allowed: &[&str],
    at: &str,
) -> Result<(), (String, String)> {
    for k in obj.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(invalid(
                at,
                &format!("Invalid JSON payload received. Unknown name \"{k}\" at '{at}': Cannot find field."),
            ));
        }
    }
    for k in allowed {
        if !obj.contains_key(*k) {
            return Err(invalid(&format!("{at}.{k}"), "Required field missing"));
        }
    }
    Ok(())
}

fn valid_ttl(ttl: &str) -> bool {
    let Some(num) = ttl.strip_suffix('s') else {
        return false;
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    !whole.is_empty()
        && whole.len() <= 8
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.len() <= 9
        && frac.bytes().all(|b| b.is_ascii_digit())
        && num.contains('.') != frac.is_empty()
        && whole.parse::<u64>().is_ok_and(|w| w <= 2_419_200)
}

fn valid_registration_token(t: &str) -> bool {
    (32..=1024).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'))
}

fn check_shape(body: &[u8]) -> Result<Parsed, (String, String)> {
    let v: Value =
        serde_json::from_slice(body).map_err(|_| invalid("", "Invalid JSON payload received."))?;
    let top = v
        .as_object()
        .ok_or_else(|| invalid("", "Invalid JSON payload received. Expected an object."))?;
    only_keys(top, &["message"], "")?;
    let msg = top["message"]
        .as_object()
        .ok_or_else(|| invalid("message", "Expected an object"))?;
    only_keys(msg, &["token", "data", "android"], "message")?;
    let token = msg["token"]
        .as_str()
        .ok_or_else(|| invalid("message.token", "Expected a string"))?;
    if !valid_registration_token(token) {
        return Err(invalid(
            "message.token",
            "The registration token is not a valid FCM registration token",
        ));
    }
    let data_obj = msg["data"]
        .as_object()
        .ok_or_else(|| invalid("message.data", "Expected a map of strings"))?;
    let mut data = Vec::new();
    for (k, val) in data_obj {
        let Some(s) = val.as_str() else {
            return Err(invalid(
                &format!("message.data[{k}]"),
                "Invalid value: data values must be strings",
            ));
        };
        let reserved = k == "from"
            || k == "message_type"
            || k == "collapse_key"
            || k.starts_with("google.")
            || k.starts_with("gcm.")
            || k.is_empty();
        if reserved {
            return Err(invalid(
                &format!("message.data[{k}]"),
                "Invalid data key: reserved",
            ));
        }
        data.push((k.clone(), s.to_owned()));
    }
    if data.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > 4096 {
        return Err(invalid("message.data", "Message is too big"));
    }
    let android = msg["android"]
        .as_object()
        .ok_or_else(|| invalid("message.android", "Expected an object"))?;
    only_keys(android, &["priority", "ttl"], "message.android")?;
    let priority = match android["priority"].as_str() {
        Some(p @ ("normal" | "high")) => p.to_owned(),
        _ => {
            return Err(invalid(
                "message.android.priority",
                "Invalid value at 'message.android.priority': must be \"normal\" or \"high\"",
            ))
        }
    };
    let ttl = match android["ttl"].as_str() {
        Some(t) if valid_ttl(t) => t.to_owned(),
        _ => {
            return Err(invalid(
                "message.android.ttl",
                "Invalid value at 'message.android.ttl': Illegal duration format",
            ))
        }
    };
    Ok(Parsed {
        token: token.to_owned(),
        data,
        priority,
        ttl,
    })
}

async fn handle_send(s: &Shared, project: &str, req: Request<Incoming>) -> Response<Full<Bytes>> {
    s.send_requests.fetch_add(1, Ordering::SeqCst);
    let delay = *s.send_delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let version = format!("{:?}", req.version());
    let is_post = req.method() == hyper::Method::POST;
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();

    let bearer = headers
        .get("authorization")
        .and_then(|a| {
            a.split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim().to_owned())
        })
        .unwrap_or_default();
    let valid = s
        .issued
        .lock()
        .unwrap()
        .get(&bearer)
        .is_some_and(|exp| *exp > s.now_s());
    if !valid {
        s.unauthorized.fetch_add(1, Ordering::SeqCst);
        return respond(
            401,
            google_error_body(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                None,
                None,
            ),
            &[("www-authenticate", "Bearer realm=\"https://accounts.google.com/\"".into())],
        );
    }
    if project != s.account.project_id {
        return respond(
            403,
            google_error_body(
                403,
                "PERMISSION_DENIED",
                &format!("Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/{project}' (or it may not exist)."),
                None,
                None,
            ),
            &[],
        );
    }
    let bad = |field: String, description: String| {
        respond(
            400,
            google_error_body(
                400,
                "INVALID_ARGUMENT",
                &description,
                Some("INVALID_ARGUMENT"),
                Some((&field, &description)),
            ),
            &[],
        )
    };
    if !is_post {
        return bad(String::new(), "Method not allowed".into());
    }
    let json_ct = headers
        .get("content-type")
        .is_some_and(|c| c.starts_with("application/json"));
    if !json_ct {
        return bad(
            String::new(),
            "Invalid Content-Type, expected application/json".into(),
        );
    }
    let parsed = match check_shape(&body) {
        Ok(p) => p,
        Err((field, description)) => return bad(field, description),
    };

    let scripted = {
        let mut script = s.script.lock().unwrap();
        let queued = script
            .once
            .get_mut(&parsed.token)
            .and_then(VecDeque::pop_front);
        queued.or_else(|| script.always.get(&parsed.token).cloned())
    };
    let scripted = scripted.unwrap_or(Scripted {
        reply: MockReply::Deliver,
        delay: Duration::ZERO,
    });
    if !scripted.delay.is_zero() {
        tokio::time::sleep(scripted.delay).await;
    }
    let id = s.next_id.fetch_add(1, Ordering::SeqCst);
    let name = format!(
        "projects/{}/messages/0:{}{:06}%{}",
        s.account.project_id,
        s.now_s(),
        id,
        &random_hex(8)
    );
    let (status, resp) = scripted_response(&scripted.reply, &name);
    s.messages.lock().unwrap().push(ReceivedMessage {
        token: parsed.token,
        data: parsed.data,
        priority: parsed.priority,
        ttl: parsed.ttl,
        body,
        headers,
        version,
        access_token: bearer,
        status,
    });
    if status == 200 {
        s.delivered.fetch_add(1, Ordering::SeqCst);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_and_token_formats() {
        for ok in [
            "3600s",
            "604800s",
            "0s",
            "1.5s",
            "2419200s",
            "10.000000001s",
        ] {
            assert!(valid_ttl(ok), "{ok}");
        }
        for bad in [
            "3600",
            "s",
            "-1s",
            "1.s",
            ".5s",
            "2419201s",
            "1e3s",
            "1.0000000001s",
            " 1s",
            "3600S",
        ] {
            assert!(!valid_ttl(bad), "{bad}");
        }
        assert!(valid_registration_token(&"a:b-c_".repeat(6)));
        assert!(!valid_registration_token("short"));
    }

    #[test]
    fn shape_is_strict() {
        let t = "t".repeat(40);
        let good = format!(
            r#"{{"message":{{"token":"{t}","data":{{"a":"b"}},"android":{{"priority":"high","ttl":"1s"}}}}}}"#
        );
        assert!(check_shape(good.as_bytes()).is_ok());
        let bad = [
            String::from("not json"),
            String::from("[]"),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"a":"b"}},"android":{{"priority":"high","ttl":"1s"}}}},"validate_only":true}}"#
            ),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"a":"b"}},"android":{{"priority":"high","ttl":"1s"}},"notification":{{}}}}}}"#
            ),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"a":1}},"android":{{"priority":"high","ttl":"1s"}}}}}}"#
            ),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"from":"x"}},"android":{{"priority":"high","ttl":"1s"}}}}}}"#
            ),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"a":"b"}},"android":{{"priority":"HIGH","ttl":"1s"}}}}}}"#
            ),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"a":"b"}},"android":{{"priority":"high","ttl":3600}}}}}}"#
            ),
            format!(
                r#"{{"message":{{"token":"{t}","data":{{"a":"b"}},"android":{{"priority":"high","ttl":"1s","collapse_key":"x"}}}}}}"#
            ),
            format!(r#"{{"message":{{"token":"{t}","data":{{"a":"b"}}}}}}"#),
            r#"{"message":{"token":"short","data":{},"android":{"priority":"high","ttl":"1s"}}}"#
                .to_string(),
            format!(
                r#"{{"message":{{"token":"{t}","data":["a"],"android":{{"priority":"high","ttl":"1s"}}}}}}"#
            ),
        ];
        for b in bad {
            assert!(check_shape(b.as_bytes()).is_err(), "{b}");
        }
    }

    #[test]
    fn form_decoding() {
        let f = parse_form("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b.c&x=1+2").unwrap();
        assert_eq!(
            f["grant_type"],
            "urn:ietf:params:oauth:grant-type:jwt-bearer"
        );
        assert_eq!(f["assertion"], "a.b.c");
        assert_eq!(f["x"], "1 2");
        assert!(parse_form("a=%zz").is_none());
        assert!(parse_form("a=%4").is_none());
    }

    #[test]
    fn google_error_shape() {
        let b = google_error_body(
            404,
            "NOT_FOUND",
            "Requested entity was not found.",
            Some("UNREGISTERED"),
            None,
        );
        assert_eq!(
            b,
            r#"{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}"#
        );
    }

    #[test]
    fn fixture_keys_are_distinct_rsa_keys() {
        let a = rsa_public_der(FIXTURE_RSA_PEM).unwrap();
        let b = rsa_public_der(FIXTURE_RSA_OTHER_PEM).unwrap();
        assert_ne!(a, b);
        assert!(a.len() > 256);
    }
}
