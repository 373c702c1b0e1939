//! Signers in Redis (what they mean: [`crate::store::signers`]): one hash per key id and an
//! index, all under the hash tag `<prefix>{signers}`; every change is published on the
//! global channel `<prefix>signers` by the script that makes it.

use fred::prelude::*;
use fred::types::scripts::Script;

use super::backend::{signers_channel, SignerBackend};
use crate::signed::enrolment::{Enrolled, Enrolment, Signer};
use crate::store::connection::client::{err, run};
use crate::store::connection::reply::{bad, int, pairs, text};
use crate::store::error::StoreResult;

/// The signer scripts over one pool, under one key prefix.
pub struct RedisSigners {
    pool: Pool,
    prefix: String,
    enroll: Script,
    revoke: Script,
    list: Script,
}

impl std::fmt::Debug for RedisSigners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSigners")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The signer a hash holds, `None` for an empty one (no such signer); `what` names the
/// reply's source when it cannot be read.
fn kept(key_id: &str, fields: &Value, what: &str) -> StoreResult<Option<Signer>> {
    if pairs(fields).is_empty() {
        return Ok(None);
    }
    signer(key_id, fields).map(Some).ok_or_else(|| bad(what))
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

impl RedisSigners {
    /// The scripts over this pool, under this key prefix.
    pub fn new(pool: Pool, prefix: &str) -> Self {
        Self {
            pool,
            prefix: prefix.to_owned(),
            enroll: Script::from_lua(include_str!("signer_enroll.lua")),
            revoke: Script::from_lua(include_str!("signer_revoke.lua")),
            list: Script::from_lua(include_str!("signer_list.lua")),
        }
    }

    fn channel(&self) -> String {
        signers_channel(&self.prefix).name().to_owned()
    }

    fn key(&self, key_id: &str) -> String {
        format!("{}{{signers}}:{key_id}", self.prefix)
    }

    fn index(&self) -> String {
        format!("{}{{signers}}:index", self.prefix)
    }
}

#[async_trait::async_trait]
impl SignerBackend for RedisSigners {
    /// One signer. One HGETALL.
    async fn get(&self, key_id: &str) -> StoreResult<Option<Signer>> {
        let fields: Value = self
            .pool
            .next()
            .hgetall(self.key(key_id))
            .await
            .map_err(err)?;
        kept(key_id, &fields, "a signer's hash")
    }

    /// Enrols or updates, and publishes the change.
    async fn enroll(&self, e: &Enrolment<'_>, now_ms: i64) -> StoreResult<(Signer, Enrolled)> {
        let key_id = e.key_id;
        let args: Vec<Value> = vec![
            key_id.into(),
            e.public_key.into(),
            e.topics.join("\n").into(),
            now_ms.to_string().into(),
            self.channel().into(),
        ];
        let reply: Vec<Value> = run(
            &self.enroll,
            &self.pool,
            vec![self.key(key_id), self.index()],
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
    async fn revoke(&self, key_id: &str, now_ms: i64) -> StoreResult<Option<Signer>> {
        let args: Vec<Value> = vec![
            key_id.into(),
            now_ms.to_string().into(),
            self.channel().into(),
        ];
        let fields: Value = run(&self.revoke, &self.pool, vec![self.key(key_id)], args)
            .await
            .map_err(err)?;
        kept(key_id, &fields, "signer_revoke.lua")
    }

    /// Every signer, by key id.
    async fn list(&self) -> StoreResult<Vec<Signer>> {
        let reply: Vec<Value> = run(
            &self.list,
            &self.pool,
            vec![self.index()],
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
