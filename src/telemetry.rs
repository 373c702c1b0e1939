//! Logs and metrics: every metric name the relay exports is declared here, with its
//! labels, and every label value is drawn from a bounded set (never a token, a collapse id
//! or a raw path).

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::apns::client::Reply;
use crate::config::{Config, LogFormat};
use crate::policy::Environment;

/// Intake requests, by `outcome` (see [`crate::relay::Outcome::label`]) and `status`.
pub const INTAKE_REQUESTS: &str = "sealrelay_intake_requests_total";
/// Intake request duration, seconds, by `outcome`.
pub const INTAKE_DURATION: &str = "sealrelay_intake_duration_seconds";
/// Intake requests being processed.
pub const INFLIGHT: &str = "sealrelay_inflight_requests";
/// APNs requests by `environment`, `status` and `reason`.
pub const APNS_REQUESTS: &str = "sealrelay_apns_requests_total";
/// APNs request duration, seconds, by `environment`.
pub const APNS_DURATION: &str = "sealrelay_apns_duration_seconds";
/// Store operation duration, seconds, by `op` (admit, rollback, remember_env).
pub const STORE_DURATION: &str = "sealrelay_store_duration_seconds";
/// Store operation errors, by `op`.
pub const STORE_ERRORS: &str = "sealrelay_store_errors_total";
/// Provider tokens signed.
pub const TOKEN_REFRESHES: &str = "sealrelay_provider_token_refreshes_total";
/// 1 while the replica runs on its in-process store because Redis failed.
pub const DEGRADED: &str = "sealrelay_degraded";
/// Devices held by the in-process store.
pub const MEMORY_DEVICES: &str = "sealrelay_memory_store_devices";
/// Notifications waiting in the retry queue.
pub const RETRY_QUEUE_DEPTH: &str = "sealrelay_retry_queue_depth";
/// Retry-queue attempts by `result` (delivered, retry, failed, expired).
pub const RETRY_ATTEMPTS: &str = "sealrelay_retry_attempts_total";
/// Always 1, labelled with `version` and `git_sha`.
pub const BUILD_INFO: &str = "sealrelay_build_info";

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn metrics_handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("static buckets are valid");
            let handle = builder
                .install_recorder()
                .expect("no other metrics recorder is installed");
            describe();
            gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "git_sha" => option_env!("SEALRELAY_GIT_SHA").unwrap_or("unknown")).set(1.0);
            gauge!(DEGRADED).set(0.0);
            gauge!(INFLIGHT).set(0.0);
            gauge!(RETRY_QUEUE_DEPTH).set(0.0);
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        INTAKE_REQUESTS,
        "Intake requests by outcome and HTTP status."
    );
    describe_histogram!(
        INTAKE_DURATION,
        Unit::Seconds,
        "Intake request duration by outcome."
    );
    describe_gauge!(INFLIGHT, "Intake requests being processed.");
    describe_counter!(
        APNS_REQUESTS,
        "APNs requests by environment, HTTP status and reason."
    );
    describe_histogram!(
        APNS_DURATION,
        Unit::Seconds,
        "APNs request duration by environment."
    );
    describe_histogram!(
        STORE_DURATION,
        Unit::Seconds,
        "Policy store operation duration by operation."
    );
    describe_counter!(STORE_ERRORS, "Policy store operation errors by operation.");
    describe_counter!(TOKEN_REFRESHES, "APNs provider tokens signed.");
    describe_gauge!(
        DEGRADED,
        "1 while this replica runs on its in-process store because Redis failed."
    );
    describe_gauge!(
        MEMORY_DEVICES,
        "Devices held by the in-process policy store."
    );
    describe_gauge!(
        RETRY_QUEUE_DEPTH,
        "Notifications waiting in the retry queue."
    );
    describe_counter!(RETRY_ATTEMPTS, "Retry-queue attempts by result.");
    describe_gauge!(BUILD_INFO, "Build information; always 1.");
}

/// Records one finished intake request.
pub fn intake(outcome: &'static str, status: u16, elapsed: Duration) {
    counter!(INTAKE_REQUESTS, "outcome" => outcome, "status" => status_label(status)).increment(1);
    histogram!(INTAKE_DURATION, "outcome" => outcome).record(elapsed.as_secs_f64());
}

fn status_label(status: u16) -> &'static str {
    match status {
        0 => "0",
        200 => "200",
        202 => "202",
        400 => "400",
        404 => "404",
        405 => "405",
        408 => "408",
        410 => "410",
        413 => "413",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        s if s < 300 => "2xx",
        s if s < 500 => "4xx",
        _ => "5xx",
    }
}

/// Records one APNs exchange.
pub fn apns_request(env: Environment, reply: &Reply, elapsed: Duration) {
    counter!(APNS_REQUESTS, "environment" => env.as_str(), "status" => status_label(reply.status), "reason" => reply.verdict.reason_label()).increment(1);
    histogram!(APNS_DURATION, "environment" => env.as_str()).record(elapsed.as_secs_f64());
}

/// Records one store operation.
pub fn store_op(op: &'static str, elapsed: Duration, ok: bool) {
    histogram!(STORE_DURATION, "op" => op).record(elapsed.as_secs_f64());
    if !ok {
        counter!(STORE_ERRORS, "op" => op).increment(1);
    }
}

/// A provider token was signed.
pub fn provider_token_refreshed() {
    counter!(TOKEN_REFRESHES).increment(1);
}

/// Tracks in-flight intake requests for as long as the guard lives.
pub struct InflightGuard;

impl InflightGuard {
    /// Counts one request in.
    pub fn enter() -> Self {
        gauge!(INFLIGHT).increment(1.0);
        InflightGuard
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        gauge!(INFLIGHT).decrement(1.0);
    }
}

/// Keeps the trace exporter alive; dropping it flushes and stops it.
pub struct TelemetryGuard {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown_with_timeout(Duration::from_secs(5)) {
                eprintln!("sealrelay: flushing traces failed: {e}");
            }
        }
    }
}

/// Installs the log subscriber (JSON lines or pretty text, levels from `RUST_LOG`) and,
/// when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, an OpenTelemetry layer exporting spans over
/// OTLP/HTTP. The exporter reads the standard `OTEL_*` variables itself (endpoint,
/// headers, timeouts, batch settings); incoming W3C `traceparent` headers are continued.
pub fn init(cfg: &Config) -> anyhow::Result<TelemetryGuard> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // RUST_LOG filters the log lines only; traces have their own filter below, so a quiet
    // log level does not switch tracing off.
    let fmt_layer = match cfg.log_format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer().with_filter(filter).boxed(),
    };
    let (otel_layer, provider) = match &cfg.otlp_endpoint {
        None => (None, None),
        Some(_) => {
            use opentelemetry::trace::TracerProvider as _;
            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .map_err(|e| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(cfg.otel_service_name.clone())
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.instance.id",
                    cfg.replica_name.clone(),
                ))
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build();
            let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource)
                .build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("sealrelay"))
                .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                    m.is_span() && m.target().starts_with("sealrelay")
                }));
            (Some(layer), Some(provider))
        }
    };
    tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    Ok(TelemetryGuard { provider })
}

/// Continues the trace of an incoming request (W3C `traceparent`/`tracestate`) in `span`.
pub fn continue_trace(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    struct Extract<'a>(&'a axum::http::HeaderMap);
    impl opentelemetry::propagation::Extractor for Extract<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }
    if headers.contains_key("traceparent") {
        let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Extract(headers)));
        let _ = span.set_parent(cx);
    }
}
