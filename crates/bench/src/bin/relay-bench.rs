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
//! `sealrelay::parts::sign_request`. The first `--pregen` bodies are signed before the timed
//! loop (on every core), so the generator's signing does not compete with the relay; pushes
//! past them, or bodies older than four minutes (the relay accepts five), are signed in the
//! loop and counted as `signed_in_loop`. A push counts as forwarded when it answers 201 with
//! every target `delivered`; anything else is counted by status and error code, and target
//! states are counted too.
//!
//! `mailbox`, `mailbox-redis` and `watch` (module `mailbox`) and `signal` (module `signal`)
//! drive the mailbox front-end (`MAILBOX.md`): their module documentation says how load is
//! spread over mailboxes so the per-mailbox buckets never decide.

#[path = "relay-bench/mailbox.rs"]
mod mailbox;
#[path = "relay-bench/signal.rs"]
mod signal;
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

// ---------------------------------------------------------------------------------------
// Process and Redis measurements

fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime in seconds.
fn cpu_s(pid: &str, tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm) ": state is field 3, utime field 14, stime field 15.
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / tck)
}

fn status_kb(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn redis_addr(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| anyhow::anyhow!("only redis://host:port URLs are supported"))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = hostport.rsplit('@').next().unwrap_or(hostport);
    anyhow::ensure!(
        hostport.starts_with("127.0.0.1:") || hostport.starts_with("localhost:"),
        "the benchmark talks to 127.0.0.1 only"
    );
    Ok(hostport.to_owned())
}

/// `INFO <section>` over a plain RESP connection.
async fn redis_info(addr: &str, section: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    let cmd = format!("*2\r\n$4\r\nINFO\r\n${}\r\n{}\r\n", section.len(), section);
    s.write_all(cmd.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = s.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "Redis closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(nl) = buf.windows(2).position(|w| w == b"\r\n") {
            let len: usize = std::str::from_utf8(&buf[1..nl])?.parse()?;
            if buf.len() >= nl + 2 + len {
                return Ok(String::from_utf8_lossy(&buf[nl + 2..nl + 2 + len]).into_owned());
            }
        }
    }
}

fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

fn commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

struct Probe {
    tck: f64,
    pids: Vec<(String, String)>,
    redis: Option<String>,
    cpu0: Vec<Option<f64>>,
    self0: Option<f64>,
    stats0: BTreeMap<String, u64>,
    /// Script-internal commands beyond `SCRIPT_INTERNAL` (the receipt scripts' for `signed`).
    also_internal: &'static [&'static str],
}

impl Probe {
    async fn start(c: &Common) -> anyhow::Result<Self> {
        let tck = clk_tck();
        let mut pids: Vec<(String, String)> = c
            .pids
            .iter()
            .map(|p| match p.split_once('=') {
                Some((n, p)) => (n.to_owned(), p.to_owned()),
                None => (format!("pid{p}"), p.clone()),
            })
            .collect();
        let mut redis = None;
        let mut stats0 = BTreeMap::new();
        if let Some(url) = &c.redis_url {
            let addr = redis_addr(url)?;
            let server = redis_info(&addr, "server").await?;
            if let Some(pid) = info_field(&server, "process_id") {
                pids.push(("redis".to_owned(), pid));
            }
            stats0 = commandstats(&redis_info(&addr, "commandstats").await?);
            redis = Some(addr);
        }
        let cpu0 = pids.iter().map(|(_, p)| cpu_s(p, tck)).collect();
        Ok(Self {
            tck,
            self0: cpu_s("self", tck),
            pids,
            redis,
            cpu0,
            stats0,
            also_internal: &[],
        })
    }

