//! The binary as a client of a relay:
//!
//! - `sealrelay smoke` ([`smoke`]): one synthetic v1 push, to check a deployment;
//! - `sealrelay keygen` ([`keygen`]): a signer's Ed25519 key;
//! - `sealrelay admin ...` ([`admin`]): signers and receipts over the admin API;
//! - `sealrelay push ...` ([`push`]): one signed push, and with `--wait` its events.
//!
//! The command line itself is declared in [`args`].
//!
//! Requests go to a URL (http or https, through the relay's own rustls client) or to the
//! admin API's Unix socket ([`endpoint::Endpoint`]).

pub mod admin;
pub mod args;
pub mod endpoint;
pub mod keygen;
pub mod push;
pub mod smoke;

pub use endpoint::{error_text, Endpoint};
