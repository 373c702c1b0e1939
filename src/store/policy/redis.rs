//! Per-device policy state in Redis: the admission (`policy_admit.lua`), the rollback of a refused
//! forward, the remembered APNs environment, holds of queued alerts, dead tokens, and the
//! shared bucket of a busy client address.
//!
//! Each device is one Redis hash, `<prefix>{<32 hex of SHA-256(token)>}`, with its tombstone
//! beside it under the same hash tag: the braces make the device hash its own Cluster slot,
//! and the key names no token, so a copy of the data reveals none.

use fred::prelude::*;
use fred::types::scripts::Script;

use super::backend::{Admission, AlertKey, Mark, PolicyBackend};
use crate::device::{DeviceToken, Environment};
use crate::policy::{Bucket, DeadReason, Decision, Ticket, TicketKind};
use crate::store::connection::client::{err, run, with_gcra, RedisStore, GCRA_LUA};
use crate::store::error::{StoreError, StoreResult};

/// The admission script exactly as the relay loads it (the benchmark measures Redis's
/// ceiling with it).
pub fn admit_lua() -> String {
    format!("{GCRA_LUA}{DEVICE_LUA}{}", include_str!("policy_admit.lua"))
}

/// What the per-device scripts share, put before each.
const DEVICE_LUA: &str = include_str!("policy_device.lua");

/// A per-device script: [`DEVICE_LUA`], then `body`.
fn on_device(body: &str) -> Script {
    Script::from_lua(format!("{DEVICE_LUA}{body}"))
}

/// The scripts this module runs (their hashes computed once per process).
struct Scripts {
    admit: Script,
    rollback: Script,
    remember_env: Script,
    hold: Script,
    client: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    admit: Script::from_lua(admit_lua()),
    rollback: on_device(include_str!("policy_rollback.lua")),
    remember_env: on_device(include_str!("policy_remember_env.lua")),
    hold: on_device(include_str!("policy_hold.lua")),
    client: with_gcra(include_str!("admission_client.lua")),
});

/// What a device's tombstone key adds to its state key.
const DEAD_SUFFIX: &str = ":dead";

impl RedisStore {
    /// The device's key (room left for the tombstone's suffix, which is made from it).
    pub fn key(&self, device: &DeviceToken) -> String {
        let tag = device.store_key();
        let mut key = String::with_capacity(self.prefix.len() + tag.len() + 2 + DEAD_SUFFIX.len());
        key.push_str(&self.prefix);
        key.push('{');
        key.push_str(&tag);
        key.push('}');
        key
    }

    /// The device's tombstone key (same hash tag as its state).
    pub fn dead_key(&self, device: &DeviceToken) -> String {
        Self::dead_key_of(&self.key(device))
    }

    fn dead_key_of(state_key: &str) -> String {
        let mut key = String::with_capacity(state_key.len() + DEAD_SUFFIX.len());
        key.push_str(state_key);
        key.push_str(DEAD_SUFFIX);
        key
    }

    /// Both keys the admission touches, hashing the token once.
    fn admit_keys(&self, device: &DeviceToken) -> Vec<String> {
        let state = self.key(device);
        let dead = Self::dead_key_of(&state);
        vec![state, dead]
    }

    fn ttl_ms(&self) -> i64 {
        self.policy.horizon_ms() + crate::policy::CLOCK_SKEW_MS
    }

    /// Takes a token from a client block's shared bucket: `Ok(None)` when taken,
    /// `Ok(Some(retry_after_s))` when empty.
    pub async fn client_take(
        &self,
        block: &str,
        now_ms: i64,
        bucket: Bucket,
    ) -> StoreResult<Option<u64>> {
        let d = ring::digest::digest(&ring::digest::SHA256, block.as_bytes());
        let key = format!(
            "{}{{c:{}}}",
            self.prefix,
            crate::device::hex(&d.as_ref()[..16])
        );
        let args: Vec<Value> = vec![
            now_ms.into(),
            bucket.capacity.into(),
            bucket.emission_us.into(),
            self.client_slack_ms.into(),
        ];
        let wait: i64 = run(&SCRIPTS.client, &self.pool, vec![key], args)
            .await
            .map_err(err)?;
        Ok((wait > 0).then_some(wait as u64))
    }
}