    /// Adds CPU, RSS and Redis fields to `out`; `forwarded` is the per-forward denominator.
    async fn finish(&self, out: &mut serde_json::Map<String, Value>, done: u64, forwarded: u64) {
        let per = |x: f64, n: u64| if n > 0 { x / n as f64 } else { 0.0 };
        let mut procs = serde_json::Map::new();
        let mut total_cpu = 0.0;
        for ((name, pid), c0) in self.pids.iter().zip(&self.cpu0) {
            let c1 = cpu_s(pid, self.tck);
            let cpu = match (c0, c1) {
                (Some(a), Some(b)) => b - a,
                _ => f64::NAN,
            };
            if cpu.is_finite() {
                total_cpu += cpu;
            }
            procs.insert(
                name.clone(),
                json!({
                    "pid": pid,
                    "cpu_s": cpu,
                    "cpu_us_per_request": per(cpu * 1e6, done),
                    "cpu_us_per_forwarded": per(cpu * 1e6, forwarded),
                    "vm_hwm_kb": status_kb(pid, "VmHWM:"),
                    "vm_rss_kb": status_kb(pid, "VmRSS:"),
                }),
            );
        }
        let me = match (self.self0, cpu_s("self", self.tck)) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        };
        out.insert("processes".into(), Value::Object(procs));
        out.insert("measured_cpu_s".into(), json!(total_cpu));
        out.insert(
            "measured_cpu_us_per_forwarded".into(),
            json!(per(total_cpu * 1e6, forwarded)),
        );
        out.insert("generator_cpu_s".into(), json!(me));
        out.insert(
            "generator_cpu_us_per_request".into(),
            json!(per(me * 1e6, done)),
        );
        if let Some(addr) = &self.redis {
            if let Ok(info) = redis_info(addr, "commandstats").await {
                let s1 = commandstats(&info);
                let mut delta = BTreeMap::new();
                let mut round_trips = 0u64;
                for (k, v) in &s1 {
                    let d = v - self.stats0.get(k).copied().unwrap_or(0);
                    if d == 0 {
                        continue;
                    }
                    delta.insert(k.clone(), d);
                    // Our own INFO calls are not the relay's.
                    if !SCRIPT_INTERNAL.contains(&k.as_str())
                        && !self.also_internal.contains(&k.as_str())
                        && k != "info"
                        && k != "dbsize"
                    {
                        round_trips += d;
                    }
                }
                let evalsha = delta.get("evalsha").copied().unwrap_or(0);
                // Background calls, not on any request's path: the retry-queue worker's
                // queue_claim.lua polls (one ZRANGEBYSCORE inside each) and the queue gauges'
                // queue_stats.lua calls (one ZCARD inside each); both are EVALSHAs.
                let background = delta.get("zrangebyscore").copied().unwrap_or(0)
                    + delta.get("zcard").copied().unwrap_or(0);
                let request_path = round_trips.saturating_sub(background);
                out.insert("redis_background_calls".into(), json!(background));
                out.insert(
                    "redis_request_path_calls_per_forwarded".into(),
                    json!(per(request_path as f64, forwarded)),
                );
                out.insert("redis_commandstats_delta".into(), json!(delta));
                out.insert("redis_evalsha".into(), json!(evalsha));
                out.insert("redis_round_trips".into(), json!(round_trips));
                out.insert(
                    "redis_evalsha_per_request".into(),
                    json!(per(evalsha as f64, done)),
                );
                out.insert(
                    "redis_round_trips_per_forwarded".into(),
                    json!(per(round_trips as f64, forwarded)),
                );
                out.insert(
                    "redis_evalsha_per_forwarded".into(),
                    json!(per(evalsha as f64, forwarded)),
                );
            }
            if let Ok(mem) = redis_info(addr, "memory").await {
                out.insert(
                    "redis_used_memory".into(),
                    json!(info_field(&mem, "used_memory").and_then(|v| v.parse::<u64>().ok())),
                );
            }
        }
    }
}

fn report(
    kind: &str,
    c: &Common,
    mut extra: serde_json::Map<String, Value>,
    res: &WorkerResult,
    elapsed: f64,
) -> serde_json::Map<String, Value> {
    let done: u64 = res.outcomes.values().sum();
    let h = &res.hist;
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    extra.insert("kind".into(), json!(kind));
    extra.insert("label".into(), json!(c.label));
    extra.insert("requests".into(), json!(done));
    extra.insert("elapsed_s".into(), json!(elapsed));
    extra.insert("rps".into(), json!(done as f64 / elapsed));
    extra.insert("target_rate".into(), json!(c.rate));
    extra.insert(
        "latency_ms".into(),
        json!({
            "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "p999": q(0.999),
            "max": h.max() as f64 / 1000.0, "mean": h.mean() / 1000.0,
        }),
    );
    extra.insert("outcomes".into(), json!(res.outcomes));
    extra.insert(
        "mix".into(),
        json!({"burst": c.burst, "dup": c.dup, "devices": c.devices, "ciphertext_chars": c.ciphertext_chars}),
    );
    extra
}

