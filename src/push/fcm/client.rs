//! The HTTPS client to FCM and to the service account's token endpoint.
//!
//! One hyper client serves both, with the relay's one TLS configuration
//! ([`crate::push::tls::client_config`]: rustls with ring, Mozilla's roots plus
//! `FCM_CA_FILE`). Unlike APNs, FCM is not HTTP/2-only: ALPN offers `h2` and `http/1.1`, so
//! Google (which takes h2) gets one multiplexed connection and an egress proxy that speaks
//! only HTTP/1.1 still works. An `http://` `FCM_URL` or `token_uri` is allowed for proxies
//! and tests.
//!
//! Every [`FcmClient::send`] is bounded by [`SEND_TIMEOUT`] as a whole: the token request
//! (or the wait for another sender's), the message, and the one retry after a 401.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;
use tracing::Instrument;

use super::auth::{check_url, AccessToken, Fetched, ServiceAccount, TokenCache};
use super::message::{self, Notify};
use super::outcome::{
    classify_send, classify_token_error, parse_google_error, sanitize_code, Failure, FcmOutcome,
    Reason, Stage,
};
use crate::clock::Clock;
use crate::device::Environment;
use crate::push::frames::SmallFrames;
use crate::push::{self, BoxFuture, Notification, Payload, Push, Service, Verdict};
use crate::secret::Secret;

/// The FCM module's settings. Present only when a service account is configured: that is
/// what loads the module.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The service account (`FCM_SERVICE_ACCOUNT_FILE` or `FCM_SERVICE_ACCOUNT`), already
    /// parsed and its key proven to sign. `Debug` redacts the key.
    pub account: ServiceAccount,
    /// `FCM_URL`: the HTTP v1 API's base URL, http or https, without a trailing slash
    /// (default [`DEFAULT_URL`]); tests and egress proxies stand in here.
    pub url: String,
    /// `FCM_CA_FILE`: extra trusted CA certificates (PEM) for FCM and the token endpoint.
    pub ca_file: Option<PathBuf>,
}

/// FCM's production base URL (`FCM_URL`'s default).
pub const DEFAULT_URL: &str = "https://fcm.googleapis.com";
/// The longest one [`FcmClient::send`] takes, everything included: connection set-up, the
/// access token when one is needed, the message, the retry after a 401. A push is best
/// effort and the envelope PUT does not wait for it, so this only bounds how long a slow
/// or silent Google (or proxy) can hold a task: ample for a cold connection, a token
/// request and a send, short enough that a stalled upstream never piles up work.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 PING interval on idle connections.
const PING_INTERVAL: Duration = Duration::from_secs(60);
/// A connection whose PING is not answered within this is closed.
const PING_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest answer body read.
const MAX_BODY: usize = 64 * 1024;
/// When the token endpoint gives no `expires_in`: Google's usual lifetime. A token that
/// dies sooner is caught by the 401 refresh.
const DEFAULT_EXPIRES_IN_S: u64 = 3600;
const USER_AGENT: &str = concat!("sealrelay/", env!("CARGO_PKG_VERSION"));

/// The FCM client: one per process, cheap to share behind an `Arc`. `Debug` shows the
/// project and the endpoints, never the key, an access token or a registration token.
pub struct FcmClient {
    http: Client<HttpsConnector<HttpConnector>, SmallFrames>,
    account: ServiceAccount,
    send_uri: hyper::Uri,
    token_uri: hyper::Uri,
    clock: Clock,
    tokens: TokenCache,
}

impl std::fmt::Debug for FcmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FcmClient")
            .field("project_id", &self.account.project_id())
            .field("send_uri", &self.send_uri)
            .field("token_uri", &self.token_uri)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    expires_in: Option<serde_json::Value>,
    token_type: Option<String>,
}

