//! The HTTP/2 client to APNs: rustls, pooled long-lived connections, provider-token auth.
//!
//! Connections are kept healthy for days of uptime: an HTTP/2 PING every
//! [`PING_INTERVAL`] while idle, and a connection whose PING goes unanswered for
//! [`PING_TIMEOUT`] is closed, so a stalled connection is replaced instead of silently
//! swallowing requests. After a GOAWAY the pool opens a fresh connection for the next
//! request. Every request has a deadline, connection set-up included, and a caller's
//! budget bounds the token-refresh retry as well.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tracing::Instrument;

use super::payload::{priority, push_type, render};
use super::reason::{classify, Reason};
use super::token::ProviderToken;
use crate::clock::Clock;
use crate::device::Environment;
use crate::push::frames::SmallFrames;
use crate::push::{BoxFuture, Notification, Push, Service, Verdict, VerdictClass};
use crate::secret::Secret;

/// The APNs module's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// JWT `iss`: the developer team id.
    pub team_id: String,
    /// JWT header `kid`.
    pub key_id: String,
    /// The PKCS#8 PEM of the ES256 signing key.
    pub key_pem: Secret,
    /// The default `apns-topic`.
    pub topic: String,
    /// Production endpoint base URL, without a trailing slash.
    pub production_url: String,
    /// Sandbox endpoint base URL, without a trailing slash.
    pub sandbox_url: String,
    /// Extra trusted roots (PEM file).
    pub ca_file: Option<PathBuf>,
    /// One request's timeout, connection set-up included.
    pub request_timeout: Duration,
}

/// The path of a device's notifications, before its token.
const DEVICE_PATH: &str = "/3/device/";

/// HTTP/2 PING interval on idle connections.
pub const PING_INTERVAL: Duration = Duration::from_secs(60);
/// A connection whose PING is not answered within this is closed.
pub const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The APNs client. Cheap to share: one per process.
pub struct ApnsClient {
    http: Client<HttpsConnector<HttpConnector>, SmallFrames>,
    token: ProviderToken,
    /// The default topic as a header value, made once (`None`: it cannot be one, and every
    /// request without a topic of its own is refused).
    topic: Option<hyper::header::HeaderValue>,
    production_url: String,
    sandbox_url: String,
    timeout: Duration,
    clock: Clock,
}

impl std::fmt::Debug for ApnsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApnsClient")
            .field("topic", &self.topic)
            .field("production_url", &self.production_url)
            .field("sandbox_url", &self.sandbox_url)
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct ErrorBody {
    reason: Option<Reason>,
}

