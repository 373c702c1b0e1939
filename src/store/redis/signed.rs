//! Receipts and signers of signed pushes in Redis (semantics in
//! [`crate::store::receipts`] and [`crate::store::signers`]). A receipt is two keys under
//! its push's hash tag, `<prefix>{r:<push id>}` and `...:ev`, and its events are published
//! on `<prefix>{r:<push id>}:events` from the same script, sharded on the same slot. Signers
//! share one hash tag, `<prefix>{signers}`, and every change is published on the global
//! channel `<prefix>signers`.

use std::collections::HashMap;

use fred::prelude::*;
use fred::types::scripts::Script;

use super::client::err;
use crate::signed::enrolment::{Enrolled, Signer};
use crate::signed::receipt::lifecycle::{
    Begun, Claim, Event, Guard, NewReceipt, Receipt, State, Target, Update, Updated,
};
use crate::store::common::StoreError;
use crate::store::receipts::{events_channel, ReceiptBackend};
use crate::store::signers::{signers_channel, SignerBackend};

/// The scripts and key names.
pub struct Signed {
    pool: Pool,
    prefix: String,
    begin: Script,
    update: Script,
    get: Script,
    enroll: Script,
    revoke: Script,
    list: Script,
}

impl std::fmt::Debug for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signed")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    text(v)?.parse().ok()
}

