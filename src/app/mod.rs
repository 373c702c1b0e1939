//! Wiring: builds the store, the push service, the delivery core and the front-ends from a
//! configuration, binds the listeners, serves until told to stop, then drains.

mod listen;
mod shutdown;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::api::AdminApi;
use crate::admin::transport::{self, BoundSocket, TokenCheck};
use crate::admin::Health;
use crate::clock::Clock;
use crate::config::{Config, Delivery as Configured};
use crate::delivery::{Delivery, Sender};
use crate::mailbox::Mailboxes;
use crate::push::apns::client::ApnsClient;
use crate::signed::front::Signed;
use crate::signed::signers::Signers;
use crate::store::connection::RedisStore;
use crate::store::fanout::Fanout;
use crate::store::queue::RedisQueue;
use crate::store::queue::Sealer;
use crate::store::Store;
use crate::v1::V1;

pub use shutdown::Signals;

/// How often in-process state is swept and fan-out channels pruned.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// How often the metrics recorder folds recorded histogram samples into its buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// A relay serving in this process.
pub struct Running {
    /// Where the public listener listens.
    pub addr: SocketAddr,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    /// The admin API's Unix socket, when it is served.
    pub admin_socket: Option<std::path::PathBuf>,
    /// The admin API's loopback TCP address, when it is served.
    pub admin_api_addr: Option<SocketAddr>,
    /// The region listener's address, with `RELAY_REGION`.
    pub region_addr: Option<SocketAddr>,
    store: Arc<Store>,
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Running {
    /// Whether the store can serve (`/readyz`'s store half).
    pub fn store_ready(&self) -> bool {
        self.store.ready()
    }

    /// Whether this replica decides on its in-process store because Redis failed.
    pub fn degraded(&self) -> bool {
        self.store.degraded()
    }

    /// Stops accepting, finishes in-flight requests, and waits for everything to end.
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
        // A replica that is not ready gets no traffic from a load balancer: nothing to
        // drain, so no delay (and nothing waits on a store that is down).
        let delay = if self.health.serves() && self.store.ready() {
            delay
        } else {
            Duration::ZERO
        };
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
fn build_store(cfg: &Config, clock: &Clock) -> anyhow::Result<Store> {
    let Some(settings) = &cfg.store.redis else {
        return Ok(Store::memory(cfg.policy.clone()));
    };
    let redis = RedisStore::connect(settings, cfg.policy.clone())?;
    // The shared retry queue exists only where notifications can be queued: with APNs
    // credentials, whose key (or RELAY_QUEUE_KEY) seals it.
    let queue = match (&cfg.delivery, &cfg.store.queue_key) {
        (Configured::Apns(_), Some(key)) => Some(RedisQueue::new(
            redis.pool().clone(),
            &settings.prefix,
            Sealer::new(key),
        )),
        _ => None,
    };
    let fanout: Fanout = Fanout::redis(settings, redis.pool().clone(), clock.clone())?;
    Ok(Store::redis(
        redis,
        queue,
        fanout,
        cfg.policy.clone(),
        cfg.store.on_failure,
    ))
}

/// Everything a relay is made of, built but not yet listening: what tests drive through
/// [`App::public_router`] without a socket.
pub struct App {
    store: Arc<Store>,
    delivery: Arc<Delivery>,
    v1: Arc<V1>,
    signers: Arc<Signers>,
    signed: Arc<Signed>,
    mailboxes: Arc<Mailboxes>,
    /// Several regions (`RELAY_REGION`), when set.
    regions: Option<Arc<crate::region::Regions>>,
    /// The in-flight limit and client buckets: one per process, shared by every core.
    admission: Arc<crate::admission::Admission>,
    /// Turns true when the relay stops: listeners close, live sockets say goodbye.
    stop: watch::Sender<bool>,
    cfg: Config,
}

/// What the cores of one process share (`RELAY_RUNTIME=per-core`): the first core's
/// admission and in-process policy state.
struct Shared {
    admission: Arc<crate::admission::Admission>,
    policy_memory: Arc<crate::store::policy::MemoryStore>,
}

/// Registers every series whose label values are known at zero, each label set taken from
/// the type that owns it, so dashboards and `rate()` work before the first event.
pub fn register_metrics() {
    use crate::signed::labels::{ReadKind, Route};
    let signed: Vec<(&'static str, &'static str)> = Route::ALL
        .iter()
        .flat_map(|r| r.codes().iter().map(move |c| (r.as_str(), c.as_str())))
        .collect();
    crate::metrics::register_known(crate::metrics::CoreLabels {
        intake: crate::v1::answer::LABELS,
        store_ops: &crate::store::StoreOp::LABELS,
        environments: &crate::device::Environment::ALL.map(|e| e.as_str()),
        retry_results: &crate::delivery::retry::RetryResult::ALL.map(|r| r.as_str()),
        queue_scopes: &crate::delivery::retry::QueueScope::ALL.map(|q| q.as_str()),
        signed_routes: &Route::ALL.map(|r| r.as_str()),
        signed: &signed,
        receipt_reads: &ReadKind::ALL.map(|k| k.as_str()),
        signed_resolutions: &crate::signed::labels::Resolution::ALL.map(|r| r.as_str()),
        ice_providers: &crate::mailbox::ice::Provider::ALL.map(|p| p.as_str()),
    });
    crate::metrics::register_store_decode_errors(&crate::store::DecodeKind::LABELS);
    {
        use crate::mailbox::{close, push, route, socket};
        crate::metrics::register_mailbox(crate::metrics::MailboxLabels {
            routes: &route::Route::ALL.map(route::Route::as_str),
            statuses: &route::Route::USUAL_STATUSES,
            buckets: crate::mailbox::state::BUCKET_LABELS,
            services: &push::ServiceLabel::ALL.map(push::ServiceLabel::as_str),
            outcomes: &push::PushOutcome::ALL.map(push::PushOutcome::as_str),
            sockets: &socket::Kind::ALL.map(socket::Kind::as_str),
            closes: &close::Close::ALL.map(close::Close::as_str),
            caps: &socket::Full::ALL.map(socket::Full::as_str),
        });
    }
    crate::metrics::register_front_ends(
        crate::signed::receipt::lifecycle::STATES
            .iter()
            .map(|s| s.as_str()),
        transport::Transport::ALL.map(transport::Transport::label),
        &transport::Transport::STATUSES.map(|s| s.as_u16()),
    );
}

impl App {
    /// Builds the relay from a validated configuration.
    pub fn build(cfg: Config, clock: Clock) -> anyhow::Result<Self> {
        Self::build_on(cfg, clock, None)
    }

    /// Builds a relay on what another core of the process `shares` when given: the first
    /// core's, so a process of several cores (`RELAY_RUNTIME=per-core`) holds one in-flight
    /// limit, one bucket per client address and one in-process policy state (what it decides
    /// on while degraded), as a replica of one runtime does.
    fn build_on(cfg: Config, clock: Clock, shares: Option<Shared>) -> anyhow::Result<Self> {
        register_metrics();
        let (admission, store) = match shares {
            Some(s) => (
                Some(s.admission),
                build_store(&cfg, &clock)?.sharing_policy_memory(s.policy_memory),
            ),
            None => (None, build_store(&cfg, &clock)?),
        };
        let store = Arc::new(store);
        let apns: Option<Arc<ApnsClient>> = match &cfg.delivery {
            // Apple checks the provider token's `iat` against real time, so the client signs
            // with the system clock even when a test drives the policy with a manual one.
            Configured::Apns(a) => Some(Arc::new(ApnsClient::new(a, Clock::System)?)),
            _ => None,
        };
        let sender = match (&cfg.delivery, &apns) {
            (_, Some(client)) => Sender::Push(client.clone()),
            (Configured::DryRun, None) => Sender::DryRun(crate::push::apns::render),
            _ => Sender::Unconfigured,
        };
        let mut modules: Vec<Arc<dyn crate::push::Push>> = Vec::new();
        if let Some(client) = &apns {
            modules.push(client.clone());
        }
        if let Some(f) = &cfg.fcm {
            let client = Arc::new(crate::push::fcm::FcmClient::new(f)?);
            tracing::info!(project = client.project_id(), "FCM module loaded");
            modules.push(client);
        }
        let delivery = Arc::new(
            Delivery::new(cfg.core.clone(), store.clone(), sender, clock.clone()).with_settlement(
                Arc::new(crate::signed::queued::QueuedTargets::new(
                    store.clone(),
                    clock,
                    cfg.signed.receipt_ttl_ms,
                )),
            ),
        );
        let admission = admission.unwrap_or_else(|| Arc::new(V1::admission(&cfg.v1)));
        let regions = match &cfg.region {
            Some(r) => Some(Arc::new(crate::region::Regions::new(r)?)),
            None => None,
        };
        let v1 = Arc::new(
            V1::new(
                cfg.v1.clone(),
                delivery.clone(),
                admission.clone(),
                cfg.telemetry.replica_name.clone(),
            )
            .with_regions(regions.clone()),
        );
        let (stop, stop_rx) = watch::channel(false);
        let mailboxes = Arc::new(
            Mailboxes::new(
                cfg.mailbox.clone(),
                store.clone(),
                delivery.clock().clone(),
                crate::mailbox::push::Modules::new(modules),
                if cfg.ice.has_provider() {
                    Some(crate::mailbox::ice::Ice::new(&cfg.ice)?)
                } else {
                    None
                },
                stop_rx,
            )
            .with_regions(regions.clone()),
        );
        let signers = Signers::new(store.clone());
        let signed = Arc::new(
            Signed::new(
                cfg.signed.clone(),
                delivery.clone(),
                signers.clone(),
                admission.clone(),
            )
            .with_regions(regions.clone())
            // Kept only where another replica could take a push over: a shared store.
            .with_keeper(
                cfg.store
                    .queue_key
                    .as_ref()
                    .filter(|_| cfg.store.redis.is_some())
                    .map(crate::store::queue::Sealer::new),
            ),
        );
        Ok(Self {
            store,
            delivery,
            v1,
            signers,
            signed,
            mailboxes,
            regions,
            admission,
            stop,
            cfg,
        })
    }

    /// What another core of this process builds on ([`App::build_on`]).
    fn shares(&self) -> Shared {
        Shared {
            admission: self.admission.clone(),
            policy_memory: self.store.policy().in_process_shared(),
        }
    }

    /// The admin API's router (served on the Unix socket and loopback TCP).
    pub fn admin_router(&self) -> Router {
        crate::admin::api::routes(
            AdminApi::new(
                self.store.clone(),
                self.signers.clone(),
                self.v1.clone(),
                self.delivery.clock().clone(),
                self.signed.abandonment(),
            )
            .with_regions(self.regions.clone()),
        )
        .layer(sensitive_headers())
    }

    /// The public router: every front-end's routes and the one 404.
    pub fn public_router(&self) -> Router {
        let replica: Arc<str> = self.cfg.telemetry.replica_name.clone().into();
        crate::v1::intake::routes(self.v1.clone(), self.cfg.v1.aasa_app_ids.clone())
            .merge(crate::signed::routes(self.signed.clone()))
            .merge(crate::mailbox::routes(self.mailboxes.clone()))
            .fallback(move || {
                let replica = replica.clone();
                async move { crate::v1::intake::not_found(&replica) }
            })
            .layer(sensitive_headers())
    }
}

/// Marks the headers that carry credentials as sensitive on every request: `Authorization`
/// (signed reads, mailbox bearers, the admin token) and `Sec-WebSocket-Protocol` (a
/// browser's mailbox bearer).
fn sensitive_headers() -> tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer {
    tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new(listen::SENSITIVE_HEADERS)
}

/// Binds both listeners and serves in the background.
pub async fn spawn(cfg: Config, clock: Clock) -> anyhow::Result<Running> {
    let metrics = crate::metrics::handle();
    let settings = cfg.app.clone();
    let cores = cfg.cores().unwrap_or(1);
    let cfg = cfg.per_core(cores);
    let listener = listen::bind_public(settings.listen, cores > 1)
        .map_err(|e| anyhow::anyhow!("RELAY_LISTEN={}: cannot bind: {e}", settings.listen))?;
    let admin = TcpListener::bind(settings.admin_listen)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "RELAY_ADMIN_LISTEN={}: cannot bind: {e}",
                settings.admin_listen
            )
        })?;
    let addr = listener.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let admin_api = match &cfg.admin.tcp {
        None => None,
        Some(t) => {
            let l = TcpListener::bind(t.addr).await.map_err(|e| {
                anyhow::anyhow!("RELAY_ADMIN_API_LISTEN={}: cannot bind: {e}", t.addr)
            })?;
            Some((l, TokenCheck::new(&t.token)))
        }
    };
    let admin_api_addr = match &admin_api {
        Some((l, _)) => Some(l.local_addr()?),
        None => None,
    };
    let socket = match &cfg.admin.socket {
        None => None,
        Some(s) => match BoundSocket::bind(&s.path) {
            Ok(b) => Some(b),
            Err(e) if s.explicit => {
                anyhow::bail!(
                    "RELAY_ADMIN_SOCKET={}: cannot create the admin socket: {e}",
                    s.path.display()
                )
            }
            Err(e) if cfg.v1.intake == crate::v1::Intake::Local => {
                anyhow::bail!(
                    "RELAY_V1_INTAKE=local takes unsigned pushes only on the admin socket, which cannot be created at its default path {}: {e} (set RELAY_ADMIN_SOCKET to a writable path)",
                    s.path.display()
                )
            }
            Err(e) => {
                tracing::warn!(path = %s.path.display(), error = %e, "the admin socket cannot be created at its default path; the admin API is off (set RELAY_ADMIN_SOCKET to a writable path, or to empty to silence this)");
                None
            }
        },
    };
    let admin_socket = socket.as_ref().map(|s| s.path().to_owned());
    let region_listener =
        match &cfg.region {
            None => None,
            Some(r) => Some(TcpListener::bind(r.listen).await.map_err(|e| {
                anyhow::anyhow!("RELAY_REGION_LISTEN={}: cannot bind: {e}", r.listen)
            })?),
        };
    let region_tls = match cfg.region.as_ref().and_then(|r| r.tls.as_ref()) {
        Some((chain, key)) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(
            crate::region::listener::server_config(chain, key)?,
        ))),
        None => None,
    };
    let region_addr = match &region_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };

    match &cfg.delivery {
        Configured::DryRun => tracing::warn!("RELAY_DRY_RUN=true and no APNs credentials: forwards are logged, not sent"),
        Configured::Unconfigured => tracing::warn!("no APNs credentials: every forward is answered 502 'relay is not configured for APNs delivery'"),
        Configured::Apns(a) => tracing::info!(topic = %a.topic, environment = ?cfg.core.environment, "APNs delivery configured"),
    }
    let unserved = cfg.unserved();
    if let Some(why) = &unserved {
        tracing::warn!("/readyz stays 503: {why}");
    }
    let app = App::build(cfg.clone(), clock.clone())?;
    let health = Arc::new(Health::new(unserved));
    let stop = app.stop.clone();
    let stop_rx = stop.subscribe();

    // `RELAY_RUNTIME=per-core`: the other cores, each a whole relay on a thread of its own
    // taking connections on the same address, built before this one serves.
    let mut others = Vec::with_capacity(cores.saturating_sub(1));
    for index in 1..cores {
        let started = start_core(
            index,
            cfg.clone(),
            clock.clone(),
            app.shares(),
            addr,
            stop.subscribe(),
        )?;
        others.push(
            started
                .await
                .map_err(|_| anyhow::anyhow!("core {index} stopped while starting"))??,
        );
    }
    let mut stores = vec![app.store.clone()];
    stores.extend(others.iter().map(|c| c.store.clone()));

    let admin_srv = axum::serve(
        admin,
        crate::admin::probes(stores, health.clone(), metrics.clone()),
    )
    .with_graceful_shutdown(listen::wait_for(stop_rx.clone()));
    let core = core_tasks(&app, listener, Some(metrics), stop_rx.clone());
    let region_srv = {
        let regions = app.regions.clone();
        let router = app.public_router();
        let admin = app.admin_router();
        let health = health.clone();
        let store = app.store.clone();
        let stop_rx = stop_rx.clone();
        async move {
            if let (Some(regions), Some(listener)) = (regions, region_listener) {
                let ready: Arc<dyn Fn() -> bool + Send + Sync> =
                    Arc::new(move || health.serving() && store.ready());
                crate::region::listener::serve(
                    listener,
                    regions,
                    crate::region::listener::Routers {
                        public: router,
                        admin,
                    },
                    region_tls,
                    ready,
                    stop_rx,
                )
                .await;
            }
        }
    };
    let admin_router = app.admin_router();
    let socket_srv = {
        let (router, stop_rx) = (admin_router.clone(), stop_rx.clone());
        async move {
            if let Some(s) = socket {
                transport::serve_socket(s, router, stop_rx).await;
            }
        }
    };
    let tcp_srv = {
        let stop_rx = stop_rx.clone();
        async move {
            if let Some((l, token)) = admin_api {
                transport::serve_tcp(l, admin_router, token, stop_rx).await;
            }
        }
    };
    let task = tokio::spawn(async move {
        let ((), b, (), (), (), _) = tokio::join!(
            core,
            admin_srv.into_future(),
            socket_srv,
            tcp_srv,
            region_srv,
            // The other cores stop with this one (they watch the same channel); the task
            // ends when every one has finished its in-flight requests.
            futures_util::future::join_all(others.into_iter().map(|c| c.done)),
        );
        if let Err(e) = b {
            tracing::error!(error = %e, "admin server error");
        }
    });
    health.set_serving();
    tracing::info!(
        %addr,
        %admin_addr,
        cores,
        admin_socket = %admin_socket.as_deref().map_or("off".into(), |p| p.display().to_string()),
        admin_api = %admin_api_addr.map_or("off".into(), |a| a.to_string()),
        region = %region_addr.map_or("off".into(), |a| a.to_string()),
        "sealrelay serving"
    );
    Ok(Running {
        addr,
        admin_addr,
        admin_socket,
        admin_api_addr,
        region_addr,
        store: app.store.clone(),
        health,
        stop,
        task,
    })
}

