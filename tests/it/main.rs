//! The integration tests, one binary with a module per surface: `v1/` (the cronstable
//! protocol), `mailbox/` (mailboxes, watch and signal sockets, ICE), `signed/` (signed pushes,
//! their CLI and receipts), `admin` (the admin API's transports), `fcm` (the FCM client),
//! `regions` (several regions), `ops/` (the binary as an operator runs it: processes,
//! metrics, traces, faults, Sentinel, the example Redis) and `source/` (the repository
//! itself: documentation, documented examples, the crate's layering). `common/` is the
//! harness they share. One binary links once, where one per file linked some thirty times.

mod common;

mod admin;
mod fcm;
mod mailbox;
mod ops;
mod regions;
mod signed;
mod source;
mod v1;
