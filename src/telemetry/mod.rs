//! Logs and traces: JSON (or pretty) log lines with the replica's name, and OpenTelemetry
//! spans exported over OTLP/HTTP (plain or TLS, through [`otlp`]'s hyper client),
//! continuing an incoming W3C `traceparent`; while export is on, JSON lines carry the
//! `trace_id` and `span_id` of the span they were written in ([`logfmt`]). Initialized from
//! its own [`Settings`]; metrics live in [`crate::metrics`].

mod logfmt;
mod otlp;

use std::path::PathBuf;
use std::time::Duration;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable.
    Pretty,
}

/// Telemetry settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Log format.
    pub log_format: LogFormat,
    /// This replica's name in logs and traces.
    pub replica_name: String,
    /// Whether spans are exported: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL) is set. The exporter reads them, and the
    /// other standard `OTEL_*` variables, from the environment itself.
    pub export: bool,
    /// Extra trusted roots for a TLS collector (`OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub ca_file: Option<PathBuf>,
    /// Service name on exported traces.
    pub service_name: String,
    /// The deadline of one export request (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`), given to the exporter and to its HTTP client.
    pub export_timeout: Duration,
    /// Variables in the environment that look meant for the relay but that it does not
    /// read, logged once as warnings as soon as logging is up.
    pub unknown_vars: Vec<UnknownVar>,
}

/// A variable the relay does not read, found in its environment at start-up (a typo, most
/// often). Only its name is kept: its value may be a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVar {
    /// The variable's name.
    pub name: String,
    /// The known variable it is probably a typo of.
    pub did_you_mean: Option<&'static str>,
    /// The whole message: `unknown variable X; did you mean Y?`.
    pub message: String,
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
/// when an OTLP endpoint is set, an OpenTelemetry layer exporting spans over OTLP/HTTP. The
/// exporter and the SDK read the standard `OTEL_*` variables themselves (endpoints,
/// headers, sampler, span limits, resource attributes, batch settings; the configuration
/// has validated them); protocol and timeout are set from [`Settings`]. Incoming W3C
/// `traceparent` headers are continued. Then logs a warning per [`Settings::unknown_vars`].
/// Must be called inside the runtime.
pub fn init(cfg: &Settings) -> anyhow::Result<TelemetryGuard> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // RUST_LOG filters the log lines only; traces have their own filter below, so a quiet
    // log level does not switch tracing off.
    let fmt_layer = match cfg.log_format {
        // Trace ids exist only while spans are exported: without export, plain JSON lines.
        LogFormat::Json if !cfg.export => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(logfmt::WithTraceIds(
                tracing_subscriber::fmt::format()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false),
            ))
            .with_filter(filter)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer().with_filter(filter).boxed(),
    };
    let (otel_layer, provider) = match cfg.export {
        false => (None, None),
        true => {
            use opentelemetry::trace::TracerProvider as _;
            use opentelemetry_otlp::WithHttpConfig;
            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
            use opentelemetry_otlp::WithExportConfig;
            // Protocol and timeout as the configuration validated them: the exporter's own
            // reading of the environment would fall back silently on a value it ignores.
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_timeout(cfg.export_timeout)
                .with_http_client(otlp::HyperClient::new(
                    cfg.ca_file.as_deref(),
                    cfg.export_timeout,
                )?)
                .build()
                .map_err(|e| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
            let exporter = otlp::Counting::new(exporter);
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(cfg.service_name.clone())
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
    // The first lines logging can write: what the environment holds that is not read.
    for u in &cfg.unknown_vars {
        tracing::warn!(
            variable = %u.name,
            did_you_mean = u.did_you_mean,
            "{}",
            u.message
        );
    }
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
