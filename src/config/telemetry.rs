//! Logs and traces: `RELAY_LOG_FORMAT`, `RELAY_REPLICA_NAME`, and the `OTEL_*` variables
//! the exporter and the SDK read from the environment themselves: validated here, so a
//! typo stops start-up instead of being ignored.

use std::time::Duration;

use super::reader::Reader;
use super::vars::*;
use crate::telemetry::{LogFormat, Settings};

pub(super) fn read(r: &mut Reader<'_>) -> Settings {
    let log_format = r.choice(
        &RELAY_LOG_FORMAT,
        &[LogFormat::Json, LogFormat::Pretty],
        "json or pretty",
    );
    let replica_name = r
        .set(&RELAY_REPLICA_NAME)
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "sealrelay".to_owned());
    if replica_name.len() > text_bounds(&RELAY_REPLICA_NAME).1
        || replica_name.contains(char::is_whitespace)
    {
        r.fail(
            &RELAY_REPLICA_NAME,
            &replica_name,
            "a host-name-like string without spaces",
        );
    }
    let mut export = false;
    for var in [
        &OTEL_EXPORTER_OTLP_ENDPOINT,
        &OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    ] {
        if let Some(e) = r.set(var) {
            export = true;
            let ok = ["http://", "https://"].iter().any(|p| {
                e.strip_prefix(p)
                    .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
            });
            if super::reader::has_userinfo(&e) {
                // The value holds a credential: the message never repeats it.
                r.problem(format!(
                    "{} carries credentials in the URL (user:password@): give the collector's URL without them and put the credential in OTEL_EXPORTER_OTLP_HEADERS (a Secret), e.g. authorization=Basic ...",
                    var.name
                ));
            } else if !ok {
                r.fail(
                    var,
                    &e,
                    "an http:// or https:// URL of an OTLP/HTTP collector",
                );
            }
        }
    }
    for var in [
        &OTEL_EXPORTER_OTLP_HEADERS,
        &OTEL_EXPORTER_OTLP_TRACES_HEADERS,
    ] {
        // The value may hold an API key: the message never repeats it.
        if let Some(h) = r.set(var) {
            if !key_values(&h) {
                r.problem(format!(
                    "{} is not valid: use comma-separated key=value pairs, e.g. api-key=...,x-tenant=relay",
                    var.name
                ));
            }
        }
    }
    let timeout_ms = r.int(&OTEL_EXPORTER_OTLP_TIMEOUT);
    // The traces-only variants win over the shared ones, as the exporter reads them.
    let export_timeout = Duration::from_millis(match r.set(&OTEL_EXPORTER_OTLP_TRACES_TIMEOUT) {
        Some(_) => r.int(&OTEL_EXPORTER_OTLP_TRACES_TIMEOUT),
        None => timeout_ms,
    });
    r.choice(
        &OTEL_EXPORTER_OTLP_PROTOCOL,
        &[()],
        "http/protobuf (the only protocol this build speaks)",
    );
    if r.set(&OTEL_EXPORTER_OTLP_TRACES_PROTOCOL).is_some() {
        r.choice(
            &OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
            &[()],
            "http/protobuf (the only protocol this build speaks)",
        );
    }
    // Without the exporter's gzip and zstd features, it would send uncompressed and say so
    // only in the SDK's internal log.
    for var in [
        &OTEL_EXPORTER_OTLP_COMPRESSION,
        &OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
    ] {
        if r.set(var).is_some() {
            r.choice(
                var,
                &[()],
                "none (this build does not compress exports: gzip and zstd are not compiled in)",
            );
        }
    }
    let ca_file = r.ca_file(&OTEL_EXPORTER_OTLP_CERTIFICATE);
    if let Some(a) = r.set(&OTEL_RESOURCE_ATTRIBUTES) {
        if !key_values(&a) || a.chars().count() > 4096 {
            r.fail(
                &OTEL_RESOURCE_ATTRIBUTES,
                &a,
                "comma-separated key=value pairs such as k8s.namespace.name=relay",
            );
        }
    }
    r.choice(
        &OTEL_TRACES_SAMPLER,
        &[(), (), (), (), (), ()],
        "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
    );
    if r.set(&OTEL_TRACES_SAMPLER_ARG).is_some() {
        r.float(&OTEL_TRACES_SAMPLER_ARG);
    }
    r.int(&OTEL_BSP_SCHEDULE_DELAY);
    let queue = r.int(&OTEL_BSP_MAX_QUEUE_SIZE);
    let batch = r.int(&OTEL_BSP_MAX_EXPORT_BATCH_SIZE);
    if batch > queue {
        r.problem(format!(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch} is not valid: it must be at most OTEL_BSP_MAX_QUEUE_SIZE ({queue})"
        ));
    }
    for var in [
        &OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT,
        &OTEL_SPAN_EVENT_COUNT_LIMIT,
        &OTEL_SPAN_LINK_COUNT_LIMIT,
    ] {
        r.int(var);
    }
    let service_name = r.value(&OTEL_SERVICE_NAME).unwrap_or_default();
    Settings {
        log_format,
        replica_name,
        export,
        ca_file,
        service_name,
        export_timeout,
        unknown_vars: Vec::new(),
    }
}

/// `key=value,key=value` with non-empty keys.
fn key_values(s: &str) -> bool {
    s.split(',').all(|kv| {
        kv.split_once('=')
            .is_some_and(|(k, _)| !k.trim().is_empty())
    })
}