/// What every core serves: the public listener, the sweeper, the retry worker, the signers'
/// feed and, with regions, the peers' probe. `upkeep`: the metrics recorder, folded by the
/// first core only.
fn core_tasks(
    app: &App,
    listener: TcpListener,
    upkeep: Option<metrics_exporter_prometheus::PrometheusHandle>,
    stop_rx: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // A connection whose writes make no progress for two ping intervals is cut: a client
    // that stopped reading an event stream (or anything else) holds nothing for longer.
    let write_stall = app.cfg.mailbox.sockets.ping * 2;
    let public = listen::serve_public(
        listener,
        app.public_router(),
        listen::Busiest(app.v1.clone()),
        app.cfg.v1.header_timeout,
        write_stall,
        stop_rx.clone(),
    );
    let sweeper = {
        let store = app.store.clone();
        let v1 = app.v1.clone();
        let clock = app.delivery.clock().clone();
        let mut stop_rx = stop_rx.clone();
        async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            let mut upkeep_tick = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        store.policy().in_process().sweep(clock.now_ms());
                        store.receipts().sweep(clock.now_ms());
                        store.mailboxes().sweep(clock.now_ms());
                        v1.sweep();
                        store.fanout().prune().await;
                    }
                    // Histogram samples pile up in the recorder until something drains
                    // them; without this they grow with every request between scrapes.
                    _ = upkeep_tick.tick(), if upkeep.is_some() => {
                        if let Some(m) = &upkeep {
                            m.run_upkeep();
                        }
                    }
                    _ = stop_rx.changed() => break,
                }
            }
        }
    };
    let retries = app.delivery.clone().run_retries(stop_rx.clone());
    let follow = app.signers.clone().follow(stop_rx.clone());
    let probe = {
        let regions = app.regions.clone();
        async move {
            if let Some(regions) = regions {
                regions.probe(stop_rx).await;
            }
        }
    };
    async move {
        tokio::join!(public, sweeper, retries, follow, probe);
    }
}

