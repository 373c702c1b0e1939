//! Several regions, every key decided in its home region (`REGIONS.md`'s contract).
//!
//! - [`home`]: which region a key lives in (rendezvous hashing) and the region set's digest;
//! - [`auth`]: the hop's HMAC and its freshness;
//! - [`Regions`]: this replica's view of the peers (probed up or down), the route of a key,
//!   the hop itself (one pooled HTTP/2 client for all peers), and the receiving side's checks
//!   ([`Regions::precheck`], [`Regions::verify`]) that the region listener runs before handing a hop to the same
//!   router the public listener serves.
//!
//! A request that arrived over the region listener carries a [`Hop`] extension: it is decided
//! where it lands and never forwarded again. Without `RELAY_REGION` none of this exists.

pub mod auth;
mod frames;
pub mod home;
pub mod listener;
mod peers;
mod socket;
mod wire;

pub use peers::{HopFailure, Peer, Regions, Relay, Route, Settings};
pub use wire::Hop;