impl ApnsClient {
    /// A client for these settings; the provider token's `iat` comes from `clock`.
    pub fn new(settings: &Settings, clock: Clock) -> anyhow::Result<Self> {
        let tls = crate::push::tls::client_config(settings.ca_file.as_deref(), "APNS_CA_FILE")?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(settings.request_timeout));
        http.set_keepalive(Some(Duration::from_secs(60)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .pool_idle_timeout(None)
            .timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        let token = ProviderToken::new(
            settings.key_pem.expose(),
            &settings.key_id,
            &settings.team_id,
        )
        .map_err(|e| anyhow::anyhow!("APNs auth key: {e}"))?;
        Ok(Self {
            http: client,
            token,
            topic: hyper::header::HeaderValue::from_str(&settings.topic).ok(),
            production_url: settings.production_url.clone(),
            sandbox_url: settings.sandbox_url.clone(),
            timeout: settings.request_timeout,
            clock,
        })
    }

    fn base(&self, env: Environment) -> &str {
        match env {
            Environment::Production => &self.production_url,
            Environment::Sandbox => &self.sandbox_url,
        }
    }

    async fn send_within(&self, env: Environment, m: &Notification, budget: Duration) -> Verdict {
        let deadline = Instant::now() + budget;
        let (reply, expired) = self.attempt(env, m, deadline).await;
        if let Some(jwt) = expired {
            if Instant::now() < deadline {
                self.token.invalidate(&jwt);
                return self.attempt(env, m, deadline).await.0;
            }
        }
        reply
    }

    /// The request for `m` to `env`, with the provider token `jwt`; `None` when a value
    /// cannot be carried in a header. The header names are the `http` crate's constants
    /// (nothing parsed per request) and the numbers are written without a `String`.
    fn request(
        &self,
        env: Environment,
        m: &Notification,
        jwt: &str,
    ) -> Option<Request<SmallFrames>> {
        use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
        const TOPIC: HeaderName = HeaderName::from_static("apns-topic");
        const PUSH_TYPE: HeaderName = HeaderName::from_static("apns-push-type");
        const PRIORITY: HeaderName = HeaderName::from_static("apns-priority");
        const EXPIRATION: HeaderName = HeaderName::from_static("apns-expiration");
        const ID: HeaderName = HeaderName::from_static("apns-id");
        const COLLAPSE_ID: HeaderName = HeaderName::from_static("apns-collapse-id");
        let (base, token) = (self.base(env), m.to.expose());
        let mut uri = String::with_capacity(base.len() + DEVICE_PATH.len() + token.len());
        uri.push_str(base);
        uri.push_str(DEVICE_PATH);
        uri.push_str(token);
        // In frames h2 copies into its buffer: the requests waiting on a connection share
        // one write (`push::frames`).
        let mut request = Request::new(SmallFrames::new(render(m)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = hyper::Uri::try_from(uri).ok()?;
        let h = request.headers_mut();
        h.reserve(8);
        // The provider token, sensitive (never indexed by HPACK). A JWT is base64url and dots,
        // so it always fits a header; were it not to, APNs answers 403 MissingProviderToken.
        if let Some(authorization) = crate::push::tls::authorization("bearer", jwt) {
            h.insert(AUTHORIZATION, authorization);
        }
        let topic = match m.topic.as_deref() {
            Some(t) => HeaderValue::from_str(t).ok()?,
            None => self.topic.clone()?,
        };
        h.insert(TOPIC, topic);
        h.insert(PUSH_TYPE, HeaderValue::from_static(push_type(m.kind)));
        h.insert(PRIORITY, HeaderValue::from(u16::from(priority(m.priority))));
        h.insert(EXPIRATION, HeaderValue::from(m.expiration_s));
        h.insert(ID, HeaderValue::from_str(&m.id).ok()?);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(c) = &m.collapse_key {
            h.insert(COLLAPSE_ID, HeaderValue::from_str(c).ok()?);
        }
        Some(request)
    }

    async fn attempt(
        &self,
        env: Environment,
        m: &Notification,
        deadline: Instant,
    ) -> (Verdict, Option<Arc<str>>) {
        let unreachable = Verdict::UNREACHABLE;
        let timeout = self
            .timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        if timeout.is_zero() {
            return (unreachable, None);
        }
        let jwt = self.token.get((self.clock.now_ms() / 1000).max(0) as u64);
        let Some(request) = self.request(env, m, &jwt) else {
            // A header the request cannot carry: this request cannot succeed.
            let refused = Verdict {
                class: VerdictClass::Rejected,
                status: 0,
                reason: Reason::Other.to_push(),
            };
            return (refused, None);
        };
        let started = Instant::now();
        let span = tracing::info_span!(
            "apns",
            otel.kind = "client",
            environment = env.as_str(),
            http.response.status_code = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let result = tokio::time::timeout(timeout, async {
            let resp = self.http.request(request).await?;
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), 16 * 1024)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Ok::<_, hyper_util::client::legacy::Error>((status, body))
        })
        .instrument(span.clone())
        .await;
        let mut expired = false;
        let reply = match result {
            Ok(Ok((status, body))) => {
                let reason = if status == 200 {
                    None
                } else {
                    serde_json::from_slice::<ErrorBody>(&body)
                        .ok()
                        .and_then(|b| b.reason)
                };
                expired = reason.is_some_and(Reason::expired_provider_token);
                classify(status, reason)
            }
            Ok(Err(e)) => {
                tracing::warn!(environment = env.as_str(), error = %e, "APNs request failed");
                unreachable
            }
            Err(_) => {
                tracing::warn!(
                    environment = env.as_str(),
                    timeout_ms = timeout.as_millis() as u64,
                    "APNs request timed out"
                );
                unreachable
            }
        };
        span.record("http.response.status_code", reply.status);
        span.record("reason", reply.reason_label());
        crate::metrics::apns_request(
            env.as_str(),
            reply.status,
            reply.reason_label(),
            started.elapsed(),
        );
        (reply, expired.then_some(jwt))
    }
}

impl Push for ApnsClient {
    fn service(&self) -> Service {
        Service::Apns
    }

    fn render(&self, n: &Notification) -> Bytes {
        render(n)
    }

    fn send<'a>(
        &'a self,
        env: Environment,
        n: &'a Notification,
        budget: Duration,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(self.send_within(env, n, budget))
    }

    fn request_timeout(&self) -> Duration {
        self.timeout
    }
}