fn emit(out: serde_json::Map<String, Value>, c: &Common) -> anyhow::Result<()> {
    let v = Value::Object(out);
    let line = v.to_string();
    println!("{line}");
    if let Some(path) = &c.out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{line}")?;
    }
    let l = &v["latency_ms"];
    eprintln!(
        "{} {}: {} requests in {:.2}s = {:.0}/s; latency ms p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        v["kind"].as_str().unwrap_or(""),
        v["label"].as_str().unwrap_or(""),
        v["requests"],
        v["elapsed_s"].as_f64().unwrap_or(0.0),
        v["rps"].as_f64().unwrap_or(0.0),
        l["p50"].as_f64().unwrap_or(0.0),
        l["p90"].as_f64().unwrap_or(0.0),
        l["p99"].as_f64().unwrap_or(0.0),
        l["p999"].as_f64().unwrap_or(0.0),
        l["max"].as_f64().unwrap_or(0.0),
    );
    eprintln!("  outcomes: {}", v["outcomes"]);
    if let Some(p) = v.get("processes").and_then(Value::as_object) {
        for (name, p) in p {
            eprintln!(
                "  {name}: cpu {:.3}s ({:.1} us/request, {:.1} us/forwarded), peak RSS {} kB",
                p["cpu_s"].as_f64().unwrap_or(f64::NAN),
                p["cpu_us_per_request"].as_f64().unwrap_or(f64::NAN),
                p["cpu_us_per_forwarded"].as_f64().unwrap_or(f64::NAN),
                p["vm_hwm_kb"]
            );
        }
    }
    if let Some(e) = v.get("redis_evalsha_per_forwarded") {
        eprintln!(
            "  redis: {} EVALSHA per forwarded, {} round trips per forwarded; commands {}",
            e, v["redis_round_trips_per_forwarded"], v["redis_commandstats_delta"]
        );
    }
    if let Some(m) = v.get("bytes_per_device") {
        eprintln!("  redis memory: {m} bytes per device");
    }
    Ok(())
}

fn forwarded_of(res: &WorkerResult) -> u64 {
    res.outcomes
        .iter()
        .filter(|(k, _)| k.ends_with(" forwarded") || k.as_str() == "forwarded")
        .map(|(_, v)| v)
        .sum()
}

// ---------------------------------------------------------------------------------------
// load

fn outcome_of(status: u16, body: &[u8]) -> String {
    fn field<'a>(body: &'a [u8], name: &str) -> Option<&'a str> {
        let pat = format!("\"{name}\":\"");
        let pos = body.windows(pat.len()).position(|w| w == pat.as_bytes())?;
        let rest = &body[pos + pat.len()..];
        let end = rest.iter().position(|&b| b == b'"')?;
        std::str::from_utf8(&rest[..end]).ok()
    }
    let text = field(body, "outcome")
        .or_else(|| field(body, "error"))
        .unwrap_or("-");
    format!("{status} {text}")
}

async fn connect_h1(
    addr: SocketAddr,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn load_worker(ctl: Arc<Ctl>, mix: Mix, addr: SocketAddr, host: String) -> WorkerResult {
    let mut res = WorkerResult::new();
    let mut sender = None;
    while let Some((i, from)) = ctl.ticket().await {
        let body = mix.envelope(i);
        let outcome = async {
            if sender.is_none() {
                sender = Some(connect_h1(addr).await?);
            }
            let s = sender.as_mut().unwrap();
            s.ready().await?;
            let req = Request::post("/")
                .header("host", &host)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))?;
            let resp = s.send_request(req).await?;
            let status = resp.status().as_u16();
            let b = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok(outcome_of(status, &b))
        }
        .await;
        match outcome {
            Ok(o) => res.record(from, &o),
            Err(_) => {
                sender = None;
                res.record(from, "connection error");
            }
        }
    }
    res
}

