//! Real Redis for tests: a `redis-server` (or a three-master Redis Cluster) on loopback
//! ports in a temporary directory, stopped (by its process id) when dropped. The test
//! script installs `redis-server` when it is missing.
//!
//! `redis-server` cannot bind port 0 and tell us which port it got, so a port is picked
//! from the kernel's ephemeral range and then *verified*: the server that answers on it
//! must report our child's process id (`INFO server`), and the child must still be
//! running. If another process took the port in between (a parallel test, say), the attempt
//! is discarded and repeated on a new port, so a test can never talk to someone else's
//! Redis.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port that was free a moment ago, with port + 10000 free too (a Cluster node's bus
/// port) and both in range. Only a candidate: [`RedisServer`] verifies what it got.
fn candidate_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = l.local_addr().expect("local address").port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

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

/// The process id the Redis on `port` reports, if one answers.
fn server_pid(port: u16) -> Option<u32> {
    let info = cli(port, &["INFO", "server"])?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits (10 s at most) until the server on `port` is `child` itself, by the process id it
/// reports: false, with `child` stopped, if it exited (most likely the port, or its bus
/// port, was taken), if someone else's server answers there, or on the deadline.
pub(crate) fn answers_as(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        match server_pid(port) {
            Some(pid) if pid == child.id() => return true,
            Some(_) => break,
            None => {}
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// One `redis-server` process.
pub struct RedisServer {
    /// The port it serves on (verified to be this process's).
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// A standalone server with persistence off.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut s = Self {
            port: 0,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn_anywhere();
        s
    }

    /// Starts on a fresh, verified port (retrying on a port someone else took).
    fn spawn_anywhere(&mut self) {
        for _ in 0..20 {
            let port = candidate_port();
            if self.spawn_on(port) {
                return;
            }
        }
        panic!("could not start redis-server on a free port after 20 attempts");
    }

    /// Starts on `port`; false (and nothing left running) when the port turned out not to be
    /// ours.
    fn spawn_on(&mut self, port: u16) -> bool {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
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

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs a redis-cli command and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args).unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// Stops the server (kill -9, by its process id).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server and starts it again, empty, on the same port (a Redis restart as
    /// clients see it). Panics if the port was taken meanwhile.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.port;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.spawn_on(port) {
            assert!(
                Instant::now() < deadline,
                "could not restart redis-server on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the process is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// `INFO commandstats` as (command -> calls).
    pub fn command_calls(&self) -> std::collections::HashMap<String, u64> {
        parse_commandstats(&self.cli(&["INFO", "commandstats"]))
    }
}

/// Parses `INFO commandstats` into (command -> calls).
pub fn parse_commandstats(info: &str) -> std::collections::HashMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .trim()
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A real Redis Cluster: three masters, no replicas.
pub struct RedisCluster {
    /// The masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and joins them (`redis-cli --cluster create`).
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &format!("nodes-{i}.conf"),
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "cluster did not converge");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { nodes }
    }

    /// `redis-cluster://first?node=second&node=third`.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port);
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{}", n.port));
        }
        url
    }

    /// Which node (index) serves `key`.
    pub fn node_of(&self, key: &str) -> usize {
        let slot: u16 = self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot number");
        self.nodes
            .iter()
            .position(|n| owns(n, slot))
            .expect("some node owns every slot")
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot number")
    }

    /// Moves `slot` to node `to`, live, the way `redis-cli --cluster reshard` does: the
    /// target imports it and the source migrates it; one key moves (`MIGRATE`) and `hold`
    /// passes with the slot half-way, when clients get `ASK` for the keys that moved (and
    /// `TRYAGAIN` for a command whose keys are split); the other keys move; every node is
    /// told the new owner (`SETSLOT ... NODE`), after which clients get `MOVED` and the
    /// source drops its shard channel subscribers of the slot (an unrequested
    /// `sunsubscribe`). Blocks the calling thread.
    pub fn move_slot(&self, slot: u16, to: usize, hold: Duration) {
        let from = self
            .nodes
            .iter()
            .position(|n| owns(n, slot))
            .expect("some node owns every slot");
        assert_ne!(from, to, "slot {slot} is on node {to} already");
        let id = |i: usize| self.nodes[i].cli(&["CLUSTER", "MYID"]).trim().to_owned();
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let (src_id, dst_id) = (id(from), id(to));
        let s = slot.to_string();
        let ok = |out: String, what: &str| assert!(out.contains("OK"), "{what}: {out}");
        ok(
            dst.cli(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id]),
            "importing",
        );
        ok(
            src.cli(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id]),
            "migrating",
        );
        let port = dst.port.to_string();
        let migrate = |count: &str| loop {
            let keys = src.cli(&["CLUSTER", "GETKEYSINSLOT", &s, count]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                return;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let out = src.cli(&args);
            assert!(
                out.contains("OK") || out.contains("NOKEY"),
                "migrate: {out}"
            );
            if count == "1" {
                return;
            }
        };
        migrate("1");
        std::thread::sleep(hold);
        migrate("100");
        // The target first, so the slot is never without an owner that knows it.
        ok(
            dst.cli(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]),
            "node (target)",
        );
        ok(
            src.cli(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]),
            "node (source)",
        );
        for (i, n) in self.nodes.iter().enumerate() {
            if i != from && i != to {
                ok(n.cli(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]), "node");
            }
        }
    }

    /// The slots that hold a key now, each with the node (index) serving it.
    pub fn slots_in_use(&self) -> Vec<(u16, usize)> {
        let mut out = std::collections::BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for key in n.cli(&["--scan"]).lines() {
                if !key.is_empty() {
                    out.insert(self.slot_of(key), i);
                }
            }
        }
        out.into_iter().collect()
    }

    /// Sums `INFO commandstats` over the masters.
    pub fn command_calls(&self) -> std::collections::HashMap<String, u64> {
        let mut total = std::collections::HashMap::new();
        for n in &self.nodes {
            for (k, v) in n.command_calls() {
                *total.entry(k).or_insert(0) += v;
            }
        }
        total
    }
}

fn owns(n: &RedisServer, slot: u16) -> bool {
    // Ownership is read from the slot ranges on CLUSTER NODES's "myself" line.
    let nodes = n.cli(&["CLUSTER", "NODES"]);
    let Some(me) = nodes.lines().find(|l| l.contains("myself")) else {
        return false;
    };
    me.split_whitespace().skip(8).any(|range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => (a..=b).contains(&slot),
            _ => false,
        }
    })
}
