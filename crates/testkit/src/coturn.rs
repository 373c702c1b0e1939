//! A real coturn for tests: `turnserver` (Debian's `coturn` package, which the test script
//! installs) on a loopback UDP port, with the TURN REST scheme (`use-auth-secret`) and a
//! static secret, and `turnutils_uclient`, coturn's own client, to allocate a relay with a
//! user name and password and send traffic through it.
//!
//! `turnserver` cannot listen on port 0 and report the port, so a port is picked and then
//! *verified*: every UDP socket bound to it must be one of our child's open files
//! (`/proc/net/udp` against `/proc/<pid>/fd`). If another process holds it, the attempt is
//! discarded and repeated on a new port. The server is stopped by its process id when
//! dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The realm the server runs with.
pub const REALM: &str = "sealrelay.test";

/// A UDP and TCP port free a moment ago (only a candidate: [`TurnServer`] verifies).
fn candidate_port() -> u16 {
    loop {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP port");
        let port = u.local_addr().expect("local address").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The inodes of the sockets bound to 127.0.0.1:`port` in `/proc/net/udp`.
fn udp_inodes(port: u16) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            (cols.get(1) == Some(&local.as_str()))
                .then(|| cols.get(9).map(|s| s.to_string()))
                .flatten()
        })
        .collect()
}

/// Whether process `pid` holds the socket with `inode` open.
fn holds(pid: u32, inode: &str) -> bool {
    let want = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == want.as_str())
    })
}

/// One `turnserver` process.
pub struct TurnServer {
    /// The UDP (and TCP) port it listens on, verified to be this process's.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl TurnServer {
    /// A server that accepts TURN REST credentials made with `secret`, relaying on loopback.
    pub fn start(secret: &str) -> Self {
        for _ in 0..20 {
            let dir = tempfile::tempdir().expect("temporary directory");
            let port = candidate_port();
            let mut child = spawn(dir.path(), port, secret);
            let deadline = Instant::now() + Duration::from_secs(10);
            let ours = loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break false;
                }
                // Every socket on the port must be the child's (it may bind one per thread).
                let inodes = udp_inodes(port);
                if !inodes.is_empty() {
                    break inodes.iter().all(|i| holds(child.id(), i));
                }
                if Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            if ours {
                return Self {
                    port,
                    child,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start turnserver on a free port after 20 attempts");
    }

    /// Allocates a relay on this server as `username` with `password` (coturn's
    /// `turnutils_uclient`, one client talking to itself through its relay), and returns
    /// whether the allocation succeeded and traffic crossed the relay.
    pub fn allocate(&self, username: &str, password: &str) -> Allocation {
        let out = Command::new("turnutils_uclient")
            .args(["-p", &self.port.to_string()])
            .args(["-u", username, "-w", password, "-r", REALM])
            .args(["-e", "127.0.0.1", "-n", "3", "-m", "1", "-y"])
            .arg("127.0.0.1")
            .stdin(Stdio::null())
            .output()
            .expect("turnutils_uclient is installed (scripts/test.sh installs coturn)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        // "start_mclient: tot_send_msgs=6, tot_recv_msgs=6" once the run is over.
        let received = text
            .lines()
            .filter_map(|l| l.split("tot_recv_msgs=").nth(1))
            .filter_map(|rest| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .max()
            .unwrap_or(0);
        Allocation {
            allocated: out.status.success() && !text.contains("Cannot complete Allocation"),
            received,
            output: text,
        }
    }
}

/// What one `turnutils_uclient` run saw.
#[derive(Debug)]
pub struct Allocation {
    /// The server granted the allocation (the credentials passed its check).
    pub allocated: bool,
    /// Messages that came back through the relay.
    pub received: u64,
    /// The client's output, for assertion messages.
    pub output: String,
}

fn spawn(dir: &Path, port: u16, secret: &str) -> Child {
    Command::new("turnserver")
        .arg("-n") // no configuration file
        .args(["--listening-ip", "127.0.0.1", "--relay-ip", "127.0.0.1"])
        .args(["--listening-port", &port.to_string()])
        .args(["--use-auth-secret", "--static-auth-secret", secret])
        .args(["--realm", REALM])
        .args([
            "--no-tls",
            "--no-dtls",
            "--no-cli",
            "--allow-loopback-peers",
        ])
        .arg("--userdb")
        .arg(dir.join("turndb"))
        .arg("--pidfile")
        .arg(dir.join("turnserver.pid"))
        .args(["--log-file", "stdout", "--simple-log"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("turnserver is installed (scripts/test.sh installs coturn)")
}

impl Drop for TurnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
