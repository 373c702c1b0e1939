//! The admin side of the relay.
//!
//! - The probes listener that Kubernetes probes and Prometheus scrapes ([`probes`]):
//!   `/healthz` (the process answers), `/readyz` (serving, and the store can answer; 503
//!   while starting, waiting for Redis, draining, or configured to serve nothing), `/metrics`
//!   (the Prometheus exposition).
//! - The admin API ([`api`]): signers, receipts, the deprecated unsigned push, on the Unix
//!   socket and opt-in loopback TCP ([`transport`]).

pub mod api;
pub mod transport;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::store::Store;

/// The admin API's transports.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The Unix socket; `None` when `RELAY_ADMIN_SOCKET` is empty.
    pub socket: Option<SocketSettings>,
    /// Loopback TCP, when `RELAY_ADMIN_API_LISTEN` is set.
    pub tcp: Option<TcpSettings>,
}

/// The Unix socket.
#[derive(Debug, Clone)]
pub struct SocketSettings {
    /// Where.
    pub path: std::path::PathBuf,
    /// Whether `RELAY_ADMIN_SOCKET` was set: then a socket that cannot be made stops
    /// start-up; the default path only warns (a laptop may have no `/run/sealrelay`).
    pub explicit: bool,
}

/// Loopback TCP.
#[derive(Debug, Clone)]
pub struct TcpSettings {
    /// A loopback address.
    pub addr: std::net::SocketAddr,
    /// The bearer token of `RELAY_ADMIN_TOKEN_FILE`.
    pub token: crate::secret::Secret,
}

/// Lifecycle of the process, as `/readyz` reports it.
#[derive(Debug, Default)]
pub struct Health {
    state: AtomicU8,
    /// Why this relay can serve nothing at all, whatever its state: a replica that would
    /// answer every request with an error stays out of the load balancer.
    unserved: Option<String>,
}

const STARTING: u8 = 0;
const SERVING: u8 = 1;
const DRAINING: u8 = 2;

impl Health {
    /// A relay starting; `unserved` says why it could serve nothing even once started.
    pub fn new(unserved: Option<String>) -> Self {
        Self {
            state: AtomicU8::new(STARTING),
            unserved,
        }
    }

    /// Whether this relay can serve anything (see [`Health::new`]).
    pub fn serves(&self) -> bool {
        self.unserved.is_none()
    }

    /// Whether the relay is serving (started, not draining) and can serve something.
    pub fn serving(&self) -> bool {
        self.state.load(Ordering::SeqCst) == SERVING && self.unserved.is_none()
    }

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
struct Probes {
    /// Every core's store (one unless `RELAY_RUNTIME=per-core`): the process is ready when
    /// each of them can serve.
    stores: Arc<[Arc<Store>]>,
    health: Arc<Health>,
    metrics: PrometheusHandle,
}

/// The probes router.
pub fn probes(stores: Vec<Arc<Store>>, health: Arc<Health>, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Probes {
            stores: stores.into(),
            health,
            metrics,
        })
}

async fn readyz(State(s): State<Probes>) -> Response {
    let label = s.health.label();
    let store_ready = s.stores.iter().all(|s| s.ready());
    let degraded = s.stores.iter().any(|s| s.degraded());
    if let (Some(why), "ready") = (&s.health.unserved, label) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response()
    } else if label == "ready" && store_ready && degraded {
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

async fn metrics_text(State(s): State<Probes>) -> Response {
    // The cores of one process share one in-process policy state: count each state once.
    let mut states: Vec<&crate::store::policy::MemoryStore> = Vec::new();
    for store in s.stores.iter() {
        let state = store.policy().in_process();
        if !states.iter().any(|&seen| std::ptr::eq(seen, state)) {
            states.push(state);
        }
    }
    crate::metrics::memory_devices(states.iter().map(|m| m.len()).sum());
    // Each core's store sets the gauge when it turns degraded or recovers; with several, the
    // last to change would win: the scrape says whether any is.
    if s.stores.len() > 1 {
        crate::metrics::degraded(s.stores.iter().any(|s| s.degraded()));
    }
    let mut resp = crate::metrics::render(&s.metrics).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
