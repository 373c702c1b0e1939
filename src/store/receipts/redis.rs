//! Receipts in Redis (what they mean: [`crate::store::receipts`]). A receipt is two keys
//! under its push's hash tag, `<prefix>{r:<push id>}` and `...:ev`, and its events are
//! published on `<prefix>{r:<push id>}:events` from the same script, sharded on the same
//! slot.

use fred::prelude::*;
use fred::types::scripts::Script;

use super::backend::{events_channel, ReceiptBackend};
use crate::signed::receipt::lifecycle::{
    Begun, Changes, Event, Guard, NewReceipt, Receipt, State, Target, Updated,
};
use crate::store::connection::client::{err, run};
use crate::store::connection::reply::{bad, int, pairs, text};
use crate::store::error::StoreResult;

/// The receipt scripts over one pool, under one key prefix.
pub struct RedisReceipts {
    pool: Pool,
    prefix: String,
    begin: Script,
    update: Script,
    get: Script,
}

impl std::fmt::Debug for RedisReceipts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReceipts")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn receipt(push_id: &str, fields: &Value, events: &Value) -> Option<Receipt> {
    let f = pairs(fields);
    let order = f.get("o")?;
    let targets = order
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|key| {
            let raw = f.get(&format!("x:{key}"))?;
            let (state, rest) = raw.split_once('|')?;
            let (at, detail) = rest.split_once('|')?;
            Some(Target {
                key: key.to_owned(),
                state: State::parse(state)?,
                updated_ms: at.parse().ok()?,
                detail: detail.to_owned(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let events = match events {
        Value::Array(items) => items
            .iter()
            .map(|e| Event::decode(&text(e)?))
            .collect::<Option<Vec<_>>>()?,
        _ => Vec::new(),
    };
    Some(Receipt {
        push_id: push_id.to_owned(),
        hash: f.get("h")?.clone(),
        signer: f.get("k")?.clone(),
        topic: f.get("t")?.clone(),
        created_ms: f.get("c")?.parse().ok()?,
        updated_ms: f.get("u")?.parse().ok()?,
        settled: f.get("s")? == "1",
        targets,
        events,
    })
}

impl RedisReceipts {
    /// The scripts over this pool, under this key prefix.
    pub fn new(pool: Pool, prefix: &str) -> Self {
        Self {
            pool,
            prefix: prefix.to_owned(),
            begin: Script::from_lua(include_str!("receipt_begin.lua")),
            update: Script::from_lua(include_str!("receipt_update.lua")),
            get: Script::from_lua(include_str!("receipt_get.lua")),
        }
    }

    fn keys(&self, push_id: &str) -> Vec<String> {
        let k = format!("{}{{r:{push_id}}}", self.prefix);
        vec![k.clone(), format!("{k}:ev"), format!("{k}:kept")]
    }
}

#[async_trait::async_trait]
impl ReceiptBackend for RedisReceipts {
    /// See [`crate::signed::receipt::lifecycle::begin`]; the lease is timed by Redis's
    /// clock. One EVALSHA.
    async fn begin(&self, new: &NewReceipt<'_>, now_ms: i64) -> StoreResult<Begun> {
        let push_id = new.push_id;
        let args: Vec<Value> = vec![
            new.hash.into(),
            new.signer.into(),
            new.topic.into(),
            now_ms.to_string().into(),
            new.ttl_ms.into(),
            new.targets.join(",").into(),
            new.claim.owner.into(),
            new.claim.lease_ms.into(),
            new.kept.map_or(Value::Bytes(Default::default()), |(b, _)| {
                Value::Bytes(bytes::Bytes::copy_from_slice(b))
            }),
            new.kept.map_or(0, |(_, ms)| ms).into(),
        ];
        let reply: Vec<Value> = run(&self.begin, &self.pool, self.keys(push_id), args)
            .await
            .map_err(err)?;
        match (reply.first().and_then(int), reply.as_slice()) {
            // New: the script made exactly what the pure function makes.
            (Some(0), _) => Ok(Begun::New(new.fresh(now_ms))),
            (Some(1), [_, fields, events, owned]) => receipt(push_id, fields, events)
                .map(|receipt| Begun::Replay {
                    receipt,
                    owned: int(owned) == Some(1),
                })
                .ok_or_else(|| bad("receipt_begin.lua")),
            (Some(2), _) => Ok(Begun::Conflict),
            _ => Err(bad("receipt_begin.lua")),
        }
    }

    /// See [`crate::signed::receipt::lifecycle::apply`]; publishes the new events. One
    /// EVALSHA.
    async fn update(&self, changes: &Changes<'_>, now_ms: i64) -> StoreResult<Updated> {
        let push_id = changes.push_id;
        let mut args: Vec<Value> = vec![
            now_ms.to_string().into(),
            changes.ttl_ms.into(),
            events_channel(&self.prefix, push_id).name().into(),
            match changes.guard {
                Guard::Always => "0",
                Guard::Lapsed => "1",
            }
            .into(),
        ];
        for u in changes.updates {
            args.push(u.target.as_str().into());
            args.push(u.state.as_str().into());
            args.push(u.detail.as_str().into());
        }
        let reply: Vec<Value> = run(&self.update, &self.pool, self.keys(push_id), args)
            .await
            .map_err(err)?;
        match (reply.first().and_then(int), reply.get(1).and_then(int)) {
            (Some(0), _) => Ok(Updated::Gone),
            (Some(2), _) => Ok(Updated::Held),
            (Some(1), Some(before)) => Ok(Updated::Applied(before as u64)),
            _ => Err(bad("receipt_update.lua")),
        }
    }

    /// The receipt, while kept. One EVALSHA.
    async fn get(&self, push_id: &str, _now_ms: i64) -> StoreResult<Option<Receipt>> {
        let reply: Vec<Value> = run(
            &self.get,
            &self.pool,
            self.keys(push_id),
            Vec::<Value>::new(),
        )
        .await
        .map_err(err)?;
        let [fields, events] = reply.as_slice() else {
            return Err(bad("receipt_get.lua"));
        };
        if pairs(fields).is_empty() {
            return Ok(None);
        }
        receipt(push_id, fields, events)
            .map(Some)
            .ok_or_else(|| bad("receipt_get.lua"))
    }

    /// One GET of `<prefix>{r:<push id>}:kept`, which Redis expires itself.
    async fn kept(&self, push_id: &str, _now_ms: i64) -> StoreResult<Option<Vec<u8>>> {
        let key = format!("{}{{r:{push_id}}}:kept", self.prefix);
        let v: Option<bytes::Bytes> = self.pool.next().get(key).await.map_err(err)?;
        Ok(v.map(|b| b.to_vec()))
    }
}
