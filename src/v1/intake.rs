//! The v1 routes (`/`, the banner, the hosted pages, the public listener's one 404) and
//! `POST /`: one envelope in, one answer out, in this order: the in-flight limit
//! (`RELAY_MAX_INFLIGHT`, else 503), the client-address bucket (else 429), the body within
//! its size and time limits (else 413 or 408), the envelope's rules (else 400), then the
//! delivery core. Every answer, refusals included, writes one log line and one metric
//! ([`finish`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tracing::Instrument;

use super::answer::{respond, Answer};
use super::envelope::{self, Alert, MAX_BODY_BYTES};
use super::front::V1;
use crate::admission::Refused;
use crate::body::{self, BodyError};

/// Any method but GET, HEAD and POST on `/`.
pub(crate) async fn method_not_allowed(State(v1): State<Arc<V1>>) -> Response {
    let outcome = Answer::MethodNotAllowed {
        allow: "GET, HEAD, POST",
    };
    finish(&outcome, Instant::now(), None, Some(&v1.replica))
}

pub(crate) async fn intake(State(v1): State<Arc<V1>>, req: Request) -> Response {
    let span = tracing::info_span!(
        "intake",
        otel.kind = "server",
        http.request.method = "POST",
        url.path = "/",
        replica = %v1.replica,
        outcome = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, req.headers());
    let started = Instant::now();
    let (outcome, alert) = match v1.settings.intake.public_refusal() {
        Some(text) => (Answer::IntakeDisabled { text }, None),
        None => match handle(&v1, req, true).instrument(span.clone()).await {
            Handled::Decided(outcome, alert) => (outcome, alert),
            // Decided in the device's home region: its answer, as it came.
            Handled::Relayed(resp) => return resp,
        },
    };
    span.record("outcome", outcome.label());
    span.record("http.response.status_code", outcome.status().as_u16());
    let _entered = span.enter();
    finish(&outcome, started, alert.as_ref(), Some(&v1.replica))
}

/// What became of a request: decided here, or relayed from the device's home region.
enum Handled {
    Decided(Answer, Option<Alert>),
    Relayed(Response),
}

/// The deprecated unsigned push of the admin socket (`POST /admin/v1/push`): the v1 answer
/// to a v1 envelope, with `Deprecation: true` and `Sunset` when `RELAY_V1_SUNSET` is set.
/// The peer is the relay's own user, so no client-address bucket applies; `RELAY_V1_INTAKE
/// =off` refuses it with 403.
pub(crate) async fn local(v1: &V1, req: Request) -> Response {
    let span = tracing::info_span!(
        "intake",
        otel.kind = "server",
        http.request.method = "POST",
        url.path = "/admin/v1/push",
        replica = %v1.replica,
        outcome = tracing::field::Empty,
    );
    let started = Instant::now();
    let (outcome, alert) = match v1.settings.intake.local_refusal() {
        Some(text) => (Answer::IntakeDisabled { text }, None),
        None => match handle(v1, req, false).instrument(span.clone()).await {
            Handled::Decided(outcome, alert) => (outcome, alert),
            Handled::Relayed(resp) => return resp,
        },
    };
    span.record("outcome", outcome.label());
    let _entered = span.enter();
    let mut resp = finish(&outcome, started, alert.as_ref(), Some(&v1.replica));
    let h = resp.headers_mut();
    h.insert("deprecation", axum::http::HeaderValue::from_static("true"));
    if let Some(sunset) = &v1.settings.sunset {
        if let Ok(v) = axum::http::HeaderValue::from_str(sunset) {
            h.insert("sunset", v);
        }
    }
    resp
}

