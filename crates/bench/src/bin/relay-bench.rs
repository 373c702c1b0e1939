//! `relay-bench`: load generator and part-by-part ceilings for `scripts/bench.sh`.
//!
//! ```text
//! relay-bench load  --url http://127.0.0.1:8080/ [--connections 64] [--duration 10]
//!                   [--max-requests 1000000] [--rate R] [--burst 1] [--dup 1] [--devices 0]
//!                   [--redis-url redis://127.0.0.1:6379] [--pid relay=1234 ...]
//! relay-bench signed --url http://127.0.0.1:8080/ --key signer.pem [--key-id ed25519:bench]
//!                   [--targets 1] [--pregen 0] [--connections 64] [the options of load]
//! relay-bench mock  --state-dir DIR [--port 0] [--max-seconds 900] [--check-jwt]
//! relay-bench apns  --url https://127.0.0.1:PORT --ca DIR/ca.pem [--concurrency 64] ...
//! relay-bench redis --redis-url redis://127.0.0.1:PORT [--connections 4] [--concurrency 64] ...
//! relay-bench mailbox --url http://127.0.0.1:8080/ --op put|list [--per-mailbox 100]
//!                   [--body-bytes 256] [--depth N] [--connections 64] [the options of load]
//! relay-bench mailbox-redis --redis-url redis://127.0.0.1:PORT --op put|list [--concurrency 64] ...
//! relay-bench watch --url http://B/ --watch-url http://A/ --rate 1000 [--mailboxes 0] ...
//! relay-bench signal --url http://A/ [--peer-url http://B/] [--pairs 20] [--frame-bytes 1024]
//!                   [--rate R | --window 2] ...
//! relay-bench verify [--requests 64] [--iterations 4000] [--rounds 7] [--threads 1]
//! ```
//!
//! Every run is bounded by `--duration` seconds AND `--max-requests`, talks to 127.0.0.1
//! only, and prints one JSON line on stdout (append it to a file with `--out`) and a human
//! summary on stderr.
//!
//! Traffic mix (`load`, `redis`, `apns`): request i belongs to alert `i / (burst*dup)`; an
//! alert goes to `burst` devices (the daemon's fan-out, up to 100) and each (device, alert)
//! is posted `dup` times in a row (the same envelope from `dup` cluster nodes: the first
//! forwards, the others coalesce). Devices are fresh for every alert with `--devices 0`,
//! else drawn round-robin from a pool of that many. Tokens are salted per run (`--salt`).
//!
//! Latency is recorded in an HDR histogram (microseconds). With `--rate` the generator is
//! open-loop: request i is due at start + i/rate; a request that leaves more than 2 ms
//! after it was due (every connection was busy) is timed from when it was due, so queueing
//! is not hidden (coordinated omission); below 2 ms the lateness is tokio's 1 ms timer
//! granularity and the request is timed from when it left.
//!
//! `signed` posts signed pushes to `/v2/pushes` (SIGNED.md): push i carries `--targets`
//! devices (the mix's alert i with `burst` = targets, so devices are fresh for every push
//! unless `--devices` sets a pool), a fresh request id and collapse id, `issuedAtMs` = when
//! it was signed, and an Ed25519 signature made here with the relay's own
//! `sealrelay::testing::sign_request`. The first `--pregen` bodies are signed before the timed
//! loop (on every core), so the generator's signing does not compete with the relay; pushes
//! past them, or bodies older than four minutes (the relay accepts five), are signed in the
//! loop and counted as `signed_in_loop`. A push counts as forwarded when it answers 201 with
//! every target `delivered`; anything else is counted by status and error code, and target
//! states are counted too.
//!
//! `mailbox`, `mailbox-redis` and `watch` (module `mailbox`) and `signal` (module `signal`)
//! drive the mailbox front-end (`MAILBOX.md`): their module documentation says how load is
//! spread over mailboxes so the per-mailbox buckets never decide.

