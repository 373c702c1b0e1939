//! sealrelay: a push relay that is not a trusted party.
//!
//! Senders seal every message end to end; the relay routes ciphertexts, applies policy, and
//! wakes devices through a push service. The folders follow the data flow, and imports
//! point one way, from the front-ends down to the leaves:
//!
//! ```text
//!   app  (wiring, listeners, drain)          config (one file per section)
//!    |                                          | builds each component's Settings
//!    +-- v1/  mailbox/  signed/  admin/        (front-ends: parsing, routes, their errors)
//!    |      \       |        /
//!    |        delivery/     (admit, push, settle one notification; the retry worker)
//!    |        /      \
//!    |   store/      push/   (state: memory | redis, queue, fan-out;  services: apns, fcm)
//!    |      |           |
//!    |   policy/        |    (pure: the device policy, GCRA)
//!    |      \          /
//!   leaves: device, metrics, secret, clock, body, telemetry
//! ```
//!
//! - [`v1`]: relay protocol v1 for cronstable daemons (`POST /`, the hosted pages);
//! - `signed`: signed, idempotent pushes with receipts (`/v2/pushes`); the receipt's
//!   lifecycle (states, lease, takeover, settlement) as pure rules in
//!   `signed::receipt::lifecycle`;
//! - `mailbox`: mailboxes for apps: envelopes, watch and signal sockets, push modules, ICE
//!   credentials (`/v1/<app>/mailbox/...`); a mailbox and the rules every request follows as
//!   pure rules in `mailbox::state`;
//! - `admin`: the probes and metrics listener, and the admin API on its Unix socket (and
//!   opt-in loopback TCP);
//! - `delivery`: one alert from admission to settlement, and the retry worker; one
//!   `Outcome` vocabulary for every way a request ends; a front-end that wants to hear how
//!   its queued deliveries end implements `delivery::Settlement` (signed pushes do, for their
//!   receipts), so the core knows no front-end's vocabulary;
//! - `push`: the `Push` trait and verdict classes; `push::apns` speaks APNs, `push::fcm`
//!   FCM HTTP v1;
//! - `store`: shared state, one folder per concern (policy, queue, receipts, signers,
//!   mailboxes, fan-out), each with its backend trait and its in-process and Redis
//!   implementations side by side (the Lua next to the Rust that loads it); storage only
//!   (the rules are the features'); the connection to Redis in `store::connection`;
//! - `policy`: the delivery policy as pure functions of state, time and parameters;
//! - [`config`]: start-up validation; components own their settings types and never import
//!   it, so configuration depends on components and not the other way round;
//! - `body`: request bodies read to a limit and a deadline, for every front-end;
//! - `metrics` (names and record functions, importing nothing of the crate) and
//!   [`telemetry`] (logs and traces, from its own settings);
//! - `testing` (the `testing` feature only): what the benchmark, the fuzz targets and the
//!   integration tests drive directly; never in the relay's own build.
//!
//! A feature's pure rules (`signed::receipt::lifecycle`, `mailbox::state`) import only
//! leaves and pure modules, so the store's backends run them without importing the feature:
//! the layering test treats each as a node of its own.
//!
//! Why this map rather than DESIGN.md's suggested `envelope -> policy -> store -> apns ->
//! http` chain: with three front-ends the chain's `http` end would be three modules, and
//! `apns` would be one of several push services; so the front-ends sit side by side over
//! one core (`delivery`), and services sit behind a trait, as `STYLE.md` asks.
//!
//! Only what the binary, the integration tests and the benchmark use is public; everything
//! else is crate-private so the compiler finds dead code.

// Without the `testing` feature (the relay's own build: `cargo build`, the image), what only
// `testing` uses looks unused (dead, or imported for nothing). Both are still found where the
// whole crate is compiled: the workspace's clippy and test builds, which switch `testing` on.
#![cfg_attr(not(feature = "testing"), allow(dead_code, unused_imports))]

pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod v1;

pub(crate) mod admin;
pub(crate) mod admission;
pub(crate) mod body;
pub(crate) mod delivery;
pub(crate) mod device;
pub(crate) mod mailbox;
pub(crate) mod metrics;
pub(crate) mod policy;
pub(crate) mod push;
pub(crate) mod region;
pub(crate) mod secret;
pub(crate) mod signed;
pub(crate) mod store;
