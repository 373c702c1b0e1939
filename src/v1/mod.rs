//! The cronstable front-end, relay protocol v1: `POST /` takes one sealed envelope per
//! (alert, device), exactly as the hosted reference relay does (DESIGN.md's table), plus the
//! pages a daemon's pairing QR points at.
//!
//! - [`envelope`]: the body into an [`crate::delivery::Alert`], with the reference's texts;
//! - [`answer`]: how a request ended, in the reference's answers (the core's outcomes and
//!   the intake's own refusals);
//! - [`intake`]: the routes and the handler: in-flight limit and client-address bucket
//!   ([`crate::admission`], shared with `/v2`), body limits and timeouts, then the delivery core, and one log line and one metric per answer;
//! - [`pages`]: `/pair`, `/privacy`, the apple-app-site-association file.
//!
//! It never redirects: daemons follow 307/308 and would re-post the ciphertext wherever
//! `Location` points.

pub(crate) mod answer;
pub mod envelope;
mod front;
pub(crate) mod intake;
pub(crate) mod pages;

pub use front::Intake;
pub(crate) use front::{Settings, V1};