/// `(address, Host header)` of each `--url`, loopback only.
fn loopback_targets(urls: &[String]) -> anyhow::Result<Vec<(SocketAddr, String)>> {
    let mut targets = Vec::new();
    for u in urls {
        let rest = u
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("--url must be http://127.0.0.1:PORT/"))?;
        let hostport = rest.split('/').next().unwrap_or(rest).to_owned();
        let addr: SocketAddr = hostport.parse()?;
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "the benchmark targets loopback only"
        );
        targets.push((addr, hostport));
    }
    Ok(targets)
}

async fn run_load(a: LoadArgs) -> anyhow::Result<()> {
    let targets = loopback_targets(&a.urls)?;
    let mix = Mix::new(&a.c);
    let probe = Probe::start(&a.c).await?;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for k in 0..a.connections.max(1) {
        let (addr, host) = targets[k % targets.len()].clone();
        tasks.push(tokio::spawn(load_worker(
            ctl.clone(),
            mix.clone(),
            addr,
            host,
        )));
    }
    let mut res = WorkerResult::new();
    for t in tasks {
        res.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    let done: u64 = res.outcomes.values().sum();
    let fwd = forwarded_of(&res);
    let mut extra = serde_json::Map::new();
    extra.insert("urls".into(), json!(a.urls));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("forwarded".into(), json!(fwd));
    extra.insert("forwarded_per_s".into(), json!(fwd as f64 / elapsed));
    let mut out = report("load", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, fwd).await;
    emit(out, &a.c)
}

// ---------------------------------------------------------------------------------------
// signed: POST /v2/pushes

/// Commands inside the receipt scripts (`receipt_begin.lua`, `receipt_update.lua`) that
/// `SCRIPT_INTERNAL` does not list: not round trips of the relay either.
const SIGNED_SCRIPT_INTERNAL: &[&str] = &["exists", "lrange", "rpush", "spublish"];

/// A pre-signed body older than this is signed again (the relay accepts 5 minutes).
const PREGEN_MAX_AGE_MS: u64 = 240_000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Builds and signs the bodies of one run.
struct SignedGen {
    mix: Mix,
    key: sealrelay::parts::PrivateKey,
    key_id: String,
    targets: u64,
}

impl SignedGen {
    /// A lowercase version-4 UUID, fresh per push and per run (from the salt).
    fn request_id(&self, i: u64) -> String {
        let a = splitmix(self.mix.salt.rotate_left(29) ^ splitmix(i ^ 0x5EED_0F1D));
        let mut h = self.mix.hex(&[a, splitmix(a ^ 5)]).into_bytes();
        h[12] = b'4';
        h[16] = b"89ab"[(h[16] % 4) as usize];
        let h = String::from_utf8(h).unwrap_or_default();
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// Push i, signed, issued at `issued_ms`.
    fn body(&self, i: u64, issued_ms: u64) -> Bytes {
        let it = self.mix.item(i * self.targets);
        let targets: Vec<Value> = (0..self.targets)
            .map(|j| {
                json!({
                    "device": self.mix.item(i * self.targets + j).device,
                    "suite": "x25519",
                    "ciphertext": &*self.mix.ciphertext,
                })
            })
            .collect();
        let mut m = serde_json::Map::new();
        m.insert("schemaVersion".into(), json!("2"));
        m.insert("requestId".into(), json!(self.request_id(i)));
        m.insert("targets".into(), Value::Array(targets));
        m.insert("collapseId".into(), json!(it.collapse));
        m.insert("flapId".into(), json!(it.flap));
        m.insert("priority".into(), json!("time-sensitive"));
        m.insert("event".into(), json!(false));
        m.insert("issuedAtMs".into(), json!(issued_ms));
        m.insert("signerKeyId".into(), json!(self.key_id));
        sealrelay::parts::sign_request(&self.key, &mut m);
        Bytes::from(Value::Object(m).to_string())
    }

    /// Bodies 0..n, signed now, on every core.
    fn pregen(&self, n: u64) -> Vec<Bytes> {
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get()) as u64;
        let per = n.div_ceil(threads.max(1)).max(1);
        let issued = now_ms();
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..n)
                .step_by(per as usize)
                .map(|lo| {
                    s.spawn(move || {
                        (lo..(lo + per).min(n))
                            .map(|i| self.body(i, issued))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            parts
                .into_iter()
                .flat_map(|p| p.join().expect("signing thread"))
                .collect()
        })
    }
}

/// One answer of `/v2/pushes`: `201 delivered` when every one of the `want` targets is
/// delivered; target states are counted into `res`.
fn signed_outcome(status: u16, body: &[u8], want: u64, res: &mut WorkerResult) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status != 200 && status != 201 {
        let code = v["error"]["code"].as_str().unwrap_or("-");
        return format!("{status} {code}");
    }
    let Some(targets) = v["targets"].as_object() else {
        return format!("{status} no receipt");
    };
    let mut all = targets.len() as u64 == want;
    for t in targets.values() {
        let state = t["state"].as_str().unwrap_or("-");
        all &= state == "delivered";
        match res.target_states.get_mut(state) {
            Some(n) => *n += 1,
            None => {
                res.target_states.insert(state.to_owned(), 1);
            }
        }
    }
    match (status, all) {
        (201, true) => "201 delivered".to_owned(),
        (201, false) => "201 not all delivered".to_owned(),
        _ => format!("{status} replayed"),
    }
}

async fn signed_worker(
    ctl: Arc<Ctl>,
    gen: Arc<SignedGen>,
    pool: Arc<(u64, Vec<Bytes>)>,
    addr: SocketAddr,
    host: String,
) -> WorkerResult {
    let mut res = WorkerResult::new();
    let mut sender = None;
    while let Some((i, from)) = ctl.ticket().await {
        let now = now_ms();
        let body = match pool.1.get(i as usize) {
            Some(b) if now.saturating_sub(pool.0) < PREGEN_MAX_AGE_MS => b.clone(),
            _ => {
                res.signed_in_loop += 1;
                gen.body(i, now)
            }
        };
        let answer = async {
            if sender.is_none() {
                sender = Some(connect_h1(addr).await?);
            }
            let s = sender.as_mut().unwrap();
            s.ready().await?;
            let req = Request::post("/v2/pushes")
                .header("host", &host)
                .header("content-type", "application/json")
                .body(Full::new(body))?;
            let resp = s.send_request(req).await?;
            let status = resp.status().as_u16();
            let b = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, b))
        }
        .await;
        match answer {
            Ok((status, b)) => {
                let o = signed_outcome(status, &b, gen.targets, &mut res);
                res.record(from, &o);
            }
            Err(_) => {
                sender = None;
                res.record(from, "connection error");
            }
        }
    }
    res
}

