//! The cronstable front-end, relay protocol v1: `POST /` takes one sealed envelope per
//! (alert, device), exactly as the hosted reference relay does (DESIGN.md's table), plus the
//! pages a daemon's pairing QR points at.
//!
//! - [`envelope`]: the body into an [`crate::delivery::Alert`], with the reference's texts;
//! - [`answer`]: how a request ended, in the reference's answers (the core's outcomes and
//!   the intake's own refusals);
//! - [`intake`]: the routes and the handler: in-flight limit, client-address bucket, body limits and
//!   timeouts, then the delivery core, and one log line and one metric per answer;
//! - [`clients`]: the per-client-address bucket (local, shared in Redis once busy);
//! - [`pages`]: `/pair`, `/privacy`, the apple-app-site-association file.
//!
//! It never redirects: daemons follow 307/308 and would re-post the ciphertext wherever
//! `Location` points.

pub(crate) mod answer;
pub(crate) mod clients;
pub mod envelope;
pub(crate) mod intake;
pub(crate) mod pages;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::delivery::Delivery;
use answer::Answer;

/// Where unsigned pushes are taken (`RELAY_V1_INTAKE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// `POST /` on the public listener (and the admin socket's deprecated push).
    Public,
    /// Only `POST /admin/v1/push` on the admin socket.
    Local,
    /// Nowhere.
    Off,
}

impl Intake {
    /// The 403 text of `POST /` on the public listener, when it refuses.
    pub fn public_refusal(self) -> Option<&'static str> {
        match self {
            Intake::Public => None,
            Intake::Local => Some("unsigned pushes are accepted only on the local admin socket"),
            Intake::Off => Some(OFF),
        }
    }

    /// The 403 text of the admin socket's unsigned push, when it refuses.
    pub fn local_refusal(self) -> Option<&'static str> {
        (self == Intake::Off).then_some(OFF)
    }
}

const OFF: &str = "unsigned pushes are not accepted";

/// The v1 front-end's settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Where unsigned pushes are taken.
    pub intake: Intake,
    /// `Sunset` of the deprecated unsigned push on the admin socket, verbatim.
    pub sunset: Option<String>,
    /// App ids of the apple-app-site-association file; `None` answers it 404.
    pub aasa_app_ids: Option<Vec<String>>,
    /// Ciphertext cap (`RELAY_MAX_CIPHERTEXT_CHARS`).
    pub max_ciphertext_chars: usize,
    /// Intake requests processed at once.
    pub max_inflight: usize,
    /// Time a client has to send its request headers.
    pub header_timeout: Duration,
    /// Time a client has to send its request body.
    pub body_timeout: Duration,
    /// Per-client-address bucket: capacity (0: off) and refill per second.
    pub client_rate: (u32, f64),
    /// Proxies whose X-Forwarded-For is honoured.
    pub trusted_proxies: Vec<clients::Cidr>,
}

/// The v1 front-end: its settings, the core it delivers through, and its admission state.
#[derive(Debug)]
pub(crate) struct V1 {
    settings: Settings,
    delivery: Arc<Delivery>,
    inflight: tokio::sync::Semaphore,
    clients: Option<clients::ClientLimiter>,
    replica: String,
}

impl V1 {
    /// The front-end over `delivery`; `replica` names this replica in log lines.
    pub(crate) fn new(settings: Settings, delivery: Arc<Delivery>, replica: String) -> Self {
        crate::metrics::max_inflight(settings.max_inflight);
        let inflight = tokio::sync::Semaphore::new(settings.max_inflight);
        let clients = (settings.client_rate.0 > 0)
            .then(|| clients::ClientLimiter::new(settings.client_rate.0, settings.client_rate.1));
        Self {
            settings,
            delivery,
            inflight,
            clients,
            replica,
        }
    }

    /// Forgets client buckets that are full again (called periodically).
    pub(crate) fn sweep(&self) {
        if let Some(l) = &self.clients {
            l.sweep(self.delivery.clock().now_ms());
        }
    }
}

/// Renders an answer: its status, JSON body and `Retry-After`.
pub(crate) fn respond(outcome: &Answer) -> Response {
    let mut resp = (outcome.status(), outcome.body().to_string()).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = outcome.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    if let Answer::MethodNotAllowed { allow } = outcome {
        h.insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    // The body was not read whole: the connection cannot carry another request.
    if matches!(outcome, Answer::Timeout | Answer::TooLarge) {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
