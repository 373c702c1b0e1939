//! The shared retry queue in Redis (semantics in [`crate::store::queue`]): sharded over
//! [`SHARDS`] hash tags so it spreads over a Cluster, each shard a handful of keys under one
//! tag, every item sealed, every claim fenced, every key bounded by a TTL that follows the
//! newest item's staleness window and by [`SHARD_CAP`] items.

use fred::prelude::*;
use fred::types::scripts::Script;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::backend::{Claims, Depth, QueueBackend, Unopened};
use super::item::{random_u32, Claimed, Fenced, Pending, Sealer, SHARD_CAP};
use crate::store::connection::client::{err, run};
use crate::store::error::{StoreError, StoreResult};

/// Queue shards (Redis hash tags).
pub const SHARDS: usize = 8;

/// Items that could not be opened are kept this long for an operator to look at.
const ASIDE_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// How long a shard's keys outlive the newest item's staleness window.
const TTL_MARGIN_MS: i64 = 10 * 60 * 1000;

/// How long an acknowledged item's id is remembered: longer than any copy of it can wait to
/// be handed over ([`QueueBackend::put_new`]).
const DONE_MS: i64 = crate::policy::STALENESS_S as i64 * 1000 + TTL_MARGIN_MS;

/// The shared queue in Redis.
pub struct RedisQueue {
    pool: Pool,
    prefix: String,
    sealer: Sealer,
    put: Script,
    claim: Script,
    ack: Script,
    stats: Script,
    /// The shard the next claim takes from (round robin over claims).
    next_shard: AtomicUsize,
    /// Claims whose reply was lost: they may have run and leased items nobody else will
    /// claim before the lease ends, so each is asked again (and its items returned) when
    /// its shard is next claimed from.
    lost_claims: Mutex<Vec<ClaimSent>>,
}

/// A claim as it was sent (kept, when its reply was lost, to be asked again).
#[derive(Debug, Clone, Copy)]
struct ClaimSent {
    shard: usize,
    base: i64,
    max: usize,
    lease_until_ms: i64,
}