/// A core of `RELAY_RUNTIME=per-core` other than the first, serving on its own thread.
struct Core {
    /// Its store, for `/readyz`.
    store: Arc<Store>,
    /// Closed when it has stopped and finished its in-flight requests.
    done: tokio::sync::oneshot::Receiver<()>,
}

/// Starts core `index` on a thread of its own: a single-threaded runtime serving a whole
/// relay built from `cfg` on what the first core `shares`, with its own
/// listener on `addr`. It stops, finishing its in-flight requests, when `stop` (the first
/// core's) turns true or is dropped. The answer arrives once it is built and accepting.
fn start_core(
    index: usize,
    cfg: Config,
    clock: Clock,
    shares: Shared,
    addr: SocketAddr,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<tokio::sync::oneshot::Receiver<anyhow::Result<Core>>> {
    let (started, answer) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("sealrelay-core-{index}"))
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(run_core(cfg, clock, shares, addr, stop, started)),
                Err(e) => {
                    let _ = started.send(Err(anyhow::anyhow!(
                        "core {index}: cannot start its runtime: {e}"
                    )));
                }
            }
        })
        .map_err(|e| anyhow::anyhow!("core {index}: cannot start its thread: {e}"))?;
    Ok(answer)
}

/// A core's life on its own runtime (see [`start_core`]).
async fn run_core(
    cfg: Config,
    clock: Clock,
    shares: Shared,
    addr: SocketAddr,
    mut stop: watch::Receiver<bool>,
    started: tokio::sync::oneshot::Sender<anyhow::Result<Core>>,
) {
    let built = listen::bind_public(addr, true)
        .map_err(|e| anyhow::anyhow!("RELAY_LISTEN={addr}: cannot bind another core: {e}"))
        .and_then(|listener| Ok((listener, App::build_on(cfg, clock, Some(shares))?)));
    let (listener, app) = match built {
        Ok(x) => x,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let (finished, done) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(core_tasks(&app, listener, None, app.stop.subscribe()));
    if started
        .send(Ok(Core {
            store: app.store.clone(),
            done,
        }))
        .is_ok()
    {
        let _ = stop.wait_for(|s| *s).await;
    }
    let _ = app.stop.send(true);
    let _ = task.await;
    drop(finished);
}

/// The binary's `serve`: logs and traces from the configuration, then [`run`].
pub async fn serve(cfg: Config) -> anyhow::Result<()> {
    let telemetry = crate::telemetry::init(&cfg.telemetry)?;
    let r = run(cfg).await;
    if let Err(e) = &r {
        tracing::error!(error = %e, "sealrelay stopped");
    }
    // Flushing traces blocks until the exporter is done, and the exporter's requests run on
    // this runtime: flush from a blocking thread, not a worker.
    let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
    r
}

/// Serves until SIGTERM or SIGINT, then drains and returns. The signal handlers are
/// installed first: if that fails, start-up fails (a relay that cannot be stopped cleanly
/// must not start). A second signal while draining exits at once.
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    let mut signals = Signals::install()?;
    let (delay, grace) = (cfg.app.shutdown_delay, cfg.app.shutdown_grace);
    let running = spawn(cfg, Clock::System).await?;
    let first = signals.recv().await;
    tracing::info!(signal = first, "shutdown signal received");
    tokio::spawn(async move {
        let second = signals.recv().await;
        tracing::warn!(
            signal = second,
            "second shutdown signal: exiting without draining"
        );
        std::process::exit(1);
    });
    running.drain(delay, grace).await;
    tracing::info!("stopped");
    Ok(())
}