impl FcmClient {
    /// A client for these settings. Fails on an unusable `FCM_URL` or `FCM_CA_FILE` (the
    /// configuration has checked both already); makes no request.
    pub fn new(settings: &Settings) -> anyhow::Result<Self> {
        let base = settings.url.trim_end_matches('/');
        check_base_url(base).map_err(|reason| anyhow::anyhow!("FCM_URL={base:?}: {reason}"))?;
        let send_uri: hyper::Uri = format!(
            "{base}/v1/projects/{}/messages:send",
            settings.account.project_id()
        )
        .parse()
        .map_err(|_| anyhow::anyhow!("FCM_URL={base:?}: cannot form the messages:send URL"))?;
        let token_uri = check_url(settings.account.token_uri())
            .map_err(|reason| anyhow::anyhow!("the service account's token_uri: {reason}"))?;
        let tls = crate::push::tls::client_config(settings.ca_file.as_deref(), "FCM_CA_FILE")?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(SEND_TIMEOUT));
        http.set_keepalive(Some(Duration::from_secs(60)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Self {
            http: client,
            account: settings.account.clone(),
            send_uri,
            token_uri,
            clock: Clock::System,
            tokens: TokenCache::default(),
        })
    }

    /// The Firebase project messages go to.
    pub fn project_id(&self) -> &str {
        self.account.project_id()
    }

    /// Gets an access token now, within [`SEND_TIMEOUT`] (at start-up, to surface a bad key
    /// early): `Ok`, or the failure a send would have met.
    pub async fn check_credentials(&self) -> Result<(), FcmOutcome> {
        self.access_token(Instant::now() + SEND_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// Sends one data-only message to the device with registration token `token`, exactly
    /// the spec's JSON (see the `message` module), within [`SEND_TIMEOUT`]. Never panics and
    /// never fails in another way than the returned outcome. A 401 from FCM drops the
    /// cached access token and retries once with a new one (not for
    /// `THIRD_PARTY_AUTH_ERROR`, which a new token cannot fix).
    pub async fn send(&self, token: &str, tag: &str, notify: Notify) -> FcmOutcome {
        let started = Instant::now();
        let span = tracing::info_span!(
            "fcm",
            otel.kind = "client",
            notify = notify.as_str(),
            http.response.status_code = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let outcome = self
            .send_within(token, tag, &notify, started + SEND_TIMEOUT)
            .instrument(span.clone())
            .await;
        span.record("http.response.status_code", outcome.status());
        span.record("reason", outcome.label());
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let failure = outcome.failure();
        match &outcome {
            FcmOutcome::Delivered { .. } => tracing::debug!(
                project = self.project_id(),
                notify = notify.as_str(),
                elapsed_ms,
                "FCM message delivered"
            ),
            // A device that uninstalled the app: routine, not a warning.
            FcmOutcome::TokenDead(_) => tracing::info!(
                project = self.project_id(),
                notify = notify.as_str(),
                elapsed_ms,
                "FCM registration token is unregistered"
            ),
            other => tracing::warn!(
                project = self.project_id(),
                notify = notify.as_str(),
                class = other.class_str(),
                reason = other.label(),
                status = other.status(),
                stage = failure.map_or("", |f| f.stage.as_str()),
                retry_after_s = other.retry_after().map(|d| d.as_secs()),
                elapsed_ms,
                "FCM message not delivered"
            ),
        }
        outcome
    }

    async fn send_within(
        &self,
        token: &str,
        tag: &str,
        notify: &Notify,
        deadline: Instant,
    ) -> FcmOutcome {
        let body = match message::body(token, tag, notify) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "FCM message not built");
                return FcmOutcome::Rejected(Failure::new(Stage::Send, 0, Reason::InvalidInput));
            }
        };
        let mut attempt = 0;
        loop {
            let access = match self.access_token(deadline).await {
                Ok(t) => t,
                Err(o) => return o,
            };
            let o = self.post_message(&access, body.clone(), deadline).await;
            if attempt == 0 && o.status() == 401 && o.reason() == Reason::Auth {
                tracing::info!("FCM answered 401; refreshing the access token and retrying once");
                self.tokens.invalidate(&access);
                attempt += 1;
                continue;
            }
            return o;
        }
    }

    async fn access_token(&self, deadline: Instant) -> Result<Arc<AccessToken>, FcmOutcome> {
        self.tokens
            .get(&self.clock, deadline, || self.fetch_token(deadline))
            .await
    }

