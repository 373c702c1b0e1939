//! Protocol v1 (`POST /`), the cronstable daemons' protocol.

mod compat_table;
mod cronstable_e2e;
mod intake_props;
mod on_redis;
mod pages;
mod replicas;