async fn run_signed(a: SignedArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=100).contains(&a.targets),
        "--targets is 1 to 100 (SIGNED.md)"
    );
    anyhow::ensure!(
        a.c.burst == 1 && a.c.dup == 1,
        "signed pushes take --targets, not --burst or --dup"
    );
    let targets = loopback_targets(&a.urls)?;
    let pem =
        std::fs::read_to_string(&a.key).map_err(|e| anyhow::anyhow!("{}: {e}", a.key.display()))?;
    let key = sealrelay::parts::PrivateKey::from_pem(&pem)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.key.display()))?;
    // The report's mix: `burst` devices per push.
    let mut c = a.c.clone();
    c.burst = a.targets;
    let gen = Arc::new(SignedGen {
        mix: Mix::new(&c),
        key,
        key_id: a.key_id.clone(),
        targets: a.targets,
    });
    let n = if a.pregen == 0 {
        c.max_requests
    } else {
        a.pregen.min(c.max_requests)
    };
    let t0 = Instant::now();
    let issued = now_ms();
    let bodies = {
        let gen = gen.clone();
        tokio::task::spawn_blocking(move || gen.pregen(n)).await?
    };
    let pregen_s = t0.elapsed().as_secs_f64();
    let body_bytes = bodies.first().map_or(0, Bytes::len);
    let pool = Arc::new((issued, bodies));
    let mut probe = Probe::start(&c).await?;
    probe.also_internal = SIGNED_SCRIPT_INTERNAL;
    let ctl = Ctl::new(&c);
    let mut tasks = Vec::new();
    for k in 0..a.connections.max(1) {
        let (addr, host) = targets[k % targets.len()].clone();
        tasks.push(tokio::spawn(signed_worker(
            ctl.clone(),
            gen.clone(),
            pool.clone(),
            addr,
            host,
        )));
    }
    let mut res = WorkerResult::new();
    for t in tasks {
        res.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    drop(pool);
    let done: u64 = res.outcomes.values().sum();
    let fwd = res.outcomes.get("201 delivered").copied().unwrap_or(0);
    let created: u64 = res
        .outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("201 "))
        .map(|(_, v)| v)
        .sum();
    let delivered = res.target_states.get("delivered").copied().unwrap_or(0);
    let mut extra = serde_json::Map::new();
    extra.insert("urls".into(), json!(a.urls));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("targets_per_push".into(), json!(a.targets));
    extra.insert("key_id".into(), json!(a.key_id));
    extra.insert("forwarded".into(), json!(fwd));
    extra.insert("forwarded_per_s".into(), json!(fwd as f64 / elapsed));
    extra.insert("created".into(), json!(created));
    extra.insert("targets_delivered".into(), json!(delivered));
    extra.insert(
        "targets_delivered_per_s".into(),
        json!(delivered as f64 / elapsed),
    );
    extra.insert("target_states".into(), json!(res.target_states));
    extra.insert("pregen".into(), json!(n));
    extra.insert("pregen_s".into(), json!(pregen_s));
    extra.insert("signed_in_loop".into(), json!(res.signed_in_loop));
    extra.insert("body_bytes".into(), json!(body_bytes));
    let mut out = report("signed", &c, extra, &res, elapsed);
    probe.finish(&mut out, done, fwd).await;
    // Store round trips per created push: the EVALSHAs minus the background ones (the
    // retry-queue worker's claim polls and the queue gauges' stats scripts, one
    // ZRANGEBYSCORE or ZCARD inside each), and any other command from the client.
    if let Some(delta) = out
        .get("redis_commandstats_delta")
        .and_then(Value::as_object)
    {
        let d = |k: &str| delta.get(k).and_then(Value::as_u64).unwrap_or(0);
        let background = d("zrangebyscore") + d("zcard");
        let path = d("evalsha").saturating_sub(background);
        let other: u64 = delta
            .iter()
            .filter(|(k, _)| {
                !SCRIPT_INTERNAL.contains(&k.as_str())
                    && !SIGNED_SCRIPT_INTERNAL.contains(&k.as_str())
                    && !matches!(k.as_str(), "evalsha" | "info" | "dbsize")
            })
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        let per = |x: u64| {
            if created > 0 {
                x as f64 / created as f64
            } else {
                0.0
            }
        };
        out.insert("redis_evalsha_request_path".into(), json!(path));
        out.insert(
            "redis_evalsha_request_path_per_push".into(),
            json!(per(path)),
        );
        out.insert("redis_other_client_calls".into(), json!(other));
        out.insert(
            "redis_other_client_calls_per_push".into(),
            json!(per(other)),
        );
    }
    eprintln!(
        "signed {}: {} pushes of {} target(s), {} answered 201 with every target delivered ({:.0}/s); {} bodies pre-signed in {:.2}s, {} signed in the loop; target states {}",
        c.label,
        done,
        a.targets,
        fwd,
        fwd as f64 / elapsed,
        n,
        pregen_s,
        res.signed_in_loop,
        json!(res.target_states)
    );
    if let Some(p) = out.get("redis_evalsha_request_path_per_push") {
        eprintln!(
            "  redis: {p} EVALSHA per push on the request path (background {}), {} other client calls",
            out.get("redis_background_calls").unwrap_or(&Value::Null),
            out["redis_other_client_calls"]
        );
    }
    emit(out, &c)
}

