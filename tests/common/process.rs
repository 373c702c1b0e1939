//! The relay as a separate process, for tests that need several replicas or signals.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RelayProcess {
    pub port: u16,
    pub admin: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RelayProcess {
    /// Starts `sealrelay` with these variables (plus free listen ports) and waits until
    /// `/readyz` answers 200.
    pub fn spawn(vars: &[(String, String)]) -> Self {
        let port = free_port();
        let admin = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sealrelay"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RELAY_LISTEN", format!("127.0.0.1:{port}"))
            .env("RELAY_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().unwrap();
        let p = Self {
            port,
            admin,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !p.ready() {
            assert!(
                Instant::now() < deadline,
                "relay on {port} did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    pub fn ready(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.admin)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.starts_with("HTTP/1.1 200")
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for the process to exit by itself; its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, no goodbye.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
