//! The connection to Redis every part of the store shares ([`RedisStore`]: the pool, the
//! subscriber settings, the client's clock slack), its settings, and the helpers each part
//! uses: the shared GCRA function in front of a script ([`with_gcra`]) and the one mapping of
//! a client error ([`err`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use fred::types::{FromValue, MultipleKeys};

use super::sentinel;
use crate::policy::Policy;
use crate::store::error::StoreError;

pub(crate) const GCRA_LUA: &str = include_str!("gcra.lua");

/// A script with the shared GCRA function (`gcra.lua`) in front of it.
pub(crate) fn with_gcra(body: &str) -> Script {
    Script::from_lua(format!("{GCRA_LUA}{body}"))
}

/// When a device's hash has more fields than this, the admission prunes dead ones.
pub const PRUNE_OVER: usize = 24;
/// Redis connection settings, from the configuration.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `REDIS_URL`.
    pub url: String,
    /// `RELAY_REDIS_PREFIX`.
    pub prefix: String,
    /// `RELAY_REDIS_POOL_SIZE`.
    pub pool_size: usize,
    /// `RELAY_REDIS_TIMEOUT_MS`.
    pub timeout: Duration,
}

/// Policy state in Redis.
pub struct RedisStore {
    pub(in crate::store) pool: Pool,
    pub(in crate::store) prefix: String,
    pub(in crate::store) policy: Policy,
    /// A device's hash is pruned of dead fields once it has more than this ([`PRUNE_OVER`];
    /// the differential tests set 0, so they cover pruning on every write).
    pub(in crate::store) prune_over: usize,
    /// How long a client bucket's key outlives its refill, ms (clock skew between replicas).
    /// (Tests whose logical clock runs far ahead of real time keep them for the whole test.)
    pub(in crate::store) client_slack_ms: i64,
    pub(in crate::store) connected: Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("connected", &self.connected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Creates the pool and starts connecting in the background: an unreachable Redis at
    /// start-up is retried with backoff (and logged) while `/readyz` says not ready.
    pub fn connect(settings: &RedisSettings, policy: Policy) -> anyhow::Result<Self> {
        let mut config = Config::from_url(&settings.url)
            .map_err(|e| anyhow::anyhow!("REDIS_URL is not valid: {}", e.details()))?;
        // Keep retrying an unreachable Redis at start-up (fail_fast would give up after the
        // first attempt); commands meanwhile fail after the command timeout.
        config.fail_fast = false;
        let timeout = settings.timeout;
        let pool = Builder::from_config(config.clone())
            .with_performance_config(|p| {
                p.default_command_timeout = timeout;
            })
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(2);
                c.internal_command_timeout = Duration::from_secs(2);
                c.max_command_attempts = 1;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_pool(settings.pool_size)
            .map_err(|e| anyhow::anyhow!("Redis client: {}", e.details()))?;
        let connected = Arc::new(AtomicBool::new(false));
        let hosts = hosts(&config);
        log_failures(&pool, hosts.clone());
        let _ = pool.connect_pool();
        sentinel::watch(&config, &pool);
        {
            let pool = pool.clone();
            let connected = connected.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let mut warned = false;
                loop {
                    match tokio::time::timeout(Duration::from_secs(5), pool.wait_for_connect())
                        .await
                    {
                        Ok(Ok(())) => break,
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e.details(), %hosts, "waiting for Redis");
                            warned = true;
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(_) => {
                            tracing::warn!(
                                waited_s = started.elapsed().as_secs(),
                                %hosts,
                                "Redis is not reachable yet; retrying with backoff"
                            );
                            warned = true;
                        }
                    }
                }
                if warned {
                    tracing::info!("Redis connected");
                }
                connected.store(true, Ordering::SeqCst);
            });
        }
        Ok(Self {
            pool,
            prefix: settings.prefix.clone(),
            policy,
            prune_over: PRUNE_OVER,
            client_slack_ms: 1000,
            connected,
        })
    }

    /// Whether the pool has connected at least once.
    pub fn ready(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The key prefix (`RELAY_REDIS_PREFIX`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// How often, at most, a failing connection is logged (the first failure at once, then one
/// line per interval with the number of failures in between).
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(30);

/// The servers a configuration names, `host:port` separated by commas (never credentials:
/// they live in the configuration's username and password, not in its servers).
pub(crate) fn hosts(config: &Config) -> String {
    let hosts: Vec<String> = config
        .server
        .hosts()
        .iter()
        .map(|h| h.to_string())
        .collect();
    hosts.join(",")
}

/// Logs the pool's connection failures with the servers and the cause, rate-limited: an
/// operator who mistyped a host or a password reads which and why, not only "retrying".
fn log_failures(pool: &Pool, hosts: String) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Option<String>)>();
    for client in pool.clients() {
        let tx = tx.clone();
        let mut errors = client.error_rx();
        tokio::spawn(async move {
            loop {
                match errors.recv().await {
                    Ok((e, server)) => {
                        if tx
                            .send((e.details().to_owned(), server.map(|s| s.to_string())))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
    drop(tx);
    tokio::spawn(async move {
        let mut last: Option<tokio::time::Instant> = None;
        let mut since = 0u64;
        while let Some((cause, server)) = rx.recv().await {
            since += 1;
            if last.is_some_and(|t| t.elapsed() < FAILURE_LOG_EVERY) {
                continue;
            }
            last = Some(tokio::time::Instant::now());
            tracing::warn!(
                hosts = %server.as_deref().unwrap_or(&hosts),
                %cause,
                failures = since,
                "Redis connection failed (logged at most every 30 s)"
            );
            since = 0;
        }
    });
}

pub(crate) fn err(e: fred::error::Error) -> StoreError {
    StoreError::Redis(e.to_string())
}

/// How long a script waits out `TRYAGAIN`: while a Cluster reshard has moved some of a hash
/// tag's keys and not yet the others, a command on several of them is refused (unrun) until
/// the rest arrive, which `MIGRATE` does in milliseconds per batch.
const SPLIT_SLOT_WAIT: Duration = Duration::from_secs(1);

/// Runs `script` on a connection of `pool`, loading it once where a node lacks it
/// (`NOSCRIPT`, after a restart or a failover), and trying again while its keys' slot is
/// split by a reshard (`TRYAGAIN`, 5 ms doubling to 100 ms, for at most
/// [`SPLIT_SLOT_WAIT`]): the server refuses both before the script runs, so sending it
/// again cannot apply it twice. `MOVED` and `ASK` the client follows itself. (One copy of
/// the keys and arguments per attempt, as fred's `evalsha_with_reload` makes.)
pub(crate) async fn run<R: FromValue>(
    script: &Script,
    pool: &Pool,
    keys: impl Into<MultipleKeys>,
    args: Vec<Value>,
) -> Result<R, fred::error::Error> {
    let keys = keys.into();
    let args = Value::Array(args);
    let deadline = std::time::Instant::now() + SPLIT_SLOT_WAIT;
    let mut pause = Duration::from_millis(5);
    let mut loaded = false;
    loop {
        let client = pool.next();
        let r = client
            .evalsha(script.sha1().clone(), keys.clone(), args.clone())
            .await;
        match r {
            Err(e) if !loaded && e.details().starts_with("NOSCRIPT") => {
                script.load(client).await?;
                loaded = true;
            }
            Err(e)
                if e.details().starts_with("TRYAGAIN")
                    && std::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}
