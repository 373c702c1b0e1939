//! The Redis store: state shared by every replica.
//!
//! - [`policy`]: per-device policy state, one Lua script per admission (`policy_admit.lua`, a mirror
//!   of [`crate::policy::admit`]): one round trip per request on the happy path;
//! - [`queue`]: the shared retry queue, sharded over hash tags, fenced and sealed;
//! - [`fanout`]: publish/subscribe between replicas (sharded pub/sub on the key's hash tag).
//!
//! Every key of one device (or one queue shard, one mailbox) shares a hash tag, so each script
//! touches one Cluster slot and runs unchanged on Redis Cluster. Scripts are loaded on first
//! use and reloaded transparently after NOSCRIPT (a restart or a failover). Time comes from
//! the replica as an argument, so tests can drive it; stored instants never move backwards;
//! every write sets a TTL, so nothing outlives its use.

mod client;
pub mod fanout;
pub mod mailbox;
pub mod policy;
pub mod queue;
mod sentinel;
pub mod signed;

pub use client::{RedisSettings, RedisStore};
