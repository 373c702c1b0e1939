//! Real Redis for tests: a `redis-server` (or a three-master Redis Cluster) started on free
//! loopback ports in a temporary directory, stopped when dropped. `scripts/test.sh` installs
//! `redis-server` when it is missing.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    // Redis Cluster also uses port + 10000 for its bus; keep both free and in range.
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
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

/// One `redis-server` process.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(free_port(), &[])
    }

    pub fn start_with(port: u16, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Self {
            port,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while cli(self.port, &["PING"]).as_deref() != Some("PONG\n") {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs a redis-cli command and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args).unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// Stops the server (kill -9); `restart` brings it back on the same port, empty.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// `INFO commandstats` as (command -> calls).
    pub fn command_calls(&self) -> std::collections::HashMap<String, u64> {
        parse_commandstats(&self.cli(&["INFO", "commandstats"]))
    }
}

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
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                RedisServer::start_with(
                    free_port(),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{i}.conf"),
                        "--cluster-node-timeout",
                        "2000",
                    ],
                )
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
            .unwrap();
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
            .unwrap();
        self.nodes.iter().position(|n| owns(n, slot)).unwrap()
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
    let me = nodes.lines().find(|l| l.contains("myself")).unwrap();
    me.split_whitespace().skip(8).any(|range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => (a..=b).contains(&slot),
            _ => false,
        }
    })
}
