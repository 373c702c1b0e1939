//! The Redis store against a real `redis-server` (and a real Cluster where the point is
//! cluster behaviour), from the test kit:
//!
//! - differential property tests binding each Lua script to its Rust mirror: the device
//!   policy (`policy_admit.lua` & co. against [`crate::policy`] through the in-process store) with
//!   random policies, horizon-crossing time steps and pruning on both sides; the shared
//!   client bucket (`admission_client.lua`) against [`crate::policy::gcra_take`]; the queue scripts
//!   against the in-process queue. Failing cases persist in `proptest-regressions/`;
//! - one round trip per admission, a TTL on every key, no token in any key, the memory a
//!   device costs, the behaviour while Redis is away;
//! - the retry queue's fencing, sealing, move-aside, TTL and the hand-over of a degraded
//!   replica's items; the fan-out across replicas, standalone and on a Cluster.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, FileFailurePersistence, TestRunner};
use sealrelay_testkit::redis::{RedisCluster, RedisServer};

use super::connection::{RedisSettings, RedisStore};
use super::fanout::Fanout;
use super::policy::{MemoryStore, PolicyBackend};
use super::queue::{
    Claimed, Fenced, MemoryQueue, Pending, QueueBackend, QueueKey, RedisQueue, Sealer, Unopened,
};
use super::{Admission, AlertKey, Mark, RedisFailure, Store};
use crate::device::{DeviceToken, Environment};
use crate::policy::{gcra_take, DeadReason, Decision, Policy, Ticket};

const T0: i64 = 1_790_000_000_000;

fn settings(url: &str, prefix: &str) -> RedisSettings {
    RedisSettings {
        url: url.to_owned(),
        prefix: prefix.to_owned(),
        pool_size: 2,
        timeout: Duration::from_millis(2000),
    }
}

impl RedisStore {
    /// Waits until connected, at most `timeout`.
    pub(super) async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.ready() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

async fn redis_store(url: &str, prefix: &str, policy: Policy) -> RedisStore {
    let s = RedisStore::connect(&settings(url, prefix), policy).unwrap();
    assert!(
        s.wait_ready(Duration::from_secs(10)).await,
        "redis connected"
    );
    s
}

fn token(n: u8) -> DeviceToken {
    DeviceToken::parse(&format!("{n:02x}{}", "5e".repeat(31))).unwrap()
}

/// A runner whose failures are written to `proptest-regressions/<name>.txt` and replayed
/// first on the next run.
fn runner(name: &str, cases: u32) -> TestRunner {
    TestRunner::new(PtConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            format!("proptest-regressions/{name}.txt").into_boxed_str(),
        )))),
        ..PtConfig::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

mod fanout;
mod mailboxes;
mod policy;
mod queue;
mod receipts;
