//! Start-up: build the relay from a configuration, bind both listeners, serve until told
//! to stop, then drain.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::config::{Config, Delivery};
use crate::http::{admin_router, router, Health};
use crate::queue::{sealing_key, RedisQueue};
use crate::relay::Relay;
use crate::store::{redis::RedisStore, Store};

/// How often the in-process store forgets idle devices.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// How often the metrics recorder folds recorded histogram samples into its buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// A relay serving in this process.
pub struct Running {
    /// Where the public intake listens.
    pub addr: SocketAddr,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    /// The relay itself (for tests that look at its store).
    pub relay: Arc<Relay>,
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, finishes in-flight requests, and waits for both servers to end.
    pub async fn shutdown(self) {
        self.health.set_draining();
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Drains like a pod being terminated: `/readyz` turns 503 at once, new connections are
    /// still accepted for `delay` (so load balancers notice and stop sending), then the
    /// listeners close and in-flight requests get up to `grace` to finish. Returns whether
    /// everything finished in time.
    pub async fn drain(self, delay: Duration, grace: Duration) -> bool {
        self.health.set_draining();
        tracing::info!(
            delay_s = delay.as_secs(),
            grace_s = grace.as_secs(),
            "draining: /readyz is 503"
        );
        tokio::time::sleep(delay).await;
        let _ = self.stop.send(true);
        tracing::info!("listeners closed; finishing in-flight requests");
        match tokio::time::timeout(grace, self.task).await {
            Ok(_) => true,
            Err(_) => {
                tracing::warn!("shutdown grace elapsed with requests still in flight");
                false
            }
        }
    }

    /// The public base URL, `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Builds the store the configuration asks for.
pub async fn build_store(cfg: &Config) -> anyhow::Result<Store> {
    let Some(settings) = &cfg.redis else {
        return Ok(Store::memory(cfg.policy.clone()));
    };
    let redis = RedisStore::connect(settings, cfg.policy.clone())?;
    // The shared retry queue is sealed under a key derived from the APNs auth key, which
    // every replica holds; without credentials nothing is ever queued.
    let queue = match &cfg.delivery {
        Delivery::Apns(creds) => Some(RedisQueue::new(
            redis.pool().clone(),
            &settings.prefix,
            sealing_key(creds.key_pem.expose().as_bytes()),
        )),
        _ => None,
    };
    Ok(Store::redis(
        redis,
        queue,
        cfg.policy.clone(),
        cfg.redis_failure,
    ))
}

/// Binds both listeners and serves in the background.
pub async fn spawn(cfg: Config, clock: Clock) -> anyhow::Result<Running> {
    let metrics = crate::telemetry::metrics_handle();
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("RELAY_LISTEN={}: cannot bind: {e}", cfg.listen))?;
    let admin = TcpListener::bind(cfg.admin_listen).await.map_err(|e| {
        anyhow::anyhow!("RELAY_ADMIN_LISTEN={}: cannot bind: {e}", cfg.admin_listen)
    })?;
    let addr = listener.local_addr()?;
    let admin_addr = admin.local_addr()?;

    match &cfg.delivery {
        Delivery::DryRun => tracing::warn!("RELAY_DRY_RUN=true and no APNs credentials: forwards are logged, not sent"),
        Delivery::Unconfigured => tracing::warn!("no APNs credentials: every forward is answered 502 'relay is not configured for APNs delivery'"),
        Delivery::Apns(c) => tracing::info!(topic = %c.topic, environment = ?cfg.environment, "APNs delivery configured"),
    }
    let store = build_store(&cfg).await?;
    let relay = Arc::new(Relay::new(cfg, store, clock)?);
    let health = Arc::new(Health::default());
    let (stop, stop_rx) = watch::channel(false);

    let public = serve_public(
        listener,
        router(relay.clone()),
        relay.config().header_timeout,
        stop_rx.clone(),
    );
    let admin_srv = axum::serve(
        admin,
        admin_router(relay.clone(), health.clone(), metrics.clone()),
    )
    .with_graceful_shutdown(wait_for(stop_rx.clone()));
    let sweeper = {
        let relay = relay.clone();
        let metrics = metrics.clone();
        let mut stop_rx = stop_rx.clone();
        async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            let mut upkeep = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => relay.sweep(),
                    // Histogram samples pile up in the recorder until something drains
                    // them; without this they grow with every request between scrapes.
                    _ = upkeep.tick() => metrics.run_upkeep(),
                    _ = stop_rx.changed() => break,
                }
            }
        }
    };
    let retries = relay.clone().run_retries(stop_rx.clone());
    let task = tokio::spawn(async move {
        let ((), b, (), ()) = tokio::join!(public, admin_srv.into_future(), sweeper, retries);
        if let Err(e) = b {
            tracing::error!(error = %e, "admin server error");
        }
    });
    health.set_serving();
    tracing::info!(%addr, %admin_addr, "sealrelay serving");
    Ok(Running {
        addr,
        admin_addr,
        relay,
        health,
        stop,
        task,
    })
}

/// The public listener: HTTP/1.1 with a deadline for the request headers (a slow client
/// cannot hold a connection open by trickling them), the peer address for each request,
/// and graceful shutdown (stop accepting, let in-flight requests finish).
async fn serve_public(
    listener: TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
        let conn = http.serve_connection(TokioIo::new(tcp), svc);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

async fn wait_for(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Serves until SIGTERM or SIGINT, then drains and returns.
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    let (delay, grace) = (cfg.shutdown_delay, cfg.shutdown_grace);
    let running = spawn(cfg, Clock::System).await?;
    shutdown_signal().await;
    tracing::info!("shutdown signal received");
    running.drain(delay, grace).await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
