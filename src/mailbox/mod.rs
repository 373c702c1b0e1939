//! Mailboxes for apps (`/v1/<app>/mailbox/<id>/...`, `MAILBOX.md` and the spec's
//! extensions): two devices of a link exchange sealed envelopes through the relay, which
//! stores opaque bytes and keeps only the SHA-256 of the link's bearer.
//!
//! - [`state`]: a mailbox and the rules every request follows, as plain types and pure
//!   functions (the store runs them: [`crate::store::mailbox`]);
//! - [`api`]: the router and the HTTP handlers, one store round trip each;
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
//! trip every handler shares is [`Mailboxes::run`], in `front` with the front-end's
//! settings, below every handler.
//!
//! Every limit is the store's, so it holds across replicas; every live socket listens on
//! the mailbox's fan-out channel, so a write or an erase on any replica reaches it.

pub mod api;
pub mod auth;
pub mod close;
pub mod error;
mod front;
pub mod ice;
pub mod path;
mod places;
pub mod push;
pub mod query;
pub mod route;
pub mod signal;
pub mod socket;
pub mod state;
pub mod watch;

pub use front::{App, Mailboxes, Settings, Sockets};

/// The mailbox routes: everything under `/v1/`.
pub fn routes(m: std::sync::Arc<Mailboxes>) -> axum::Router {
    api::router(m)
}
