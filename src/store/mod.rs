//! Where shared state lives: one folder per concern, each with its backend trait, its
//! in-process implementation (`memory.rs`) and its Redis one (`redis.rs`, with its Lua
//! scripts) side by side, and the store the relay uses in its `mod.rs`:
//!
//! - [`Store::policy`] ([`policy`]): per-device policy state; both backends run the same
//!   policy ([`crate::policy`]) atomically per device: in process under a lock, in Redis as
//!   one Lua script;
//! - [`Store::queue`] ([`queue`]): the retry queue; claims are fenced, items sealed;
//! - [`Store::receipts`] ([`receipts`]) and [`Store::signers`] ([`signers`]): the signed-push
//!   API's state;
//! - [`Store::mailboxes`] ([`mailbox`]): mailboxes;
//! - [`Store::fanout`] ([`fanout`]): "tell every replica", for live streams. What a change
//!   must tell (receipt events, signer changes, mailbox events) is published by the backend
//!   that makes the change, from inside it, on both backends alike: by the Lua script on
//!   Redis, by the in-process implementation right after its lock.
//!
//! What the concerns share: the error and the operation labels ([`error`]), the link to
//! Redis with its degrade switch ([`link`]), the wrapper of the concerns that never fall
//! back to memory ([`concern`]), and the connection to Redis ([`connection`]); none of them
//! imports this module.
//!
//! **Redis outages.** With `RELAY_REDIS_FAILURE=degrade` (the default) a Redis error or
//! timeout on a policy operation switches this replica to its in-process store at once:
//! paging goes on with per-replica decisions, the degraded gauge is set, one line is logged,
//! and a background probe switches back when Redis answers again. Retry items queued in
//! process meanwhile are handed to Redis when it answers again and at shutdown
//! ([`queue::RetryQueue::flush_local`]). With `reject` the request is answered 503.
//! Receipts, signers and mailboxes never fall back: while degraded they fail.
//!
//! Round trips: one per admission on the happy path; the others happen only on their
//! events (a refusal, a queued forward, a fallback, a busy client).

pub mod concern;
pub mod connection;
pub mod error;
pub mod fanout;
pub mod link;
pub mod mailbox;
pub mod policy;
pub mod queue;
pub mod receipts;
pub mod signers;

use std::sync::Arc;

use crate::policy::Policy;

pub use error::{DecodeKind, StoreError, StoreOp};
pub use link::RedisFailure;
pub use policy::{Admission, AlertKey, Mark};
pub use queue::{Batch, Lease};

/// The store's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Redis, or the in-process store when `None`.
    pub redis: Option<connection::RedisSettings>,
    /// What a replica does when Redis fails.
    pub on_failure: RedisFailure,
    /// The retry queue's sealing key (from `RELAY_QUEUE_KEY` or the APNs key); without one
    /// nothing is queued in Redis.
    pub queue_key: Option<queue::QueueKey>,
}

/// The state the relay uses: one store per concern.
#[derive(Debug)]
pub struct Store {
    policy: policy::PolicyStore,
    queue: queue::RetryQueue,
    receipts: receipts::ReceiptStore,
    signers: signers::SignerStore,
    mailboxes: mailbox::MailboxStore,
    fanout: fanout::Fanout,
    /// The link to Redis, `None` in process.
    link: Option<Arc<link::Link>>,
}

impl Store {
    /// In-process state only: one replica.
    pub fn memory(policy: Policy) -> Self {
        let fanout = fanout::Fanout::memory();
        Self {
            policy: policy::PolicyStore::memory(policy),
            queue: queue::RetryQueue::memory(),
            receipts: receipts::ReceiptStore::new(
                Box::new(receipts::InProcessReceipts::new(fanout.clone())),
                None,
                "",
            ),
            signers: signers::SignerStore::new(
                Box::new(signers::InProcessSigners::new(fanout.clone())),
                None,
                "",
            ),
            mailboxes: mailbox::MailboxStore::new(
                Box::new(mailbox::InProcessMailboxes::new(fanout.clone())),
                None,
                "",
            ),
            fanout,
            link: None,
        }
    }

    /// Shared state in Redis, with the in-process store as the fallback. `queue` is the
    /// shared retry queue (absent when this deployment cannot deliver, so never queues).
    pub fn redis(
        store: connection::RedisStore,
        queue: Option<queue::RedisQueue>,
        fanout: fanout::Fanout,
        policy: Policy,
        on_failure: RedisFailure,
    ) -> Self {
        let prefix = store.prefix().to_owned();
        let pool = store.pool().clone();
        let link = Arc::new(link::Link::new(pool.clone(), on_failure));
        Self {
            receipts: receipts::ReceiptStore::new(
                Box::new(receipts::RedisReceipts::new(pool.clone(), &prefix)),
                Some(link.clone()),
                &prefix,
            ),
            signers: signers::SignerStore::new(
                Box::new(signers::RedisSigners::new(pool.clone(), &prefix)),
                Some(link.clone()),
                &prefix,
            ),
            mailboxes: mailbox::MailboxStore::new(
                Box::new(mailbox::RedisMailboxes::new(pool.clone(), &prefix)),
                Some(link.clone()),
                &prefix,
            ),
            queue: queue::RetryQueue::shared(
                queue.map(|q| Box::new(q) as Box<dyn queue::QueueBackend>),
                link.clone(),
            ),
            policy: policy::PolicyStore::redis(store, link.clone(), policy),
            fanout,
            link: Some(link),
        }
    }

    /// `memory`, `redis` or `memory-degraded`, for traces and logs.
    pub fn kind(&self) -> &'static str {
        match &self.link {
            None => "memory",
            Some(_) if self.degraded() => "memory-degraded",
            Some(_) => "redis",
        }
    }

    /// Whether this replica currently runs on its in-process store because Redis failed.
    pub fn degraded(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.degraded())
    }

    /// Whether the store can serve: always without Redis; with Redis once it has answered
    /// (or while degraded, which serves from memory).
    pub fn ready(&self) -> bool {
        self.policy.redis_ready().unwrap_or(true) || self.degraded()
    }

    /// This store deciding on `memory` while degraded: another core's in-process policy
    /// state (see [`policy::PolicyStore::sharing_memory`]).
    pub(crate) fn sharing_policy_memory(mut self, memory: Arc<policy::MemoryStore>) -> Self {
        self.policy = self.policy.sharing_memory(memory);
        self
    }

    /// Per-device policy state.
    pub fn policy(&self) -> &policy::PolicyStore {
        &self.policy
    }

    /// The retry queue.
    pub fn queue(&self) -> &queue::RetryQueue {
        &self.queue
    }

    /// Signed pushes' receipts.
    pub fn receipts(&self) -> &receipts::ReceiptStore {
        &self.receipts
    }

    /// Signed pushes' signers.
    pub fn signers(&self) -> &signers::SignerStore {
        &self.signers
    }

    /// Mailboxes.
    pub fn mailboxes(&self) -> &mailbox::MailboxStore {
        &self.mailboxes
    }

    /// The fan-out seam.
    pub fn fanout(&self) -> &fanout::Fanout {
        &self.fanout
    }
}

#[cfg(test)]
mod tests;
