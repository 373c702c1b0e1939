//! The relay as an operator runs it: the binary, its configuration checks, metrics and the
//! dashboard, traces, stop, faults, Sentinel, and the example Redis manifest.

mod binary;
mod config_typos;
mod dashboard;
mod example_redis;
mod faults;
mod sentinel;
mod telemetry_and_stop;
