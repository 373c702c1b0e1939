//! Mailboxes for apps (`/v1/<app>/mailbox/<id>/...`, `MAILBOX.md` and the spec's
//! extensions): two devices of a link exchange sealed envelopes through the relay, which
//! stores opaque bytes and keeps only the SHA-256 of the link's bearer.
//!
//! - [`api`]: the router and the HTTP handlers, one store round trip each
//!   ([`crate::store::mailbox`]);
//! - [`route`]: the routes as the metrics label them;
//! - [`path`]: the request's path into a [`path::Target`], or the relay's one 404, before any
//!   authentication;
//! - [`query`]: the query, percent-decoded, into the route's own type;
//! - [`auth`]: the bearer, from `Authorization` or the `zerobyte.bearer.<token>`
//!   subprotocol;
//! - `socket`: the upgrade checks the two sockets share;
//! - [`watch`]: the watch WebSocket (`seq <n>` from any replica, `ping`/`pong`, the
//!   foreground);
//! - [`signal`]: the signal rendezvous across replicas (presence, replacement, frames) and
//!   the close codes of both sockets;
//! - [`push`]: registrations (checked by the service's module, sealed at rest) and the
//!   best-effort push after a write;
//! - [`ice`]: STUN/TURN credentials (STUN, coturn's REST scheme, Cloudflare Realtime);
//! - [`error`]: the spec's error shape.
//!
//! The modules import downwards only: `api` routes to `watch` and `signal`, both use
//! `socket`; `route`, `path`, `query`, `auth` and `error` are leaves; the one store round
//! trip every handler shares is [`Mailboxes::run`], here.
//!
//! Every limit is the store's, so it holds across replicas; every live socket listens on
//! the mailbox's fan-out channel, so a write or an erase on any replica reaches it.

pub mod api;
pub mod auth;
pub mod error;
pub mod ice;
pub mod path;
pub mod push;
pub mod query;
pub mod route;
pub mod signal;
mod socket;
pub mod watch;

use std::sync::Arc;

use tokio::sync::watch as stop_watch;

use crate::clock::Clock;
use crate::store::mailbox::{Answer, Limits, Name, Op};
use crate::store::Store;

use auth::Bearer;
use error::MailboxError;

/// One app served mailboxes (`RELAY_APPS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// 1 to 32 of `[a-z0-9-]`, starting with a letter.
    pub name: String,
    /// The APNs topic of its pushes (`push=<topic>`); `None`: no push extension.
    pub push: Option<String>,
    /// The signal extension.
    pub signal: bool,
    /// The ICE extension.
    pub ice: bool,
}

/// The mailbox front-end's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The apps served; none: every `/v1/...` path is 404.
    pub apps: Vec<App>,
    /// Idle expiry and the envelopes a direction holds.
    pub limits: Limits,
    /// The largest envelope, bytes.
    pub max_envelope_bytes: usize,
}

/// The mailbox front-end.
pub struct Mailboxes {
    settings: Settings,
    store: Arc<Store>,
    clock: Clock,
    modules: push::Modules,
    ice: Option<ice::Ice>,
    stop: stop_watch::Receiver<bool>,
}

impl std::fmt::Debug for Mailboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailboxes")
            .field("apps", &self.settings.apps)
            .finish_non_exhaustive()
    }
}

impl Mailboxes {
    /// The front-end over `store`, pushing through `modules`, handing out ICE credentials
    /// through `ice` (when a provider is configured); its sockets close (1001) when `stop`
    /// turns true.
    pub fn new(
        settings: Settings,
        store: Arc<Store>,
        clock: Clock,
        modules: push::Modules,
        ice: Option<ice::Ice>,
        stop: stop_watch::Receiver<bool>,
    ) -> Self {
        crate::metrics::register_mailbox(crate::metrics::MailboxLabels {
            routes: &route::Route::ALL.map(route::Route::as_str),
            statuses: &route::Route::USUAL_STATUSES,
            buckets: crate::store::mailbox::BUCKET_LABELS,
            services: &push::ServiceLabel::ALL.map(push::ServiceLabel::as_str),
            outcomes: &push::PushOutcome::ALL.map(push::PushOutcome::as_str),
            sockets: &socket::Kind::ALL.map(socket::Kind::as_str),
            closes: &signal::Close::ALL.map(signal::Close::as_str),
        });
        Self {
            settings,
            store,
            clock,
            modules,
            ice,
            stop,
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// One store round trip; the answers every route shares mapped to their errors.
    async fn run(&self, name: &Name, bearer: &Bearer, op: &Op) -> Result<Answer, MailboxError> {
        let answer = self
            .store
            .mailboxes()
            .apply(name, bearer.hash(), op, self.now_ms(), self.settings.limits)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "mailbox: the shared store did not answer");
                MailboxError::Unavailable
            })?;
        match answer {
            Answer::NotFound => Err(MailboxError::NotFound),
            Answer::Forbidden => Err(MailboxError::Forbidden),
            Answer::RateLimited(s) => {
                if let Some(b) = op.bucket() {
                    crate::metrics::mailbox_rate_limited(b.label());
                }
                Err(MailboxError::RateLimited(s))
            }
            a => Ok(a),
        }
    }
}

/// The mailbox routes: everything under `/v1/`.
pub fn routes(m: Arc<Mailboxes>) -> axum::Router {
    api::router(m)
}