// ---------------------------------------------------------------------------------------
// mock

async fn run_mock(a: MockArgs) -> anyhow::Result<()> {
    use sealrelay_testkit::mock_apns::{MockApns, MockConfig};
    use sealrelay_testkit::pki::{generate_auth_key, generate_pki};
    std::fs::create_dir_all(&a.state_dir)?;
    let pki = generate_pki()?;
    let (private, public) = generate_auth_key()?;
    std::fs::write(a.state_dir.join("ca.pem"), &pki.ca_pem)?;
    std::fs::write(a.state_dir.join("AuthKey.p8"), &private)?;
    let mock = MockApns::start_on(
        MockConfig {
            cert_pem: pki.cert_pem,
            key_pem: pki.key_pem,
            jwt_public_key_pem: a.check_jwt.then_some(public),
            team_id: "TEAM123456".into(),
            key_id: "KEY1234567".into(),
            topic: "com.example.cronstable".into(),
            record: false,
        },
        a.port,
    )
    .await?;
    println!("url {}", mock.url());
    let stop = tokio::time::sleep(Duration::from_secs(a.max_seconds));
    tokio::pin!(stop);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = &mut stop => {},
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    eprintln!(
        "relay-bench mock: answered {} (200: {})",
        mock.answered(),
        mock.delivered()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// apns: the relay's HTTP/2 client alone

async fn run_apns(a: ApnsArgs) -> anyhow::Result<()> {
    use hyper_util::client::legacy::{connect::HttpConnector, Client};
    use hyper_util::rt::TokioExecutor;
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    anyhow::ensure!(
        a.url.starts_with("https://127.0.0.1:") || a.url.starts_with("https://localhost:"),
        "the benchmark targets loopback only"
    );
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&a.ca)? {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http2()
        .wrap_connector(http);
    // The relay's client settings (src/apns/client.rs): one pooled HTTP/2 connection.
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .pool_idle_timeout(None)
        .timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    let mix = Mix::new(&a.c);
    // The body the relay builds (src/push/apns/payload.rs) for this mix's envelope.
    let env = sealrelay::v1::envelope::parse(mix.envelope(0).as_bytes(), 3800)
        .map_err(|e| anyhow::anyhow!("envelope: {e}"))?;
    let body = Bytes::from(sealrelay::parts::alert_body(
        &env,
        "cronstable",
        "New alert",
    ));
    // An ES256 JWT is about this long; the fast mock does not verify it.
    let jwt: Arc<str> = format!(
        "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IktFWTEyMzQ1NjcifQ.eyJpc3MiOiJURUFNMTIzNDU2IiwiaWF0IjoxNzAwMDAwMDAwfQ.{}",
        "A".repeat(86)
    )
    .into();
    // Warm the connection up outside the measurement.
    {
        let it = mix.item(u64::MAX / 2);
        let req = Request::post(format!("{}/3/device/{}", a.url, it.device))
            .header("authorization", &*jwt)
            .header("apns-topic", "com.example.cronstable")
            .body(Full::new(body.clone()))?;
        let r = client.request(req).await?;
        let _ = r.into_body().collect().await;
    }
    let probe = Probe::start(&a.c).await?;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (ctl, mix, client, body, jwt, base) = (
            ctl.clone(),
            mix.clone(),
            client.clone(),
            body.clone(),
            jwt.clone(),
            a.url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            let expiration = (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + 600)
                .to_string();
            while let Some((i, from)) = ctl.ticket().await {
                let it = mix.item(i);
                let req = Request::post(format!("{base}/3/device/{}", it.device))
                    .header("authorization", &*jwt)
                    .header("apns-topic", "com.example.cronstable")
                    .header("apns-push-type", "alert")
                    .header("apns-priority", "10")
                    .header("apns-collapse-id", &it.collapse)
                    .header("apns-expiration", &expiration)
                    .header(
                        "apns-id",
                        format!(
                            "{}-{}-{}-{}-{}",
                            &it.flap[..8],
                            &it.flap[8..12],
                            &it.flap[12..16],
                            &it.flap[16..20],
                            &it.flap[20..32]
                        ),
                    )
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()));
                let outcome = match req {
                    Ok(req) => match client.request(req).await {
                        Ok(r) => {
                            let s = r.status().as_u16();
                            let _ = r.into_body().collect().await;
                            if s == 200 {
                                "200 forwarded".to_owned()
                            } else {
                                format!("{s}")
                            }
                        }
                        Err(_) => "connection error".to_owned(),
                    },
                    Err(_) => "invalid request".to_owned(),
                };
                res.record(from, &outcome);
            }
            res
        }));
    }
    let mut res = WorkerResult::new();
    for t in tasks {
        res.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    let done: u64 = res.outcomes.values().sum();
    let mut extra = serde_json::Map::new();
    extra.insert("url".into(), json!(a.url));
    extra.insert("concurrency".into(), json!(a.concurrency));
    extra.insert("apns_body_bytes".into(), json!(body.len()));
    let mut out = report("apns", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, forwarded_of(&res)).await;
    emit(out, &a.c)
}

