//! Trace export over OTLP/HTTP on the relay's own HTTP stack: hyper with rustls (the one TLS
//! stack and crypto provider of the binary), so `https://` collectors work and no second
//! HTTP client is compiled in; and an exporter wrapper that counts and logs failures instead
//! of letting them pass silently.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// A collector's answer is read up to this size.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;
/// Export failures are logged at most this often.
const LOG_EVERY_MS: i64 = 60_000;

/// An HTTP client for the OTLP exporter. The SDK exports from its own thread; each request
/// runs as a task on the relay's tokio runtime, whose handle the client keeps.
#[derive(Debug, Clone)]
pub(crate) struct HyperClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    /// The longest one export request may take (`OTEL_EXPORTER_OTLP_TIMEOUT`).
    timeout: Duration,
}

impl HyperClient {
    /// A client trusting Mozilla's roots plus the PEM certificates of `ca_file`
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`), giving up on a request after `timeout`; must be
    /// called inside the runtime.
    pub(crate) fn new(
        ca_file: Option<&std::path::Path>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            timeout,
            http: crate::push::tls::http_client(ca_file, "OTEL_EXPORTER_OTLP_CERTIFICATE")?,
            runtime: tokio::runtime::Handle::try_current()
                .map_err(|e| anyhow::anyhow!("trace export needs the runtime: {e}"))?,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for HyperClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let request = request.map(Full::new);
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            let resp = tokio::time::timeout(timeout, http.request(request))
                .await
                .map_err(|_| HttpError::from("the collector did not answer in time"))??;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| HttpError::from(format!("reading the collector's answer: {e}")))?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        });
        task.await.map_err(HttpError::from)?
    }
}

/// Wraps the OTLP exporter: a failed export is counted
/// (`sealrelay_trace_export_errors_total`) and logged, at most once a minute with the number
/// of failures since the last line.
#[derive(Debug)]
pub(crate) struct Counting<E> {
    inner: E,
    failures: AtomicU64,
    last_log_ms: AtomicI64,
}

impl<E> Counting<E> {
    pub(crate) fn new(inner: E) -> Self {
        Self {
            inner,
            failures: AtomicU64::new(0),
            last_log_ms: AtomicI64::new(i64::MIN / 2),
        }
    }

    fn failed(&self, error: &dyn std::fmt::Display) {
        crate::metrics::trace_export_error();
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let now = crate::clock::Clock::System.now_ms();
        let last = self.last_log_ms.load(Ordering::Relaxed);
        if now - last >= LOG_EVERY_MS
            && self
                .last_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.failures.store(0, Ordering::Relaxed);
            tracing::warn!(error = %error, failures = n, "exporting traces failed (logged at most once a minute; counted in sealrelay_trace_export_errors_total)");
        }
    }
}

impl<E: SpanExporter> SpanExporter for Counting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let r = self.inner.export(batch).await;
        if let Err(e) = &r {
            self.failed(e);
        }
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}
