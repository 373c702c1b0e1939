//! Listeners, drain and the runtime's threads: `RELAY_LISTEN`, `RELAY_ADMIN_LISTEN`,
//! `RELAY_SHUTDOWN_*`, `RELAY_WORKER_THREADS`, `RELAY_RUNTIME`. These
//! belong to the wiring (`app`), which reads the configuration rather than owning a
//! settings type, so the section's type lives here.

use std::net::SocketAddr;
use std::time::Duration;

use super::reader::Reader;
use super::vars::*;

/// Listeners and drain.
#[derive(Debug, Clone)]
pub(crate) struct Listen {
    /// Public listener (`RELAY_LISTEN`).
    pub listen: SocketAddr,
    /// Admin listener: probes and metrics (`RELAY_ADMIN_LISTEN`).
    pub admin_listen: SocketAddr,
    /// After SIGTERM: serve this long with `/readyz` at 503.
    pub shutdown_delay: Duration,
    /// Then wait at most this long for in-flight requests.
    pub shutdown_grace: Duration,
    /// Threads of the async runtime (`RELAY_WORKER_THREADS`); `None`: one per core.
    pub worker_threads: Option<usize>,
    /// How the threads share the work (`RELAY_RUNTIME`).
    pub runtime: Runtime,
}

/// How the relay's threads share the work (`RELAY_RUNTIME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// One multi-threaded runtime: every thread serves every connection and task.
    Shared,
    /// One single-threaded runtime per thread, each a whole relay (its own store connections,
    /// APNs/FCM connections and tasks), taking connections on one port with `SO_REUSEPORT`.
    PerCore,
}

pub(super) fn read(r: &mut Reader<'_>) -> Listen {
    Listen {
        listen: r.addr(&RELAY_LISTEN),
        admin_listen: r.addr(&RELAY_ADMIN_LISTEN),
        shutdown_delay: Duration::from_secs(r.int(&RELAY_SHUTDOWN_DELAY_S)),
        shutdown_grace: Duration::from_secs(r.int(&RELAY_SHUTDOWN_GRACE_S)),
        worker_threads: r
            .set(&RELAY_WORKER_THREADS)
            .map(|_| r.int(&RELAY_WORKER_THREADS) as usize),
        runtime: r.choice(
            &RELAY_RUNTIME,
            &[Runtime::Shared, Runtime::PerCore],
            "shared or per-core",
        ),
    }
}