#[path = "relay-bench/load.rs"]
mod load;
#[path = "relay-bench/mailbox.rs"]
mod mailbox;
#[path = "relay-bench/measure.rs"]
mod measure;
#[path = "relay-bench/parts.rs"]
mod parts;
#[path = "relay-bench/signal.rs"]
mod signal;
#[path = "relay-bench/signed.rs"]
mod signed;
#[path = "relay-bench/signed_redis.rs"]
mod signed_redis;
#[path = "relay-bench/verify.rs"]
mod verify;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use load::*;
use measure::*;
use parts::*;
use signed::*;

/// The same allocator as the relay (`src/main.rs`), so the parts are measured on equal terms.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Commands the Lua scripts issue: `INFO commandstats` counts them too, so they are not
/// round trips of the relay.
const SCRIPT_INTERNAL: &[&str] = &[
    "del",
    "get",
    "hdel",
    "hget",
    "hgetall",
    "hlen",
    "hmget",
    "hset",
    "pexpire",
    "zadd",
    "zcard",
    "zrange",
    "zrangebyscore",
    "zrem",
];

#[derive(Parser)]
#[command(about = "Benchmark sealrelay and the parts it cannot avoid (127.0.0.1 only)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive a relay (or bench-intake) over keep-alive HTTP/1.1 connections.
    Load(LoadArgs),
    /// Drive a relay's `/v2/pushes` with signed pushes over keep-alive HTTP/1.1 connections.
    Signed(SignedArgs),
    /// Serve a fast mock APNs (HTTP/2 over TLS) until SIGTERM or --max-seconds.
    Mock(MockArgs),
    /// Act as the relay's HTTP/2 client against a mock APNs: the APNs part alone.
    Apns(ApnsArgs),
    /// Run the real admission script with EVALSHA over many connections: the Redis part alone.
    Redis(RedisArgs),
    /// The store calls of a signed push alone (receipt begun, admission, outcomes recorded).
    SignedRedis(signed_redis::SignedRedisArgs),
    /// Envelope PUTs or lists over many mailboxes (a relay, or bench-intake: the HTTP part).
    Mailbox(mailbox::MailboxArgs),
    /// The relay's mailbox script alone with EVALSHA, for the same requests: the Redis part.
    MailboxRedis(mailbox::MailboxRedisArgs),
    /// Watch notification latency: watches on one replica, PUTs on another, open loop.
    Watch(mailbox::WatchArgs),
    /// Signal frames between the two sides of many mailboxes: latency, or the bytes ceiling.
    Signal(signal::SignalArgs),
    /// Ed25519 verification alone, ring against ed25519-dalek, over real signed pushes.
    Verify(verify::VerifyArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Stop after this many requests.
    #[arg(long, default_value_t = 1_000_000)]
    max_requests: u64,
    /// Open-loop rate, requests per second (unset: closed loop, as fast as answered).
    #[arg(long)]
    rate: Option<f64>,
    /// Devices per alert (the daemon's fan-out).
    #[arg(long, default_value_t = 1)]
    burst: u64,
    /// Copies of each (device, alert) posted back to back (cluster nodes).
    #[arg(long, default_value_t = 1)]
    dup: u64,
    /// Device pool size; 0: a fresh device for every (alert, slot).
    #[arg(long, default_value_t = 0)]
    devices: u64,
    /// Token salt (default: from the clock, so reruns use new devices).
    #[arg(long)]
    salt: Option<u64>,
    /// Ciphertext length in base64 characters (multiple of 4).
    #[arg(long, default_value_t = 1024)]
    ciphertext_chars: usize,
    /// Processes whose CPU time and peak RSS to report: NAME=PID (repeatable).
    #[arg(long = "pid")]
    pids: Vec<String>,
    /// Redis to read INFO commandstats / cpu from (its process is then measured too).
    #[arg(long)]
    redis_url: Option<String>,
    /// A label copied into the JSON line.
    #[arg(long, default_value = "")]
    label: String,
    /// Append the JSON line to this file too.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct LoadArgs {
    /// Relay intake URL (http://127.0.0.1:PORT/); repeat to spread connections over replicas.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// Keep-alive connections (each carries one request at a time).
    #[arg(long, default_value_t = 64)]
    connections: usize,
    #[command(flatten)]
    c: Common,
}