/// Lost claims kept at most (the oldest goes first): each holds at most one batch, which
/// its lease brings back anyway.
const LOST_CLAIMS_KEPT: usize = 64;

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueue")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisQueue {
    /// A queue on this pool, under this key prefix, sealed with `sealer`.
    pub fn new(pool: Pool, prefix: &str, sealer: Sealer) -> Self {
        Self {
            pool,
            prefix: prefix.to_owned(),
            sealer,
            put: Script::from_lua(include_str!("queue_put.lua")),
            claim: Script::from_lua(include_str!("queue_claim.lua")),
            ack: Script::from_lua(include_str!("queue_ack.lua")),
            stats: Script::from_lua(include_str!("queue_stats.lua")),
            next_shard: AtomicUsize::new(0),
            lost_claims: Mutex::new(Vec::new()),
        }
    }

    fn lost_claims(&self) -> std::sync::MutexGuard<'_, Vec<ClaimSent>> {
        self.lost_claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The seven keys of a shard, in the order the scripts expect.
    fn keys(&self, shard: usize) -> Vec<String> {
        ["due", "items", "lease", "born", "aside", "refs", "done"]
            .iter()
            .map(|k| format!("{}{{q{shard}}}:{k}", self.prefix))
            .collect()
    }

    /// The shard an item id lives in.
    pub fn shard_of(id: &str) -> usize {
        crate::device::sha256(id.as_bytes())[0] as usize % SHARDS
    }

    /// Claims up to `max` due items of one shard, each with a fresh fencing token. Items
    /// that cannot be opened are moved aside (and counted in the result), never delivered
    /// and never silently deleted; what such an item settles, kept in the clear beside it,
    /// is in the result too, so its front-end hears that it was set aside.
    pub async fn claim_shard(
        &self,
        shard: usize,
        now_ms: i64,
        lease_until_ms: i64,
        max: usize,
    ) -> StoreResult<Claims> {
        let mut out = Claims::default();
        // First the claims of this shard whose reply was lost: what they leased is this
        // replica's to deliver (a reply that did not arrive is not a claim that did not run).
        let lost: Vec<ClaimSent> = {
            let mut kept = self.lost_claims();
            kept.retain(|c| c.lease_until_ms > now_ms);
            let (mine, rest) = kept.drain(..).partition(|c| c.shard == shard);
            *kept = rest;
            mine
        };
        let mut lost = lost.into_iter();
        while let Some(c) = lost.next() {
            if let Err(e) = self.claim_run(&mut out, c, now_ms, true).await {
                let mut kept = self.lost_claims();
                kept.push(c);
                kept.extend(lost);
                return what_was_claimed(out, e);
            }
        }
        let wanted = max.saturating_sub(out.items.len());
        if wanted == 0 {
            return Ok(out);
        }
        let sent = ClaimSent {
            shard,
            // 1 to 2^40: the claim's fencing tokens are base + 1 .. base + max.
            base: (i64::from(random_u32()) << 8 | i64::from(random_u32() & 0xff)) + 1,
            max: wanted,
            lease_until_ms,
        };
        match self.claim_run(&mut out, sent, now_ms, false).await {
            Ok(()) => Ok(out),
            Err(e) => {
                let mut kept = self.lost_claims();
                if kept.len() >= LOST_CLAIMS_KEPT {
                    kept.remove(0);
                }
                kept.push(sent);
                what_was_claimed(out, e)
            }
        }
    }

    /// One run of the claim script for `c` (`again`: asked again after its reply was lost),
    /// its items added to `out`. `Err` only when the script's reply was not read, so
    /// nothing was added.
    async fn claim_run(
        &self,
        out: &mut Claims,
        c: ClaimSent,
        now_ms: i64,
        again: bool,
    ) -> StoreResult<()> {
        let shard = c.shard;
        let args: Vec<Value> = vec![
            now_ms.into(),
            c.lease_until_ms.into(),
            (c.max as i64).into(),
            c.base.into(),
            if again { "1" } else { "0" }.into(),
        ];
        let reply: Vec<Value> = run(&self.claim, &self.pool, self.keys(shard), args)
            .await
            .map_err(err)?;
        for quad in reply.chunks(4) {
            let [id, blob, fence, reference] = quad else {
                continue;
            };
            let (Some(id), Some(blob), Some(fence)) = (text(id), bytes(blob), int(fence)) else {
                continue;
            };
            let fence = fence as u64;
            match self.sealer.open(&id, blob) {
                Some(item) => out.items.push(Claimed { item, fence }),
                None => {
                    tracing::error!(
                        shard,
                        "a queued notification cannot be opened: it was sealed under another key (RELAY_QUEUE_KEY or the APNs auth key differs between replicas, or was rotated); moved aside to the queue's aside hash for 7 days, never delivered"
                    );
                    // Moving it aside may fail (the store stopped answering): the item is
                    // then claimed again when its lease ends, and set aside then. Not an
                    // `Err` of the claim: items opened above would come back from the claim
                    // asked again and be delivered twice.
                    if self.finish(&id, fence, true).await.is_err() {
                        continue;
                    }
                    out.unopenable += 1;
                    if let Some(u) = text(reference).as_deref().and_then(Unopened::parse) {
                        out.set_aside.push(u);
                    }
                }
            }
        }
        Ok(())
    }

    /// The put script: a new item (`fence` 0), a reschedule as the claimer holding `fence`,
    /// or (`only_new`) an item this shard neither holds nor acknowledged lately.
    async fn write(
        &self,
        item: &Pending,
        due_ms: i64,
        fence: u64,
        only_new: bool,
        now_ms: i64,
    ) -> StoreResult<Fenced> {
        let shard = Self::shard_of(&item.id);
        let ttl_ms = (item.expires_ms() - now_ms).max(0) + TTL_MARGIN_MS;
        let args: Vec<Value> = vec![
            item.id.as_str().into(),
            Value::Bytes(self.sealer.seal(item).into()),
            due_ms.into(),
            fence.to_string().into(),
            item.accepted_ms().into(),
            ttl_ms.into(),
            (SHARD_CAP as i64).into(),
            Unopened::reference_of(item).into(),
            (if only_new { "1" } else { "0" }).into(),
        ];
        let r: i64 = run(&self.put, &self.pool, self.keys(shard), args)
            .await
            .map_err(err)?;
        match r {
            1 => Ok(Fenced::Done),
            0 => Ok(Fenced::Stale),
            _ => Err(StoreError::Full),
        }
    }

    async fn finish(&self, id: &str, fence: u64, aside: bool) -> StoreResult<Fenced> {
        let shard = Self::shard_of(id);
        let args: Vec<Value> = vec![
            id.into(),
            fence.to_string().into(),
            (if aside { "1" } else { "0" }).into(),
            ASIDE_TTL_MS.into(),
            DONE_MS.into(),
            (SHARD_CAP as i64).into(),
        ];
        let r: i64 = run(&self.ack, &self.pool, self.keys(shard), args)
            .await
            .map_err(err)?;
        Ok(if r == 1 { Fenced::Done } else { Fenced::Stale })
    }
}

