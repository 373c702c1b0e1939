//! The HTTP/2 client to APNs: rustls, pooled long-lived connections, provider-token auth.
//!
//! Connections are kept healthy for days of uptime: an HTTP/2 PING every
//! [`PING_INTERVAL`] while idle, and a connection whose PING goes unanswered for
//! [`PING_TIMEOUT`] is closed, so a stalled connection is replaced instead of silently
//! swallowing requests. After a GOAWAY the pool opens a fresh connection for the next
//! request. Every request has a timeout, connection set-up included.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tracing::Instrument;

use super::token::ProviderToken;
use super::{Notification, Verdict};
use crate::config::{ApnsCredentials, Config};
use crate::policy::Environment;

/// HTTP/2 PING interval on idle connections.
pub const PING_INTERVAL: Duration = Duration::from_secs(60);
/// A connection whose PING is not answered within this is closed.
pub const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Builds the rustls client configuration: Mozilla's roots (Apple's APNs chain is among
/// them) plus the PEM certificates of `ca_file`. The connector sets ALPN.
pub fn tls_config(ca_file: Option<&std::path::Path>) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut n = 0;
        for cert in CertificateDer::pem_file_iter(path)
            .map_err(|e| anyhow::anyhow!("APNS_CA_FILE={}: {e}", path.display()))?
        {
            let cert = cert.map_err(|e| anyhow::anyhow!("APNS_CA_FILE={}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("APNS_CA_FILE={}: {e}", path.display()))?;
            n += 1;
        }
        anyhow::ensure!(
            n > 0,
            "APNS_CA_FILE={} holds no certificate",
            path.display()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// What one APNs exchange produced.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The classified answer.
    pub verdict: Verdict,
    /// HTTP status, 0 when unreachable.
    pub status: u16,
}

/// The APNs client. Cheap to share: one per process.
pub struct ApnsClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    token: ProviderToken,
    topic: String,
    production_url: String,
    sandbox_url: String,
    timeout: Duration,
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
    reason: Option<String>,
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl ApnsClient {
    /// A client for these credentials and endpoints.
    pub fn new(cfg: &Config, creds: &ApnsCredentials) -> anyhow::Result<Self> {
        let tls = tls_config(cfg.ca_file.as_deref())?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.apns_timeout));
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
        let token = ProviderToken::new(creds.key_pem.expose(), &creds.key_id, &creds.team_id)
            .map_err(|e| anyhow::anyhow!("APNs auth key: {e}"))?;
        Ok(Self {
            http: client,
            token,
            topic: creds.topic.clone(),
            production_url: cfg.production_url.clone(),
            sandbox_url: cfg.sandbox_url.clone(),
            timeout: cfg.apns_timeout,
        })
    }

    fn base(&self, env: Environment) -> &str {
        match env {
            Environment::Production => &self.production_url,
            Environment::Sandbox => &self.sandbox_url,
        }
    }

    /// Sends one notification to one environment. An `ExpiredProviderToken` answer
    /// refreshes the provider token and retries once.
    pub async fn send(&self, env: Environment, n: &Notification) -> Reply {
        let reply = self.attempt(env, n).await;
        if let (Verdict::CredentialsRejected { reason }, Some(jwt)) = (&reply.0.verdict, &reply.1) {
            if reason == "ExpiredProviderToken" {
                self.token.invalidate(jwt);
                return self.attempt(env, n).await.0;
            }
        }
        reply.0
    }

    async fn attempt(&self, env: Environment, n: &Notification) -> (Reply, Option<Arc<str>>) {
        let jwt = self.token.get(now_s());
        let uri = format!("{}/3/device/{}", self.base(env), n.device.expose());
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header("authorization", format!("bearer {jwt}"))
            .header("apns-topic", &self.topic)
            .header("apns-push-type", "alert")
            .header(
                "apns-priority",
                match n.priority {
                    crate::envelope::Priority::TimeSensitive => "10",
                    crate::envelope::Priority::Passive => "5",
                },
            )
            .header("apns-collapse-id", &n.collapse_id)
            .header("apns-expiration", n.expiration_s.to_string())
            .header("apns-id", &n.apns_id)
            .header("content-type", "application/json")
            .body(Full::new(n.body.clone()));
        let request = match request {
            Ok(r) => r,
            Err(_) => {
                return (
                    Reply {
                        verdict: Verdict::Refused {
                            status: 0,
                            reason: "invalid request".into(),
                        },
                        status: 0,
                    },
                    None,
                )
            }
        };
        let started = Instant::now();
        let span = tracing::info_span!(
            "apns",
            otel.kind = "client",
            environment = env.as_str(),
            http.response.status_code = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let result = tokio::time::timeout(self.timeout, async {
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
        let reply = match result {
            Ok(Ok((status, body))) => {
                let reason = if status == 200 {
                    None
                } else {
                    serde_json::from_slice::<ErrorBody>(&body)
                        .ok()
                        .and_then(|b| b.reason)
                };
                Reply {
                    verdict: Verdict::classify(status, reason.as_deref()),
                    status,
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(environment = env.as_str(), error = %e, "APNs request failed");
                Reply {
                    verdict: Verdict::Unreachable,
                    status: 0,
                }
            }
            Err(_) => {
                tracing::warn!(
                    environment = env.as_str(),
                    timeout_ms = self.timeout.as_millis() as u64,
                    "APNs request timed out"
                );
                Reply {
                    verdict: Verdict::Unreachable,
                    status: 0,
                }
            }
        };
        span.record("http.response.status_code", reply.status);
        span.record("reason", reply.verdict.reason_label());
        crate::telemetry::apns_request(env, &reply, started.elapsed());
        (reply, Some(jwt))
    }
}
