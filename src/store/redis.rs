//! The Redis store: policy state shared by every replica.
//!
//! Each device is one Redis hash, `<prefix>{<32 hex of SHA-256(token)>}`: the braces make the
//! device hash its own Cluster hash tag, and the key names no token, so a copy of the data
//! reveals none. The whole admission of an envelope is one Lua script (`admit.lua`, a
//! mirror of [`crate::policy::admit`]) run with EVALSHA: one round trip per request on the
//! happy path. Rolling back a refused forward and remembering a device's APNs environment
//! are scripts of their own, run only when those happen. Scripts are loaded on first use and
//! reloaded transparently after NOSCRIPT (a restart or a failover).
//!
//! Time comes from the replica as an argument, so tests can drive it; stored instants never
//! move backwards. Every write refreshes the key's TTL to the policy's horizon, so an idle
//! device leaves nothing behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;

use super::{Admission, StoreError};
use crate::envelope::DeviceToken;
use crate::policy::{DeadReason, Decision, Environment, Policy, Ticket, TicketKind};

const ADMIT_LUA: &str = include_str!("admit.lua");
const ROLLBACK_LUA: &str = include_str!("rollback.lua");
const REMEMBER_ENV_LUA: &str = include_str!("remember_env.lua");
const HOLD_LUA: &str = include_str!("hold.lua");
const CLIENT_LUA: &str = include_str!("client.lua");