    /// One token request.
    async fn fetch_token(&self, deadline: Instant) -> Result<Fetched, FcmOutcome> {
        let fail =
            |status, reason| FcmOutcome::Misconfigured(Failure::new(Stage::Token, status, reason));
        let iat = (self.clock.now_ms() / 1000).max(0) as u64;
        let body = self
            .account
            .token_request_body(iat)
            .map_err(|_| fail(0, Reason::TokenRefused))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.token_uri.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .header("user-agent", USER_AGENT)
            .body(SmallFrames::new(Bytes::from(body.expose().to_owned())))
            .map_err(|_| fail(0, Reason::Other))?;
        drop(body);
        let (status, retry_after, answer) = self.exchange(request, Stage::Token, deadline).await?;
        if status != 200 {
            let outcome = classify_token_error(status, retry_after.as_deref(), self.clock.now_ms());
            // OAuth2's `error` is a short code (`invalid_grant`); the description is not
            // logged (it may echo what was sent).
            let code = serde_json::from_slice::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| {
                    v.get("error")
                        .and_then(|e| e.as_str())
                        .map(|e| sanitize_code(e, 64))
                });
            tracing::warn!(
                status,
                error = code.as_deref().unwrap_or(""),
                class = outcome.class_str(),
                reason = outcome.label(),
                "FCM token endpoint refused the token request"
            );
            return Err(outcome);
        }
        let bad = || {
            tracing::warn!("FCM token endpoint answered 200 without a usable access token");
            fail(200, Reason::TokenResponse)
        };
        let parsed: TokenAnswer = serde_json::from_slice(&answer).map_err(|_| bad())?;
        let value = parsed.access_token.ok_or_else(bad)?;
        if value.is_empty() || value.len() > 8192 || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad());
        }
        if parsed
            .token_type
            .as_deref()
            .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(bad());
        }
        let expires_in_s = match parsed.expires_in {
            None | Some(serde_json::Value::Null) => DEFAULT_EXPIRES_IN_S,
            Some(serde_json::Value::Number(n)) => n.as_u64().ok_or_else(bad)?,
            // Some servers send it as a string.
            Some(serde_json::Value::String(s)) => s.parse().map_err(|_| bad())?,
            Some(_) => return Err(bad()),
        };
        tracing::debug!(expires_in_s, "FCM access token obtained");
        crate::metrics::fcm_token_refreshed();
        Ok(Fetched {
            value: Secret::new(value),
            expires_in_s,
        })
    }

    async fn post_message(
        &self,
        access: &AccessToken,
        body: Bytes,
        deadline: Instant,
    ) -> FcmOutcome {
        let Some(authorization) = crate::push::tls::authorization("Bearer", access.expose()) else {
            // Only a token with bytes a header cannot carry gets here; fetch_token rules it out.
            return FcmOutcome::Misconfigured(Failure::new(Stage::Send, 0, Reason::TokenResponse));
        };
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.send_uri.clone())
            .header("authorization", authorization)
            .header("content-type", "application/json; charset=utf-8")
            .header("user-agent", USER_AGENT)
            .body(SmallFrames::new(body));
        let Ok(request) = request else {
            // A header the request cannot carry: this request cannot succeed.
            return FcmOutcome::Misconfigured(Failure::new(Stage::Send, 0, Reason::TokenResponse));
        };
        let (status, retry_after, answer) =
            match self.exchange(request, Stage::Send, deadline).await {
                Ok(x) => x,
                Err(o) => return o,
            };
        let outcome = classify_send(status, &answer, retry_after.as_deref(), self.clock.now_ms());
        if !matches!(outcome, FcmOutcome::Delivered { .. }) {
            let g = parse_google_error(&answer);
            tracing::debug!(
                status,
                google_status = g.status.as_deref().unwrap_or(""),
                error_code = g.error_code.as_deref().unwrap_or(""),
                "FCM error answer"
            );
        }
        outcome
    }

    /// One HTTP exchange, ending at `deadline` at the latest: status, `Retry-After`, body
    /// (at most 64 KiB).
    async fn exchange(
        &self,
        request: Request<SmallFrames>,
        stage: Stage,
        deadline: Instant,
    ) -> Result<(u16, Option<String>, Bytes), FcmOutcome> {
        let timed_out = || {
            tracing::warn!(
                stage = stage.as_str(),
                timeout_ms = SEND_TIMEOUT.as_millis() as u64,
                "FCM request timed out"
            );
            FcmOutcome::Retryable(Failure::new(stage, 0, Reason::Timeout))
        };
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        let result = tokio::time::timeout_at(deadline, async {
            let resp = self.http.request(request).await?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Ok::<_, hyper_util::client::legacy::Error>((status, retry_after, body))
        })
        .await;
        match result {
            Ok(Ok(x)) => Ok(x),
            Ok(Err(e)) => {
                let reason = if is_tls_certificate_error(&e) {
                    Reason::Tls
                } else {
                    Reason::Unreachable
                };
                tracing::warn!(
                    stage = stage.as_str(),
                    reason = reason.label(),
                    error = %ErrorChain(&e),
                    "FCM request failed"
                );
                let f = Failure::new(stage, 0, reason);
                Err(if reason == Reason::Tls {
                    FcmOutcome::Misconfigured(f)
                } else {
                    FcmOutcome::Retryable(f)
                })
            }
            Err(_) => Err(timed_out()),
        }
    }
}

