//! Logs and traces: `RELAY_LOG_FORMAT`, `RELAY_REPLICA_NAME`, `OTEL_*`.

use super::Reader;
use crate::telemetry::{LogFormat, Settings};

pub(super) fn read(r: &mut Reader<'_>) -> Settings {
    let log_format = r.choice(
        "RELAY_LOG_FORMAT",
        &[("json", LogFormat::Json), ("pretty", LogFormat::Pretty)],
        "json or pretty",
    );
    let replica_name = r
        .set("RELAY_REPLICA_NAME")
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "sealrelay".to_owned());
    if replica_name.len() > 253 || replica_name.contains(char::is_whitespace) {
        r.fail(
            "RELAY_REPLICA_NAME",
            &replica_name,
            "a host-name-like string without spaces",
        );
    }
    let otlp_endpoint = r.set("OTEL_EXPORTER_OTLP_ENDPOINT");
    if let Some(e) = &otlp_endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            r.fail(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                e,
                "an http:// or https:// URL of an OTLP/HTTP collector",
            );
        }
    }
    let service_name = r.value("OTEL_SERVICE_NAME").unwrap_or_default();
    Settings {
        log_format,
        replica_name,
        otlp_endpoint,
        service_name,
    }
}
