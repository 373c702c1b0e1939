//! Mailboxes in Redis (semantics in [`crate::mailbox::state`]): every request is one
//! EVALSHA of `mailbox.lua`, over five keys under the mailbox's hash tag
//! `<prefix>{mb:<name>}` (so it runs unchanged on a Cluster), and the script publishes what
//! live sockets must hear (a `MailboxEvent`: `seq <dir> <n>` after a store, `erase`) on the mailbox's sharded
//! channel `<prefix>{mb:<name>}:ev` from inside the same script.

use bytes::Bytes;
use fred::prelude::*;
use fred::types::scripts::Script;

use super::backend::{event_channel, MailboxBackend};
use crate::mailbox::state::{Answer, Envelope, Name, Op, PushDecision, Request};
use crate::store::connection::client::{err, run, with_gcra, GCRA_LUA};
use crate::store::error::StoreError;

/// The mailbox script exactly as the relay loads it (the benchmark measures Redis's ceiling
/// with it).
pub fn mailbox_lua() -> String {
    format!("{}{}", GCRA_LUA, include_str!("mailbox.lua"))
}

/// The script and key names.
pub struct RedisMailboxes {
    pool: Pool,
    prefix: String,
    script: Script,
    /// Whether requests are timed by the caller's `now_ms` rather than the store's clock.
    caller_clock: bool,
}

impl std::fmt::Debug for RedisMailboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMailboxes")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn bytes_of(v: &Value) -> Option<Bytes> {
    match v {
        Value::Bytes(b) => Some(b.clone()),
        Value::String(s) => Some(Bytes::copy_from_slice(s.as_bytes())),
        _ => None,
    }
}

fn int_of(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) => u64::try_from(*i).ok(),
        other => std::str::from_utf8(&bytes_of(other)?).ok()?.parse().ok(),
    }
}

fn bad() -> StoreError {
    StoreError::Redis("unexpected reply from mailbox.lua".to_owned())
}

impl RedisMailboxes {
    /// The script over this pool, under this key prefix.
    pub fn new(pool: Pool, prefix: &str) -> Self {
        Self::timed(pool, prefix, false)
    }

    /// [`RedisMailboxes::new`], or with `caller_clock` timing each request by the caller's
    /// `now_ms` instead of the store's clock (Redis `TIME`, read inside the script): for
    /// tests that drive time, such as the differential test against the in-process
    /// mailboxes. The relay never does: a replica whose clock is off must not decide a
    /// bucket, a foreground window or a generation.
    pub fn timed(pool: Pool, prefix: &str, caller_clock: bool) -> Self {
        Self {
            pool,
            prefix: prefix.to_owned(),
            script: with_gcra(include_str!("mailbox.lua")),
            caller_clock,
        }
    }

    /// The mailbox's keys (see `mailbox.lua`).
    pub fn keys(&self, name: &Name) -> Vec<String> {
        let k = format!("{}{{mb:{}}}", self.prefix, name.as_str());
        vec![
            k.clone(),
            format!("{k}:e:p2c"),
            format!("{k}:e:c2p"),
            format!("{k}:s:p2c"),
            format!("{k}:s:c2p"),
        ]
    }

    /// The mailbox's channel.
    pub fn channel(&self, name: &Name) -> String {
        event_channel(&self.prefix, name).name().to_owned()
    }
}