#[async_trait::async_trait]
impl QueueBackend for RedisQueue {
    /// Adds an item (`fence` 0) or reschedules it as the claimer holding `fence`, due at
    /// `due_ms`. `Err` when the shard is full.
    async fn put(
        &self,
        item: &Pending,
        due_ms: i64,
        fence: u64,
        now_ms: i64,
    ) -> StoreResult<Fenced> {
        self.write(item, due_ms, fence, false, now_ms).await
    }

    /// Adds an item unless its shard holds it or acknowledged it within the window.
    async fn put_new(&self, item: &Pending, due_ms: i64, now_ms: i64) -> StoreResult<Fenced> {
        self.write(item, due_ms, 0, true, now_ms).await
    }

    /// Claims from one shard ([`RedisQueue::claim_shard`]), the next in turn.
    async fn claim(&self, now_ms: i64, lease_until_ms: i64, max: usize) -> StoreResult<Claims> {
        let shard = self.next_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
        self.claim_shard(shard, now_ms, lease_until_ms, max).await
    }

    /// Removes an item as the claimer holding `fence` (0: unconditionally).
    async fn ack(&self, id: &str, fence: u64) -> StoreResult<Fenced> {
        self.finish(id, fence, false).await
    }

    /// Depth, oldest acceptance and items set aside, over all shards.
    async fn stats(&self) -> StoreResult<Depth> {
        let mut total = Depth::default();
        for shard in 0..SHARDS {
            let reply: Vec<Value> = run(
                &self.stats,
                &self.pool,
                self.keys(shard),
                Vec::<Value>::new(),
            )
            .await
            .map_err(err)?;
            let get = |i: usize| reply.get(i).and_then(int).unwrap_or(0);
            total.depth += get(0) as usize;
            let oldest = get(1);
            if oldest >= 0 {
                total.oldest_accepted_ms =
                    Some(total.oldest_accepted_ms.map_or(oldest, |o| o.min(oldest)));
            }
            total.aside += get(2) as usize;
        }
        Ok(total)
    }
}

/// What a claim hands its caller when one of its runs got no reply: the items claimed
/// before it, or the error when there are none.
fn what_was_claimed(out: Claims, e: StoreError) -> StoreResult<Claims> {
    if out.items.is_empty() {
        Err(e)
    } else {
        Ok(out)
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(*i),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::Bytes(b) => Some(b),
        Value::String(s) => Some(s.as_bytes()),
        _ => None,
    }
}