async fn handle(v1: &V1, req: Request, public: bool) -> Handled {
    let decided = |a: Answer| Handled::Decided(a, None);
    let Ok(_admitted) = v1.admission.enter() else {
        return decided(Answer::Overloaded);
    };
    let (parts, body) = req.into_parts();
    if public {
        let now_ms = v1.delivery.clock().now_ms();
        if let Err(Refused::RateLimited { retry_after_s }) =
            v1.admission.take(&parts, v1.delivery.store(), now_ms).await
        {
            return decided(Answer::ClientRateLimited { retry_after_s });
        }
    }
    // Only with regions: what a hop needs of the request, kept before the body is read.
    let held = v1
        .regions
        .as_ref()
        .and_then(|r| r.hold(&parts, || v1.admission.source(&parts)));
    let req = Request::from_parts(parts, body);
    let body = match body::read(req, MAX_BODY_BYTES, v1.settings.body_timeout).await {
        Err(BodyError::TimedOut) => return decided(Answer::Timeout),
        Err(BodyError::TooLarge) => return decided(Answer::TooLarge),
        Err(BodyError::Unreadable) => return decided(Answer::Unreadable),
        Ok(b) => b,
    };
    let alert = match envelope::parse(&body, v1.settings.max_ciphertext_chars) {
        Ok(a) => a,
        Err(e) => return decided(Answer::Invalid(e.message().to_owned())),
    };
    // Several regions: a device is decided in its home region (a hop is decided where it
    // lands). With the home down or the hop failed, here: a page must go out.
    if let (Some(regions), Some(held)) = (&v1.regions, held) {
        let key = envelope::device_text(&body).unwrap_or_default();
        match regions.route(key.as_bytes()) {
            crate::region::Route::Here => {}
            crate::region::Route::Peer(peer) => {
                let out = held.with_body(body.clone());
                match regions.forward(peer, "v1", out).await {
                    Ok(resp) => return Handled::Relayed(resp),
                    Err(crate::region::HopFailure::Failed(why)) => {
                        tracing::warn!(peer = %peer.name, why, device = %alert.device.hash8(), "hop to the home region failed; deciding here");
                        crate::metrics::region_fallback(&peer.name);
                    }
                }
            }
            crate::region::Route::Down(peer) => {
                crate::metrics::region_hop(&peer.name, "v1", "skipped_down", Duration::ZERO);
                crate::metrics::region_fallback(&peer.name);
            }
        }
    }
    let outcome = v1.delivery.handle(&alert).await;
    Handled::Decided(Answer::Delivered(outcome), Some(alert))
}

/// Writes the answer's one log line and metric, and renders it.
pub(crate) fn finish(
    outcome: &Answer,
    started: Instant,
    alert: Option<&Alert>,
    replica: Option<&str>,
) -> Response {
    let status = outcome.status().as_u16();
    crate::metrics::intake(outcome.label(), status, started.elapsed());
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let replica = replica.unwrap_or("");
    match (alert, outcome) {
        (Some(a), _) => tracing::info!(
            replica,
            outcome = outcome.label(),
            status,
            device = %a.device.hash8(),
            collapse = a.collapse_id.prefix8(),
            priority = a.priority.as_str(),
            event = a.event,
            latency_ms,
            "intake"
        ),
        (None, Answer::Invalid(text)) => tracing::info!(
            replica,
            outcome = outcome.label(),
            status,
            error = text.as_str(),
            latency_ms,
            "intake"
        ),
        (None, _) => tracing::info!(
            replica,
            outcome = outcome.label(),
            status,
            latency_ms,
            "intake"
        ),
    }
    respond(outcome)
}

/// The banner `GET /` answers with.
pub fn banner() -> String {
    format!(
        "sealrelay {}: push relay for cronstable (relay protocol v1). It forwards sealed ciphertexts to APNs and never sees an alert's content.\nsource: {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("CARGO_PKG_REPOSITORY")
    )
}

/// The v1 routes: `/`, and the hosted pages. The public listener's fallback (the one 404)
/// is [`not_found`].
pub(crate) fn routes(v1: Arc<V1>, aasa_app_ids: Option<Vec<String>>) -> Router {
    Router::new()
        .route("/", get(root).post(intake).fallback(method_not_allowed))
        .with_state(v1.clone())
        .merge(super::pages::routes(aasa_app_ids))
}

async fn root() -> Response {
    let mut resp = banner().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// The public listener's one 404, `{"v":1,"error":"not found"}`, logged and counted.
pub(crate) fn not_found(replica: &str) -> Response {
    finish(
        &Answer::NotFound,
        std::time::Instant::now(),
        None,
        Some(replica),
    )
}
