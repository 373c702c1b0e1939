//! The connection to Redis every concern's Redis backend shares: the pool, its settings and
//! Sentinel's failover watch ([`client`]), the GCRA function the scripts that meter share
//! (`gcra.lua`), and the reading of loose replies ([`reply`]).
//!
//! Every key of one device (or one queue shard, one mailbox, one receipt) shares a hash tag,
//! so each script touches one Cluster slot and runs unchanged on Redis Cluster. Scripts are
//! loaded on first use and reloaded transparently after NOSCRIPT (a restart or a failover).
//! Time comes from the replica as an argument, so tests can drive it; stored instants never
//! move backwards; every write sets a TTL, so nothing outlives its use.

pub mod client;
pub mod reply;
mod sentinel;

pub use client::{RedisSettings, RedisStore};