fn pairs(v: &Value) -> HashMap<String, String> {
    let mut out = HashMap::new();
    match v {
        Value::Array(items) => {
            for kv in items.chunks(2) {
                if let [k, v] = kv {
                    if let (Some(k), Some(v)) = (text(k), text(v)) {
                        out.insert(k, v);
                    }
                }
            }
        }
        Value::Map(m) => {
            for (k, v) in m.clone().inner() {
                if let (Some(k), Some(v)) = (k.as_str().map(|s| s.to_string()), text(&v)) {
                    out.insert(k, v);
                }
            }
        }
        _ => {}
    }
    out
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

fn signer(key_id: &str, fields: &Value) -> Option<Signer> {
    let f = pairs(fields);
    Some(Signer {
        key_id: key_id.to_owned(),
        public_key: f.get("pk")?.clone(),
        topics: f
            .get("tp")?
            .split('\n')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        created_ms: f.get("c")?.parse().ok()?,
        updated_ms: f.get("u")?.parse().ok()?,
        revoked_ms: f.get("r").and_then(|r| r.parse().ok()),
    })
}

fn bad(what: &str) -> StoreError {
    StoreError::Redis(format!("unexpected reply from {what}"))
}

impl Signed {
    /// The scripts over this pool, under this key prefix.
    pub fn new(pool: Pool, prefix: &str) -> Self {
        Self {
            pool,
            prefix: prefix.to_owned(),
            begin: Script::from_lua(include_str!("receipt_begin.lua")),
            update: Script::from_lua(include_str!("receipt_update.lua")),
            get: Script::from_lua(include_str!("receipt_get.lua")),
            enroll: Script::from_lua(include_str!("signer_enroll.lua")),
            revoke: Script::from_lua(include_str!("signer_revoke.lua")),
            list: Script::from_lua(include_str!("signer_list.lua")),
        }
    }

    fn receipt_keys(&self, push_id: &str) -> Vec<String> {
        let k = format!("{}{{r:{push_id}}}", self.prefix);
        vec![k.clone(), format!("{k}:ev")]
    }

    /// The channel a push's events are published on.
    pub fn events_channel(&self, push_id: &str) -> String {
        events_channel(&self.prefix, push_id).name().to_owned()
    }

    /// The channel signer changes are published on.
    pub fn signers_channel(&self) -> String {
        signers_channel(&self.prefix).name().to_owned()
    }

    fn signer_key(&self, key_id: &str) -> String {
        format!("{}{{signers}}:{key_id}", self.prefix)
    }

    fn signer_index(&self) -> String {
        format!("{}{{signers}}:index", self.prefix)
    }

    /// See [`crate::signed::receipt::lifecycle::begin`]; the lease is timed by Redis's
    /// clock. One EVALSHA.
    pub async fn begin(
        &self,
        new: &NewReceipt<'_>,
        claim: &Claim<'_>,
        now_ms: i64,
    ) -> Result<Begun, StoreError> {
        let push_id = new.push_id;
        let args: Vec<Value> = vec![
            new.hash.into(),
            new.signer.into(),
            new.topic.into(),
            now_ms.to_string().into(),
            new.ttl_ms.into(),
            new.targets.join(",").into(),
            claim.owner.into(),
            claim.lease_ms.into(),
        ];
        let reply: Vec<Value> = self
            .begin
            .evalsha_with_reload(self.pool.next(), self.receipt_keys(push_id), args)
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
    pub async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError> {
        let mut args: Vec<Value> = vec![
            now_ms.to_string().into(),
            ttl_ms.into(),
            self.events_channel(push_id).into(),
            match guard {
                Guard::Always => "0",
                Guard::Lapsed => "1",
            }
            .into(),
        ];
        for u in updates {
            args.push(u.target.as_str().into());
            args.push(u.state.as_str().into());
            args.push(u.detail.as_str().into());
        }
        let reply: Vec<Value> = self
            .update
            .evalsha_with_reload(self.pool.next(), self.receipt_keys(push_id), args)
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
    pub async fn get(&self, push_id: &str) -> Result<Option<Receipt>, StoreError> {
        let reply: Vec<Value> = self
            .get
            .evalsha_with_reload(
                self.pool.next(),
                self.receipt_keys(push_id),
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

    /// One signer. One HGETALL.
    pub async fn signer(&self, key_id: &str) -> Result<Option<Signer>, StoreError> {
        let fields: Value = self
            .pool
            .next()
            .hgetall(self.signer_key(key_id))
            .await
            .map_err(err)?;
        if pairs(&fields).is_empty() {
            return Ok(None);
        }
        signer(key_id, &fields)
            .map(Some)
            .ok_or_else(|| bad("a signer's hash"))
    }

    /// Enrols or updates, and publishes the change.
    pub async fn enroll(
        &self,
        key_id: &str,
        public_key: &str,
        topics: &[String],
        now_ms: i64,
    ) -> Result<(Signer, Enrolled), StoreError> {
        let args: Vec<Value> = vec![
            key_id.into(),
            public_key.into(),
            topics.join("\n").into(),
            now_ms.to_string().into(),
            self.signers_channel().into(),
        ];
        let reply: Vec<Value> = self
            .enroll
            .evalsha_with_reload(
                self.pool.next(),
                vec![self.signer_key(key_id), self.signer_index()],
                args,
            )
            .await
            .map_err(err)?;
        let [existed, fields] = reply.as_slice() else {
            return Err(bad("signer_enroll.lua"));
        };
        let s = signer(key_id, fields).ok_or_else(|| bad("signer_enroll.lua"))?;
        let how = if int(existed) == Some(1) {
            Enrolled::Updated
        } else {
            Enrolled::Created
        };
        Ok((s, how))
    }

    /// Revokes and publishes; `None` for an unknown key id.
    pub async fn revoke(&self, key_id: &str, now_ms: i64) -> Result<Option<Signer>, StoreError> {
        let args: Vec<Value> = vec![
            key_id.into(),
            now_ms.to_string().into(),
            self.signers_channel().into(),
        ];
        let fields: Value = self
            .revoke
            .evalsha_with_reload(self.pool.next(), vec![self.signer_key(key_id)], args)
            .await
            .map_err(err)?;
        if pairs(&fields).is_empty() {
            return Ok(None);
        }
        signer(key_id, &fields)
            .map(Some)
            .ok_or_else(|| bad("signer_revoke.lua"))
    }

    /// Every signer, by key id.
    pub async fn list(&self) -> Result<Vec<Signer>, StoreError> {
        let reply: Vec<Value> = self
            .list
            .evalsha_with_reload(
                self.pool.next(),
                vec![self.signer_index()],
                vec![Value::from(format!("{}{{signers}}:", self.prefix))],
            )
            .await
            .map_err(err)?;
        let mut out: Vec<Signer> = reply
            .chunks(2)
            .filter_map(|kv| match kv {
                [id, fields] => signer(&text(id)?, fields),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        Ok(out)
    }
}

#[async_trait::async_trait]
impl ReceiptBackend for Signed {
    async fn begin(
        &self,
        new: &NewReceipt<'_>,
        claim: &Claim<'_>,
        now_ms: i64,
    ) -> Result<Begun, StoreError> {
        Signed::begin(self, new, claim, now_ms).await
    }

    async fn update(
        &self,
        push_id: &str,
        updates: &[Update],
        guard: Guard,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Updated, StoreError> {
        Signed::update(self, push_id, updates, guard, now_ms, ttl_ms).await
    }

    async fn get(&self, push_id: &str, _now_ms: i64) -> Result<Option<Receipt>, StoreError> {
        Signed::get(self, push_id).await
    }
}

#[async_trait::async_trait]
impl SignerBackend for Signed {
    async fn get(&self, key_id: &str) -> Result<Option<Signer>, StoreError> {
        self.signer(key_id).await
    }

    async fn enroll(
        &self,
        key_id: &str,
        public_key: &str,
        topics: &[String],
        now_ms: i64,
    ) -> Result<(Signer, Enrolled), StoreError> {
        Signed::enroll(self, key_id, public_key, topics, now_ms).await
    }

    async fn revoke(&self, key_id: &str, now_ms: i64) -> Result<Option<Signer>, StoreError> {
        Signed::revoke(self, key_id, now_ms).await
    }

    async fn list(&self) -> Result<Vec<Signer>, StoreError> {
        Signed::list(self).await
    }
}