#[async_trait::async_trait]
impl MailboxBackend for RedisMailboxes {
    /// One request. One EVALSHA.
    async fn apply(&self, req: &Request<'_>, now_ms: i64) -> Result<Answer, StoreError> {
        let (verb, rest): (&str, Vec<Value>) = match req.op {
            Op::Claim => ("claim", vec![]),
            Op::Erase => ("erase", vec![]),
            Op::Put {
                dir,
                seq,
                data,
                notify,
            } => (
                "put",
                vec![
                    dir.as_str().into(),
                    seq.to_string().into(),
                    Value::Bytes(data.clone()),
                    if *notify { "1" } else { "0" }.into(),
                ],
            ),
            Op::List { dir, after, limit } => (
                "list",
                vec![
                    dir.as_str().into(),
                    after.to_string().into(),
                    limit.to_string().into(),
                ],
            ),
            Op::Get { dir, seq } => ("get", vec![dir.as_str().into(), seq.to_string().into()]),
            Op::Head { dir } => ("head", vec![dir.as_str().into()]),
            Op::Prune { dir, upto } => {
                ("prune", vec![dir.as_str().into(), upto.to_string().into()])
            }
            Op::PruneMore { dir, upto } => (
                "prunemore",
                vec![dir.as_str().into(), upto.to_string().into()],
            ),
            Op::Register { dir, sealed } => (
                "register",
                vec![dir.as_str().into(), Value::Bytes(sealed.clone())],
            ),
            Op::Unregister { dir } => ("unregister", vec![dir.as_str().into()]),
            Op::Forget { dir, sealed } => (
                "forget",
                vec![dir.as_str().into(), Value::Bytes(sealed.clone())],
            ),
            Op::Socket => ("socket", vec![]),
            Op::Check => ("check", vec![]),
            Op::Unping { dir } => ("unping", vec![dir.as_str().into()]),
            Op::SignalOpen { side } => ("sigopen", vec![side.as_str().into()]),
            Op::SignalSpend {
                side,
                socket,
                relayed,
            } => (
                "sigspend",
                vec![
                    side.as_str().into(),
                    socket.to_string().into(),
                    relayed.to_string().into(),
                ],
            ),
            Op::Ping { dir } => ("ping", vec![dir.as_str().into()]),
            Op::Ice => ("ice", vec![]),
        };
        let mut args: Vec<Value> = vec![
            verb.into(),
            req.bearer.into(),
            if self.caller_clock {
                now_ms.to_string()
            } else {
                String::new()
            }
            .into(),
            req.limits.idle_ms.to_string().into(),
            req.limits.max_envelopes.to_string().into(),
            self.channel(req.name).into(),
        ];
        args.extend(rest);
        let reply: Vec<Value> = run(&self.script, &self.pool, self.keys(req.name), args)
            .await
            .map_err(err)?;
        let code = reply.first().and_then(int_of).ok_or_else(bad)?;
        Ok(match code {
            0 => Answer::NotFound,
            1 => Answer::Forbidden,
            2 => Answer::RateLimited(reply.get(1).and_then(int_of).ok_or_else(bad)?),
            3 => Answer::Created,
            4 => Answer::Claimed,
            5 => Answer::Stored(match reply.get(1).and_then(int_of) {
                Some(0) => PushDecision::NotAsked,
                Some(1) => PushDecision::Foreground,
                Some(2) => PushDecision::Throttled,
                Some(3) => PushDecision::Unregistered,
                Some(4) => PushDecision::Send(reply.get(2).and_then(bytes_of).ok_or_else(bad)?),
                _ => return Err(bad()),
            }),
            6 => Answer::Same,
            7 => Answer::Conflict,
            8 => Answer::Full,
            9 => {
                let last = reply.get(1).and_then(int_of).ok_or_else(bad)?;
                let more = reply.get(2).and_then(int_of).ok_or_else(bad)? == 1;
                let envelopes = reply[3..]
                    .chunks(2)
                    .map(|kv| match kv {
                        [s, d] => Some(Envelope {
                            seq: int_of(s)?,
                            data: bytes_of(d)?,
                        }),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(bad)?;
                Answer::Listed {
                    envelopes,
                    last,
                    more,
                }
            }
            10 => Answer::Got(reply.get(1).and_then(bytes_of)),
            11 => Answer::Head {
                last: reply.get(1).and_then(int_of).ok_or_else(bad)?,
                count: reply.get(2).and_then(int_of).ok_or_else(bad)?,
            },
            12 => Answer::Done,
            13 => Answer::SignalOpened {
                socket: reply.get(1).and_then(int_of).ok_or_else(bad)?,
                generation: reply.get(2).and_then(int_of).ok_or_else(bad)?,
            },
            14 => Answer::Opened(reply.get(1).and_then(int_of).ok_or_else(bad)?),
            15 => Answer::More,
            16 => Answer::Replaced,
            _ => return Err(bad()),
        })
    }
}