/// The FCM message a notification asks for: a mailbox wake-up's tag and notify; `None` for
/// a payload FCM has no shape for (a sealed alert, a body rendered for another service).
fn wake(n: &Notification) -> Option<(&str, Notify)> {
    let Payload::Wake { tag, alert } = &n.payload else {
        return None;
    };
    let notify = match (n.kind, alert) {
        (push::Kind::Alert, Some(text)) => Notify::Alert(text.clone()),
        _ => Notify::Silent,
    };
    Some((tag, notify))
}

impl Push for FcmClient {
    fn service(&self) -> Service {
        Service::Fcm
    }

    fn render(&self, n: &Notification) -> Bytes {
        wake(n)
            .and_then(|(tag, notify)| message::body(n.to.expose(), tag, &notify).ok())
            .unwrap_or_default()
    }

    /// FCM has one endpoint: `env` is ignored; [`SEND_TIMEOUT`] bounds the send.
    fn send<'a>(
        &'a self,
        _env: Environment,
        n: &'a Notification,
        _budget: Duration,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let outcome = match wake(n) {
                Some((tag, notify)) => self.send(n.to.expose(), tag, notify).await,
                None => FcmOutcome::Rejected(Failure::new(Stage::Send, 0, Reason::InvalidInput)),
            };
            Verdict {
                class: outcome.class(),
                status: outcome.status(),
                reason: outcome.reason().to_push(),
            }
        })
    }

    fn request_timeout(&self) -> Duration {
        SEND_TIMEOUT
    }
}

/// Checks an `FCM_URL` (trailing slashes removed): an http(s) URL with a host, maybe a
/// path (a proxy's prefix), no query or fragment. The reason never quotes it.
pub(crate) fn check_base_url(url: &str) -> Result<hyper::Uri, &'static str> {
    if url.contains('#') {
        return Err("has a fragment");
    }
    let uri = check_url(url)?;
    if uri.query().is_some() {
        return Err("has a query");
    }
    Ok(uri)
}

/// Whether a client error was rustls refusing the server's certificate. The rustls error
/// sits under one or more `io::Error` wrappers, whose `source()` skips the wrapped error
/// itself, so those are opened with `get_ref`.
fn is_tls_certificate_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    for _ in 0..16 {
        let Some(err) = cur else {
            return false;
        };
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            );
        }
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    false
}

/// Displays an error with its sources (`a: b: c`). Transport errors carry no request
/// content (no header or body), so this is safe to log.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cur = self.0.source();
        let mut depth = 0;
        while let Some(e) = cur {
            write!(f, ": {e}")?;
            depth += 1;
            if depth > 8 {
                break;
            }
            cur = e.source();
        }
        Ok(())
    }
}