impl RedisStore {
    /// Runs one of the scripts on a device's state that answer nothing.
    async fn on_device(
        &self,
        script: &Script,
        device: &DeviceToken,
        args: Vec<Value>,
    ) -> StoreResult<()> {
        let _: i64 = run(script, &self.pool, vec![self.key(device)], args)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// Holds `collapse_id` until `until_ms` (0: ends the hold).
    async fn hold(
        &self,
        device: &DeviceToken,
        collapse_id: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> StoreResult<()> {
        let args: Vec<Value> = vec![
            now_ms.into(),
            collapse_id.into(),
            until_ms.into(),
            self.policy.horizon_ms().into(),
            self.ttl_ms().into(),
        ];
        self.on_device(&SCRIPTS.hold, device, args).await
    }

    /// Writes the device's tombstone, kept `ttl_ms`.
    async fn bury(&self, device: &DeviceToken, reason: DeadReason, ttl_ms: i64) -> StoreResult<()> {
        let code = match reason {
            DeadReason::Uninstalled => "u",
            DeadReason::Expired => "e",
            DeadReason::Foreign => "b",
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
}

#[async_trait::async_trait]
impl PolicyBackend for RedisStore {
    /// One EVALSHA.
    async fn admit(&self, key: AlertKey<'_>, now_ms: i64) -> StoreResult<Admission> {
        let p = &self.policy;
        let args: Vec<Value> = vec![
            now_ms.into(),
            key.collapse_id.into(),
            key.flap_key.into(),
            p.dedup_ms.into(),
            i64::from(p.flap_max_forwards).into(),
            p.flap_window_ms.into(),
            p.cooldown_ms.into(),
            p.reset_ms.into(),
            i64::from(p.rate_capacity).into(),
            p.emission_us.into(),
            p.horizon_ms().into(),
            self.ttl_ms().into(),
            (self.prune_over as i64).into(),
            crate::policy::CLOCK_SKEW_MS.into(),
        ];
        let reply: Vec<Value> = run(
            &SCRIPTS.admit,
            &self.pool,
            self.admit_keys(key.device),
            args,
        )
        .await
        .map_err(err)?;
        parse_admission(&reply)
            .ok_or_else(|| StoreError::Redis("unexpected reply from policy_admit.lua".into()))
    }

    async fn rollback(&self, key: AlertKey<'_>, ticket: &Ticket, now_ms: i64) -> StoreResult<()> {
        let (kind, prev) = match ticket.kind {
            TicketKind::Counted { cooled: false } => (0, 0),
            TicketKind::Counted { cooled: true } => (1, 0),
            TicketKind::Reminder { prev_reminder_ms } => (2, prev_reminder_ms),
        };
        let args: Vec<Value> = vec![
            now_ms.into(),
            key.collapse_id.into(),
            key.flap_key.into(),
            ticket.at_ms.into(),
            kind.into(),
            prev.into(),
            self.policy.horizon_ms().into(),
            self.ttl_ms().into(),
        ];
        self.on_device(&SCRIPTS.rollback, key.device, args).await
    }

    async fn mark(&self, device: &DeviceToken, mark: Mark<'_>, now_ms: i64) -> StoreResult<()> {
        match mark {
            Mark::Env(env) => {
                let args: Vec<Value> = vec![
                    now_ms.into(),
                    env.code().into(),
                    self.policy.horizon_ms().into(),
                    self.ttl_ms().into(),
                ];
                self.on_device(&SCRIPTS.remember_env, device, args).await
            }
            Mark::Hold {
                collapse_id,
                until_ms,
            } => self.hold(device, collapse_id, until_ms, now_ms).await,
            Mark::Release { collapse_id } => self.hold(device, collapse_id, 0, now_ms).await,
            Mark::Dead { reason, ttl_ms } => self.bury(device, reason, ttl_ms).await,
        }
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
            "u" => DeadReason::Uninstalled,
            "e" => DeadReason::Expired,
            _ => DeadReason::Foreign,
        }),
        _ => return None,
    };
    Some(Admission { decision, env })
}