// ---------------------------------------------------------------------------------------
// redis: the admission script alone

async fn run_redis(a: RedisArgs) -> anyhow::Result<()> {
    use fred::prelude::*;
    use fred::types::Value as RValue;
    let url =
        a.c.redis_url
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--redis-url is required"))?;
    let addr = redis_addr(&url)?;
    let config = Config::from_url(&url)?;
    let pool = Builder::from_config(config).build_pool(a.connections.max(1))?;
    pool.init().await?;
    let sha: String = pool
        .next()
        .script_load(sealrelay::parts::admit_lua())
        .await?;
    let mem0 = if a.memory {
        info_field(&redis_info(&addr, "memory").await?, "used_memory")
            .and_then(|v| v.parse::<i64>().ok())
    } else {
        None
    };
    let keys0: i64 = pool.next().dbsize().await?;
    let emission_us = (1e6 / a.rate_refill_per_s).round() as i64;
    let bucket_ms = emission_us * a.rate_capacity / 1000 + 1;
    let horizon_ms: i64 = [600_000, 75_000, 1_800_000, 7_200_000, bucket_ms]
        .into_iter()
        .max()
        .unwrap();
    let mix = Mix::new(&a.c);
    let probe = Probe::start(&a.c).await?;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (ctl, mix, pool, sha, prefix) = (
            ctl.clone(),
            mix.clone(),
            pool.clone(),
            sha.clone(),
            a.prefix.clone(),
        );
        let cap = a.rate_capacity;
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            while let Some((i, from)) = ctl.ticket().await {
                let it = mix.item(i);
                // The relay's key: prefix{first 32 hex of SHA-256(token)}.
                let d = ring::digest::digest(&ring::digest::SHA256, it.device.as_bytes());
                let mut h = String::with_capacity(32);
                for b in &d.as_ref()[..16] {
                    h.push_str(&format!("{b:02x}"));
                }
                let key = format!("{prefix}{{{h}}}");
                let dead = format!("{key}:dead");
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64;
                let args: Vec<RValue> = vec![
                    now_ms.into(),
                    it.collapse.as_str().into(),
                    it.flap.as_str().into(),
                    75_000i64.into(),
                    6i64.into(),
                    1_800_000i64.into(),
                    1_800_000i64.into(),
                    7_200_000i64.into(),
                    cap.into(),
                    emission_us.into(),
                    horizon_ms.into(),
                    (horizon_ms + 60_000).into(),
                    24i64.into(),
                ];
                let r: Result<Vec<RValue>, _> = pool
                    .next()
                    .evalsha(sha.as_str(), vec![key, dead], args)
                    .await;
                let outcome = match r
                    .as_ref()
                    .ok()
                    .and_then(|v| v.first())
                    .and_then(|v| v.as_i64())
                {
                    Some(0) => "forwarded",
                    Some(1) => "coalesced",
                    Some(2) => "suppressed",
                    Some(3) => "rate_limited",
                    Some(4) => "dead",
                    _ => "error",
                };
                res.record(from, outcome);
            }
            res
        }));
    }
    let mut res = WorkerResult::new();
    for t in tasks {
        res.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    let done: u64 = res.outcomes.values().sum();
    let mut extra = serde_json::Map::new();
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("concurrency".into(), json!(a.concurrency));
    let keys1: i64 = pool.next().dbsize().await?;
    extra.insert("keys_added".into(), json!(keys1 - keys0));
    if let Some(m0) = mem0 {
        let m1 = info_field(&redis_info(&addr, "memory").await?, "used_memory")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(m0);
        let devices = (keys1 - keys0).max(1);
        extra.insert("used_memory_delta".into(), json!(m1 - m0));
        extra.insert(
            "bytes_per_device".into(),
            json!((m1 - m0) as f64 / devices as f64),
        );
    }
    let mut out = report("redis", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, forwarded_of(&res)).await;
    let _ = pool.quit().await;
    emit(out, &a.c)
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
