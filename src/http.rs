//! HTTP: the public intake router and the admin router.
//!
//! The intake answers exactly as the hosted reference relay does (DESIGN.md's table):
//! `GET`/`HEAD /` name the service, `POST /` takes an envelope, any other path is a JSON
//! 404, any other method on `/` a JSON 405 with `Allow`. It never redirects: daemons follow
//! 307/308 and would re-post the ciphertext wherever `Location` points.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};
use tracing::Instrument;

use crate::envelope::{self, MAX_BODY_BYTES};
use crate::relay::{Outcome, Relay};

/// The banner `GET /` answers with.
pub fn banner() -> String {
    format!(
        "sealrelay {}: push relay for cronstable (relay protocol v1). It forwards sealed ciphertexts to APNs and never sees an alert's content.\nsource: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("CARGO_PKG_REPOSITORY")
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, text: &str) -> Response {
    json_response(status, &json!({"v": 1, "error": text}))
}

/// The public router: `/` only.
pub fn router(relay: Arc<Relay>) -> Router {
    Router::new()
        .route("/", get(root).post(intake).fallback(method_not_allowed))
        .fallback(not_found)
        .with_state(relay)
}

async fn root() -> Response {
    let mut resp = banner().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found")
}

async fn method_not_allowed() -> Response {
    let mut resp = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
    resp
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Unreadable,
    TimedOut,
}

async fn read_body(req: Request) -> Result<axum::body::Bytes, BodyError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    match to_bytes(req.into_body(), MAX_BODY_BYTES).await {
        Ok(b) => Ok(b),
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                BodyError::TooLarge
            } else {
                BodyError::Unreadable
            })
        }
    }
}

async fn intake(State(relay): State<Arc<Relay>>, req: Request) -> Response {
    let span = tracing::info_span!(
        "intake",
        otel.kind = "server",
        http.request.method = "POST",
        url.path = "/",
        replica = %relay.config().replica_name,
        outcome = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, req.headers());
    intake_inner(relay, req, span.clone())
        .instrument(span)
        .await
}

async fn intake_inner(relay: Arc<Relay>, req: Request, span: tracing::Span) -> Response {
    let started = Instant::now();
    let Some(_permit) = relay.admit_request() else {
        crate::telemetry::intake("overloaded", 503, started.elapsed());
        span.record("outcome", "overloaded");
        return respond(&Outcome::Overloaded);
    };
    let _inflight = crate::telemetry::InflightGuard::enter();
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(crate::clients::UNKNOWN, |c| c.0.ip());
    let forwarded_for = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok());
    if let Err(retry_after_s) = relay.check_client(peer, forwarded_for).await {
        let outcome = Outcome::ClientRateLimited { retry_after_s };
        crate::telemetry::intake(outcome.label(), 429, started.elapsed());
        span.record("outcome", outcome.label());
        return respond(&outcome);
    }
    let body = match tokio::time::timeout(relay.config().body_timeout, read_body(req)).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::TimedOut),
    };
    let body = match body {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            crate::telemetry::intake("too_large", 413, started.elapsed());
            span.record("outcome", "too_large");
            tracing::info!(replica = %relay.config().replica_name, outcome = "too_large", status = 413, "intake");
            return error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
        }
        Err(BodyError::Unreadable) => {
            crate::telemetry::intake("unreadable", 400, started.elapsed());
            return error(StatusCode::BAD_REQUEST, "body could not be read");
        }
        Err(BodyError::TimedOut) => {
            crate::telemetry::intake("timeout", 408, started.elapsed());
            let mut resp = error(StatusCode::REQUEST_TIMEOUT, "body not received in time");
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return resp;
        }
    };
    let envelope = match envelope::parse(&body, relay.config().max_ciphertext_chars) {
        Ok(e) => e,
        Err(e) => {
            crate::telemetry::intake("invalid", 400, started.elapsed());
            tracing::info!(
                outcome = "invalid",
                status = 400,
                error = e.message(),
                "intake"
            );
            return error(StatusCode::BAD_REQUEST, e.message());
        }
    };
    let outcome = relay.handle(&envelope).await;
    let status = outcome.status();
    crate::telemetry::intake(outcome.label(), status.as_u16(), started.elapsed());
    span.record("outcome", outcome.label());
    span.record("http.response.status_code", status.as_u16());
    tracing::info!(
        replica = %relay.config().replica_name,
        outcome = outcome.label(),
        status = status.as_u16(),
        device = %envelope.device.hash8(),
        collapse = envelope.collapse_id.prefix8(),
        priority = envelope.priority.as_str(),
        event = envelope.event,
        latency_ms = Relay::elapsed_ms(started),
        "intake"
    );
    respond(&outcome)
}

/// Renders an outcome.
pub fn respond(outcome: &Outcome) -> Response {
    let mut resp = json_response(outcome.status(), &outcome.body());
    if let Some(s) = outcome.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

/// Lifecycle of the process, as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Health {
    state: AtomicU8,
}

const STARTING: u8 = 0;
const SERVING: u8 = 1;
const DRAINING: u8 = 2;

impl Health {
    /// Marks the relay as serving.
    pub fn set_serving(&self) {
        self.state.store(SERVING, Ordering::SeqCst);
    }

    /// Marks the relay as draining: `/readyz` turns 503 at once.
    pub fn set_draining(&self) {
        self.state.store(DRAINING, Ordering::SeqCst);
    }

    fn label(&self) -> &'static str {
        match self.state.load(Ordering::SeqCst) {
            STARTING => "starting",
            SERVING => "ready",
            _ => "draining",
        }
    }
}

#[derive(Clone)]
struct AdminState {
    relay: Arc<Relay>,
    health: Arc<Health>,
    metrics: PrometheusHandle,
}

/// The admin router: `/healthz`, `/readyz`, `/metrics`.
pub fn admin_router(relay: Arc<Relay>, health: Arc<Health>, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState {
            relay,
            health,
            metrics,
        })
}

async fn readyz(State(s): State<AdminState>) -> Response {
    let label = s.health.label();
    let store_ready = s.relay.store().ready();
    if label == "ready" && store_ready && s.relay.store().degraded() {
        // Still serving: pulling every replica out of the load balancer would turn a Redis
        // outage into a relay outage.
        (
            StatusCode::OK,
            "ready (degraded: Redis unavailable, deciding in process)\n",
        )
            .into_response()
    } else if label == "ready" && store_ready {
        (StatusCode::OK, "ready\n").into_response()
    } else if label == "ready" {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the policy store\n",
        )
            .into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{label}\n")).into_response()
    }
}

async fn metrics_text(State(s): State<AdminState>) -> Response {
    metrics::gauge!(crate::telemetry::MEMORY_DEVICES)
        .set(s.relay.store().in_process().len() as f64);
    let mut resp = s.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