#[derive(Args)]
struct SignedArgs {
    /// Relay public URL (http://127.0.0.1:PORT/); repeat to spread connections over replicas.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// Keep-alive connections (each carries one request at a time).
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// The signer's private key (PKCS#8 PEM, as `sealrelay keygen` writes it).
    #[arg(long)]
    key: std::path::PathBuf,
    /// The key id it is enrolled under.
    #[arg(long, default_value = "ed25519:bench")]
    key_id: String,
    /// Distinct devices per push, 1 to 100.
    #[arg(long, default_value_t = 1)]
    targets: u64,
    /// Bodies signed before the timed loop (0: --max-requests of them); pushes past them are
    /// signed in the loop.
    #[arg(long, default_value_t = 0)]
    pregen: u64,
    #[command(flatten)]
    c: Common,
}

#[derive(Args)]
struct MockArgs {
    /// Where ca.pem and AuthKey.p8 are written.
    #[arg(long)]
    state_dir: std::path::PathBuf,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Stop by itself after this many seconds.
    #[arg(long, default_value_t = 900)]
    max_seconds: u64,
    /// Verify the provider JWT on every request like real APNs (slower); by default the
    /// fast mock skips it.
    #[arg(long)]
    check_jwt: bool,
}

#[derive(Args)]
struct ApnsArgs {
    /// Mock APNs base URL (https://127.0.0.1:PORT).
    #[arg(long)]
    url: String,
    /// CA certificate to trust (the mock's ca.pem).
    #[arg(long)]
    ca: std::path::PathBuf,
    /// Requests in flight at once (streams over the pooled HTTP/2 connection, like the relay).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    #[command(flatten)]
    c: Common,
}

#[derive(Args)]
struct RedisArgs {
    /// Redis connections (the relay's RELAY_REDIS_POOL_SIZE is 4 by default).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Commands in flight at once (pipelined over the connections, like the relay).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Key prefix (the relay's default).
    #[arg(long, default_value = "sealrelay:")]
    prefix: String,
    /// Device bucket size passed to the script (high, so buckets never decide).
    #[arg(long, default_value_t = 1_000_000)]
    rate_capacity: i64,
    /// Device bucket refill per second passed to the script.
    #[arg(long, default_value_t = 1000.0)]
    rate_refill_per_s: f64,
    /// Report INFO memory used_memory before and after, per new device.
    #[arg(long)]
    memory: bool,
    #[command(flatten)]
    c: Common,
}

// ---------------------------------------------------------------------------------------
// Traffic mix

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone)]
struct Mix {
    burst: u64,
    dup: u64,
    devices: u64,
    salt: u64,
    ciphertext: Arc<str>,
}

struct Item {
    device: String,
    collapse: String,
    flap: String,
}

impl Mix {
    fn new(c: &Common) -> Self {
        let salt = c.salt.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
        let n = c.ciphertext_chars.max(68).div_ceil(4) * 4;
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut ct = String::with_capacity(n);
        let mut x = salt;
        for _ in 0..n - 4 {
            x = splitmix(x);
            ct.push(B64[(x % 64) as usize] as char);
        }
        ct.push_str("AA==");
        Self {
            burst: c.burst.max(1),
            dup: c.dup.max(1),
            devices: c.devices,
            salt,
            ciphertext: ct.into(),
        }
    }

    fn hex(&self, words: &[u64]) -> String {
        let mut s = String::with_capacity(words.len() * 16);
        for w in words {
            s.push_str(&format!("{w:016x}"));
        }
        s
    }