/// When a device's hash has more fields than this, the admission prunes dead ones.
const PRUNE_OVER: usize = 24;
/// The physical TTL outlives the policy horizon by this much (clock skew between replicas).
const TTL_SLACK_MS: i64 = 60_000;

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
    pool: Pool,
    prefix: String,
    policy: Policy,
    admit: Script,
    rollback: Script,
    remember_env: Script,
    hold: Script,
    client: Script,
    connected: Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("connected", &self.connected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn err(e: fred::error::Error) -> StoreError {
    StoreError::Redis(e.to_string())
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
        let pool = Builder::from_config(config)
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
        let _ = pool.connect_pool();
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
                            tracing::warn!(error = %e.details(), "waiting for Redis");
                            warned = true;
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(_) => {
                            tracing::warn!(
                                waited_s = started.elapsed().as_secs(),
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
            admit: Script::from_lua(ADMIT_LUA),
            rollback: Script::from_lua(ROLLBACK_LUA),
            remember_env: Script::from_lua(REMEMBER_ENV_LUA),
            hold: Script::from_lua(HOLD_LUA),
            client: Script::from_lua(CLIENT_LUA),
            connected,
        })
    }

    /// Whether the pool has connected at least once.
    pub fn ready(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// Waits until connected, at most `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.ready() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// The device's key.
    pub fn key(&self, device: &DeviceToken) -> String {
        format!("{}{{{}}}", self.prefix, device.store_key())
    }

    /// The device's tombstone key (same hash tag as its state).
    pub fn dead_key(&self, device: &DeviceToken) -> String {
        Self::dead_key_of(&self.key(device))
    }

    fn dead_key_of(state_key: &str) -> String {
        format!("{state_key}:dead")
    }

    /// Both keys the admission touches, hashing the token once.
    fn admit_keys(&self, device: &DeviceToken) -> Vec<String> {
        let state = self.key(device);
        let dead = Self::dead_key_of(&state);
        vec![state, dead]
    }

    fn ttl_ms(&self) -> i64 {
        self.policy.horizon_ms() + TTL_SLACK_MS
    }

    /// See [`super::Store::admit`]. One EVALSHA.
    pub async fn admit(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        now_ms: i64,
    ) -> Result<Admission, StoreError> {
        let p = &self.policy;
        let args: Vec<Value> = vec![
            now_ms.into(),
            collapse_id.into(),
            flap_key.into(),
            p.dedup_ms.into(),
            i64::from(p.flap_max_forwards).into(),
            p.flap_window_ms.into(),
            p.cooldown_ms.into(),
            p.reset_ms.into(),
            i64::from(p.rate_capacity).into(),
            p.emission_us.into(),
            p.horizon_ms().into(),
            self.ttl_ms().into(),
            (PRUNE_OVER as i64).into(),
        ];
        let reply: Vec<Value> = self
            .admit
            .evalsha_with_reload(self.pool.next(), self.admit_keys(device), args)
            .await
            .map_err(err)?;
        parse_admission(&reply)
            .ok_or_else(|| StoreError::Redis("unexpected reply from admit.lua".into()))
    }

    /// See [`super::Store::rollback`].
    pub async fn rollback(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        flap_key: &str,
        ticket: &Ticket,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let (kind, prev) = match ticket.kind {
            TicketKind::Counted { cooled: false } => (0, 0),
            TicketKind::Counted { cooled: true } => (1, 0),
            TicketKind::Reminder { prev_reminder_ms } => (2, prev_reminder_ms),
        };
        let args: Vec<Value> = vec![
            now_ms.into(),
            collapse_id.into(),
            flap_key.into(),
            ticket.at_ms.into(),
            kind.into(),
            prev.into(),
            self.policy.horizon_ms().into(),
            self.ttl_ms().into(),
        ];
        let _: i64 = self
            .rollback
            .evalsha_with_reload(self.pool.next(), vec![self.key(device)], args)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// See [`super::Store::remember_env`].
    pub async fn remember_env(
        &self,
        device: &DeviceToken,
        env: Environment,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let args: Vec<Value> = vec![
            now_ms.into(),
            env.code().into(),
            self.policy.horizon_ms().into(),
            self.ttl_ms().into(),
        ];
        let _: i64 = self
            .remember_env
            .evalsha_with_reload(self.pool.next(), vec![self.key(device)], args)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// See [`super::Store::hold`] and [`super::Store::release`] (`until_ms` 0).
    pub async fn hold(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let args: Vec<Value> = vec![
            now_ms.into(),
            collapse_id.into(),
            until_ms.into(),
            self.policy.horizon_ms().into(),
            self.ttl_ms().into(),
        ];
        let _: i64 = self
            .hold
            .evalsha_with_reload(self.pool.next(), vec![self.key(device)], args)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// See [`super::Store::bury`].
    pub async fn bury(
        &self,
        device: &DeviceToken,
        reason: DeadReason,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        let code = match reason {
            DeadReason::Unregistered => "u",
            DeadReason::ExpiredToken => "e",
            DeadReason::BadDeviceToken => "b",
        };
        let _: () = self
            .pool
            .next()
            .set(
                self.dead_key(device),
                code,
                Some(Expiration::PX(ttl_ms.max(1))),
                None,
                false,
            )
            .await
            .map_err(err)?;
        Ok(())
    }

    /// Takes a token from a client block's shared bucket: `Ok(None)` when taken,
    /// `Ok(Some(retry_after_s))` when empty.
    pub async fn client_take(
        &self,
        block: &str,
        now_ms: i64,
        capacity: i64,
        emission_us: i64,
    ) -> Result<Option<u64>, StoreError> {
        let d = ring::digest::digest(&ring::digest::SHA256, block.as_bytes());
        let key = format!(
            "{}{{c:{}}}",
            self.prefix,
            crate::envelope::hex(&d.as_ref()[..16])
        );
        let args: Vec<Value> = vec![now_ms.into(), capacity.into(), emission_us.into()];
        let wait: i64 = self
            .client
            .evalsha_with_reload(self.pool.next(), vec![key], args)
            .await
            .map_err(err)?;
        Ok((wait > 0).then_some(wait as u64))
    }

    /// The connection pool (for tests and diagnostics).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(*i),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        _ => None,
    }
}

fn parse_admission(reply: &[Value]) -> Option<Admission> {
    let code = int(reply.first()?)?;
    let env = text(reply.get(1)?).and_then(|s| Environment::from_code(&s));
    let decision = match code {
        0 => {
            let at_ms = int(reply.get(2)?)?;
            let kind = match int(reply.get(3)?)? {
                0 => TicketKind::Counted { cooled: false },
                1 => TicketKind::Counted { cooled: true },
                2 => TicketKind::Reminder {
                    prev_reminder_ms: int(reply.get(4)?)?,
                },
                _ => return None,
            };
            Decision::Forward(Ticket { at_ms, kind })
        }
        1 => Decision::Coalesced,
        2 => Decision::Suppressed,
        3 => Decision::RateLimited {
            retry_after_s: int(reply.get(2)?)?.max(1) as u64,
        },
        4 => Decision::Dead(match text(reply.get(2)?)?.as_str() {
            "u" => DeadReason::Unregistered,
            "e" => DeadReason::ExpiredToken,
            _ => DeadReason::BadDeviceToken,
        }),
        _ => return None,
    };
    Some(Admission { decision, env })
}
