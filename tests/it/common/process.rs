//! The relay as a separate process, for tests that need several replicas or signals. It
//! binds port 0 on loopback and the test reads the ports it got from its "sealrelay
//! serving" log line, so no port is ever picked by binding and releasing.

use std::process::Command;
use std::time::{Duration, Instant};

use sealrelay_testkit::process::ChildProcess;

pub struct RelayProcess {
    pub port: u16,
    pub admin: u16,
    /// The region listener's port, with `RELAY_REGION`.
    pub region: Option<u16>,
    child: ChildProcess,
}

/// The port of a `"addr":"127.0.0.1:PORT"` field in a JSON log line.
fn port_of(line: &str, field: &str) -> Option<u16> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let addr = v.get(field)?.as_str()?;
    addr.rsplit(':').next()?.parse().ok()
}

impl RelayProcess {
    /// Starts `sealrelay` with these variables on ports it chooses, and waits until
    /// `/readyz` answers 200.
    pub fn spawn(vars: &[(String, String)]) -> Self {
        let p = Self::start(vars);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !p.ready() {
            assert!(
                Instant::now() < deadline,
                "relay on {} did not become ready",
                p.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    /// Starts `sealrelay` and waits only until it serves (ready or not).
    pub fn start(vars: &[(String, String)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sealrelay"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            // Warnings, plus the one start-up line that names the bound addresses.
            .env("RUST_LOG", "warn,sealrelay::app=info")
            .env("RELAY_LOG_FORMAT", "json")
            .env("RELAY_ADMIN_SOCKET", "")
            .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RELAY_LISTEN", "127.0.0.1:0")
            .env("RELAY_ADMIN_LISTEN", "127.0.0.1:0");
        let child = ChildProcess::spawn(cmd, true).expect("start sealrelay");
        let line = child
            .wait_for_line(Duration::from_secs(20), |l| l.contains("sealrelay serving"))
            .expect("the relay reported the addresses it bound");
        let (Some(port), Some(admin)) = (port_of(&line, "addr"), port_of(&line, "admin_addr"))
        else {
            panic!("no addresses in {line}");
        };
        let region = port_of(&line, "region");
        Self {
            port,
            admin,
            region,
            child,
        }
    }

    pub fn ready(&self) -> bool {
        self.readyz().starts_with("HTTP/1.1 200")
    }

    /// `/readyz`'s whole answer, status line to body ("" when it cannot be asked).
    pub fn readyz(&self) -> String {
        self.admin_get("/readyz")
    }

    /// The sum of a counter's series on the admin listener's `/metrics` (every label set).
    pub fn counter_sum(&self, family: &str) -> f64 {
        super::counter_sum(&self.admin_get("/metrics"), family)
    }

    /// A GET on the admin listener: the whole answer, status line to body ("" when it
    /// cannot be asked).
    pub fn admin_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.admin)) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if s.write_all(request.as_bytes()).is_err() {
            return String::new();
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Sends a signal to this relay (by its process id).
    pub fn signal(&self, signal: i32) {
        self.child.signal(signal);
    }

    /// Waits for the process to exit by itself; its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        self.child.wait_exit(timeout)
    }

    /// Every line it printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.child.lines()
    }

    /// SIGKILL, no goodbye.
    pub fn kill9(&mut self) {
        self.child.kill9();
    }
}