    fn item(&self, i: u64) -> Item {
        let per_alert = self.burst * self.dup;
        let alert = i / per_alert;
        let slot = (i % per_alert) / self.dup;
        let mut dev = alert * self.burst + slot;
        if self.devices > 0 {
            dev %= self.devices;
        }
        let d = splitmix(self.salt ^ splitmix(dev));
        let a = splitmix(self.salt.rotate_left(17) ^ splitmix(alert ^ 0xA1E7));
        Item {
            device: self.hex(&[d, splitmix(d), splitmix(d ^ 1), splitmix(d ^ 2)]),
            collapse: self.hex(&[a, splitmix(a)]),
            flap: self.hex(&[splitmix(a ^ 3), splitmix(a ^ 4)]),
        }
    }

    fn envelope(&self, i: u64) -> String {
        let it = self.item(i);
        format!(
            r#"{{"v":1,"device":"{}","suite":"x25519","ciphertext":"{}","collapseId":"{}","flapId":"{}","priority":"time-sensitive","event":false}}"#,
            it.device, self.ciphertext, it.collapse, it.flap
        )
    }
}

// ---------------------------------------------------------------------------------------
// The driver: tickets, histograms, outcomes

struct Ctl {
    next: AtomicU64,
    max: u64,
    start: Instant,
    deadline: Instant,
    rate: Option<f64>,
}

impl Ctl {
    fn new(c: &Common) -> Arc<Self> {
        let start = Instant::now();
        Arc::new(Self {
            next: AtomicU64::new(0),
            max: c.max_requests,
            start,
            deadline: start + Duration::from_secs_f64(c.duration),
            rate: c.rate,
        })
    }

    /// The next request's index and the instant to time it from; `None` when done.
    async fn ticket(&self) -> Option<(u64, Instant)> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.max {
            return None;
        }
        let now = Instant::now();
        if now >= self.deadline {
            return None;
        }
        match self.rate {
            None => Some((i, now)),
            Some(r) => {
                let due = self.start + Duration::from_secs_f64(i as f64 / r);
                if due >= self.deadline {
                    return None;
                }
                if due > now {
                    tokio::time::sleep_until(due.into()).await;
                }
                let left = Instant::now();
                if left.duration_since(due) > Duration::from_millis(2) {
                    Some((i, due))
                } else {
                    Some((i, left))
                }
            }
        }
    }
}

struct WorkerResult {
    hist: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
    /// Signed pushes only: the receipts' target states.
    target_states: BTreeMap<String, u64>,
    /// Signed pushes only: bodies signed inside the timed loop.
    signed_in_loop: u64,
}

impl WorkerResult {
    fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 120_000_000, 3).unwrap(),
            outcomes: BTreeMap::new(),
            target_states: BTreeMap::new(),
            signed_in_loop: 0,
        }
    }
    fn record(&mut self, from: Instant, outcome: &str) {
        let us = from.elapsed().as_micros().max(1) as u64;
        let _ = self.hist.record(us.min(120_000_000));
        self.count(outcome);
    }
    fn count(&mut self, outcome: &str) {
        match self.outcomes.get_mut(outcome) {
            Some(n) => *n += 1,
            None => {
                self.outcomes.insert(outcome.to_owned(), 1);
            }
        }
    }
    fn merge(&mut self, o: WorkerResult) {
        let _ = self.hist.add(&o.hist);
        for (k, v) in o.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for (k, v) in o.target_states {
            *self.target_states.entry(k).or_default() += v;
        }
        self.signed_in_loop += o.signed_in_loop;
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.cmd {
            Cmd::Load(a) => run_load(a).await,
            Cmd::Signed(a) => run_signed(a).await,
            Cmd::Mock(a) => run_mock(a).await,
            Cmd::Apns(a) => run_apns(a).await,
            Cmd::Redis(a) => run_redis(a).await,
            Cmd::SignedRedis(a) => signed_redis::run_signed_redis(a).await,
            Cmd::Mailbox(a) => mailbox::run_mailbox(a).await,
            Cmd::MailboxRedis(a) => mailbox::run_mailbox_redis(a).await,
            Cmd::Watch(a) => mailbox::run_watch(a).await,
            Cmd::Signal(a) => signal::run_signal(a).await,
            Cmd::Verify(a) => verify::run_verify(a).await,
        }
    })
}
