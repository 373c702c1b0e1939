//! JSON log lines that join their trace: when the event happens inside a span that
//! OpenTelemetry knows (trace export is on), the line carries `trace_id` and `span_id`, so a
//! log line leads to its trace and back.

use std::fmt::Write as _;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Wraps a JSON formatter and appends the current span's trace and span ids.
pub(crate) struct WithTraceIds<F>(pub(crate) F);

/// Appends `"trace_id":…,"span_id":…` before the closing brace of one JSON line.
pub(crate) fn add_ids(line: &mut String, trace_id: &str, span_id: &str) {
    if let Some(end) = line.rfind('}') {
        let mut ids = String::new();
        let _ = write!(
            ids,
            ",\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\""
        );
        line.insert_str(end, &ids);
    }
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        if ctx.lookup_current().is_some() {
            let cx = tracing::Span::current().context();
            let span = cx.span();
            let sc = span.span_context();
            if sc.is_valid() {
                add_ids(
                    &mut line,
                    &sc.trace_id().to_string(),
                    &sc.span_id().to_string(),
                );
            }
        }
        writer.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_go_inside_the_object() {
        let mut line = "{\"message\":\"intake\",\"status\":202}\n".to_owned();
        super::add_ids(
            &mut line,
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "00f067aa0ba902b7",
        );
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(v["span_id"], "00f067aa0ba902b7");
        assert!(line.ends_with("}\n"));
    }
}
