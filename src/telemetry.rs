//! Logs and traces: JSON (or pretty) log lines with the replica's name, and OpenTelemetry
//! spans exported over OTLP/HTTP, continuing an incoming W3C `traceparent`. Initialized
//! from its own [`Settings`]; metrics live in [`crate::metrics`].

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
    /// OTLP/HTTP collector base URL; `None` disables trace export.
    pub otlp_endpoint: Option<String>,
    /// Service name on exported traces.
    pub service_name: String,
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
pub fn init(cfg: &Settings) -> anyhow::Result<TelemetryGuard> {
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
