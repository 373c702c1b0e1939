//! Redis Sentinel for tests: a primary, a replica and a set of sentinels (`redis-server
//! --sentinel`) on loopback ports in temporary directories, each process stopped by its id
//! when dropped.
//!
//! Ports are verified the way [`crate::redis`] verifies them: each sentinel's `INFO server`
//! must report our child's process id, else the attempt is discarded and repeated on another
//! port. The sentinels are tuned for a test (a replica down for 2 s is down, a failover
//! times out after 10 s); [`SentinelSet::failover`] is `SENTINEL FAILOVER`, the operator's
//! forced switch-over, which needs no quorum.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::{answers_as, RedisServer};

/// The service name the sentinels monitor.
pub const SERVICE: &str = "mymaster";

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A port that was free a moment ago; [`Sentinel`] verifies what it got.
fn candidate_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("local address").port()
}

/// One `redis-server --sentinel` process.
pub struct Sentinel {
    /// The port it serves on (verified to be this process's).
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Sentinel {
    /// A sentinel monitoring `127.0.0.1:<primary>` as [`SERVICE`] with this quorum.
    pub fn start(primary: u16, quorum: usize) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut s = Self {
            port: 0,
            child: None,
            dir,
        };
        for _ in 0..20 {
            if s.spawn_on(candidate_port(), primary, quorum) {
                return s;
            }
        }
        panic!("could not start a sentinel on a free port after 20 attempts");
    }

    fn spawn_on(&mut self, port: u16, primary: u16, quorum: usize) -> bool {
        // Sentinel rewrites its configuration file (it records what it learns), so each
        // attempt gets a fresh one.
        let conf = self.dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             dir {dir}\n\
             sentinel monitor {SERVICE} 127.0.0.1 {primary} {quorum}\n\
             sentinel down-after-milliseconds {SERVICE} 2000\n\
             sentinel failover-timeout {SERVICE} 10000\n\
             sentinel parallel-syncs {SERVICE} 1\n",
            dir = self.dir.path().display(),
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let mut child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)");
        if !answers_as(&mut child, port) {
            return false;
        }
        self.port = port;
        self.child = Some(child);
        true
    }

    /// Runs a redis-cli command against this sentinel; `None` if redis-cli failed.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        cli(self.port, args)
    }

    /// `SENTINEL MASTER <SERVICE>` as (field -> value).
    pub fn master_info(&self) -> std::collections::HashMap<String, String> {
        pairs(
            &self
                .cli(&["SENTINEL", "MASTER", SERVICE])
                .unwrap_or_default(),
        )
    }

    /// The primary's port this sentinel reports (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub fn primary_port(&self) -> Option<u16> {
        let out = self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])?;
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// Stops the sentinel (kill -9, by its process id).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop();
    }
}

/// redis-cli prints a flat reply one element a line: alternate lines are field and value.
fn pairs(out: &str) -> std::collections::HashMap<String, String> {
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_owned(), c[1].to_owned()))
        .collect()
}

/// A monitored primary with one replica, and `n` sentinels.
pub struct SentinelSet {
    /// The two data servers: index 0 started as the primary, index 1 as its replica.
    pub servers: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    /// Starts a primary, a replica of it, and `n` sentinels with this quorum, and waits
    /// (bounded) until the replica is in sync and every sentinel knows the replica and the
    /// other sentinels, so a failover can be run at once.
    pub fn start(n: usize, quorum: usize) -> Self {
        let primary = RedisServer::start();
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        let sentinels: Vec<Sentinel> = (0..n)
            .map(|_| Sentinel::start(primary.port, quorum))
            .collect();
        let set = Self {
            servers: vec![primary, replica],
            sentinels,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = set.sentinels.iter().all(|s| {
                let m = s.master_info();
                m.get("flags").map(String::as_str) == Some("master")
                    && m.get("num-slaves").map(String::as_str) == Some("1")
                    && m.get("num-other-sentinels") == Some(&(n - 1).to_string())
                    && s.replica_known(set.servers[1].port)
            });
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not converge: {:?}",
                set.sentinels
                    .iter()
                    .map(|s| s.master_info())
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        set
    }

    /// `redis-sentinel://first/0?sentinelServiceName=mymaster&node=second&node=…`: every
    /// sentinel, none of the data servers.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}",
            self.sentinels[0].port
        );
        for s in &self.sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", s.port));
        }
        url
    }

    /// The data server (index into [`Self::servers`]) on `port`.
    pub fn server_on(&self, port: u16) -> usize {
        self.servers
            .iter()
            .position(|s| s.port == port)
            .unwrap_or_else(|| panic!("no data server on {port}"))
    }

    /// The primary as the first sentinel reports it (index into [`Self::servers`]).
    pub fn primary(&self) -> usize {
        let port = self.sentinels[0]
            .primary_port()
            .expect("the sentinel names a primary");
        self.server_on(port)
    }

    /// The role a data server reports itself (`master` or `slave`), from `ROLE`.
    pub fn role(&self, server: usize) -> String {
        self.servers[server]
            .cli(&["ROLE"])
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    /// `SENTINEL FAILOVER` on the first sentinel: the replica is promoted now, without a
    /// quorum (an operator's switch-over). Retried for a few seconds while the sentinel
    /// answers that it cannot yet (`-INPROG`, `-NOGOODSLAVE`).
    pub fn failover(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.sentinels[0]
                .cli(&["SENTINEL", "FAILOVER", SERVICE])
                .unwrap_or_default();
            if out.trim() == "OK" {
                return;
            }
            assert!(Instant::now() < deadline, "SENTINEL FAILOVER: {out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every sentinel names `server` as the primary; the time it took.
    pub fn wait_primary(&self, server: usize, timeout: Duration) -> Duration {
        let started = Instant::now();
        let port = self.servers[server].port;
        while !self
            .sentinels
            .iter()
            .all(|s| s.primary_port() == Some(port))
        {
            assert!(
                started.elapsed() < timeout,
                "the sentinels did not switch to {port}: {:?}",
                self.sentinels
                    .iter()
                    .map(Sentinel::primary_port)
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    }
}

impl Sentinel {
    /// Whether this sentinel lists the replica on `port` as a healthy replica.
    fn replica_known(&self, port: u16) -> bool {
        let out = self
            .cli(&["SENTINEL", "REPLICAS", SERVICE])
            .unwrap_or_default();
        // One flat field/value list per replica, concatenated.
        let lines: Vec<&str> = out.lines().collect();
        let mut found = false;
        let mut i = 0;
        let mut cur_port = None;
        let mut cur_flags = None;
        while i + 1 < lines.len() {
            match lines[i] {
                "name" => {
                    cur_port = None;
                    cur_flags = None;
                }
                "port" => cur_port = lines[i + 1].parse::<u16>().ok(),
                "flags" => cur_flags = Some(lines[i + 1]),
                _ => {}
            }
            if cur_port == Some(port) && cur_flags == Some("slave") {
                found = true;
            }
            i += 2;
        }
        found
    }
}
