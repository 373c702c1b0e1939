//! What every shared concern's store (receipts, signers, mailboxes) has in common, written
//! once: [`Concern`] holds the concern's backend (in process or Redis), the link to Redis
//! when there is one (every call then goes through it: counted as its [`StoreOp`], timed, and
//! failing while degraded, since these concerns need the shared store for their guarantees
//! and never fall back to one replica's memory), and the key prefix its channels live
//! under; [`InProcess`] is a concern's memory with the in-process fan-out its changes are
//! published on. Each concern adds its own calls in an `impl Concern<dyn ItsBackend>`.

use std::future::Future;
use std::sync::Arc;

use super::error::{StoreError, StoreOp};
use super::fanout::Fanout;
use super::link::Link;

/// One concern's store as the relay uses it.
#[derive(Debug)]
pub struct Concern<B: ?Sized> {
    backend: Box<B>,
    /// The link to Redis, `None` in process.
    link: Option<Arc<Link>>,
    prefix: String,
}

impl<B: ?Sized> Concern<B> {
    /// The concern on `backend`; `link` and `prefix` when it is Redis.
    pub(crate) fn new(backend: Box<B>, link: Option<Arc<Link>>, prefix: &str) -> Self {
        Self {
            backend,
            link,
            prefix: prefix.to_owned(),
        }
    }

    /// The key prefix (empty in process).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The backend itself, for what needs no round trip (the in-process sweep).
    pub(crate) fn backend(&self) -> &B {
        &self.backend
    }

    /// One call of the backend as `op`: through the link when on Redis.
    pub(crate) async fn call<'a, T, F>(
        &'a self,
        op: StoreOp,
        call: impl FnOnce(&'a B) -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>> + 'a,
    {
        Link::shared(self.link.as_deref(), op, call(&self.backend)).await
    }
}

/// A concern's memory, and the in-process fan-out its changes are published on.
#[derive(Debug)]
pub struct InProcess<M> {
    pub(crate) memory: M,
    pub(crate) fanout: Fanout,
}

impl<M: Default> InProcess<M> {
    /// Fresh memory whose changes go to `fanout`.
    pub fn new(fanout: Fanout) -> Self {
        Self {
            memory: M::default(),
            fanout,
        }
    }
}
