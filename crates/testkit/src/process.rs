//! A child process under test: its stdout and stderr read line by line on background
//! threads (kept for assertions, optionally echoed), signals sent to *its* process id only,
//! and killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Lines {
    all: Vec<String>,
    closed: usize,
}

/// A running child with captured output.
pub struct ChildProcess {
    child: Option<Child>,
    lines: Arc<(Mutex<Lines>, Condvar)>,
    pid: u32,
}

impl ChildProcess {
    /// Spawns `cmd` with stdout and stderr captured. With `echo`, lines are also copied to
    /// this process's stderr (visible in a failing test's output).
    pub fn spawn(mut cmd: Command, echo: bool) -> std::io::Result<Self> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let lines: Arc<(Mutex<Lines>, Condvar)> = Arc::default();
        let streams: Vec<Box<dyn std::io::Read + Send>> = vec![
            Box::new(child.stdout.take().expect("piped stdout")),
            Box::new(child.stderr.take().expect("piped stderr")),
        ];
        for stream in streams {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if echo {
                        eprintln!("[child {pid}] {line}");
                    }
                    let (m, cv) = &*lines;
                    m.lock().unwrap_or_else(|p| p.into_inner()).all.push(line);
                    cv.notify_all();
                }
                let (m, cv) = &*lines;
                m.lock().unwrap_or_else(|p| p.into_inner()).closed += 1;
                cv.notify_all();
            });
        }
        Ok(Self {
            child: Some(child),
            lines,
            pid,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Every line printed so far (stdout and stderr interleaved as read).
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .all
            .clone()
    }

    /// Waits for the first line satisfying `f` (including lines already printed); `None` if
    /// the output ends or `timeout` passes first.
    pub fn wait_for_line(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.lines;
        let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = 0;
        loop {
            while seen < guard.all.len() {
                if f(&guard.all[seen]) {
                    return Some(guard.all[seen].clone());
                }
                seen += 1;
            }
            if guard.closed == 2 {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            guard = cv
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Sends `signal` (e.g. 15 for SIGTERM) to the child, by its id.
    pub fn signal(&self, signal: i32) {
        if self.child.is_some() {
            send_signal(self.pid, signal);
        }
    }

    /// Waits for the child to exit by itself; its exit code (`None` on timeout or when it
    /// was killed by a signal).
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

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
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

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends a signal to one process id.
pub fn send_signal(pid: u32, signal: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) takes plain integers and has no memory effects on this process.
    unsafe {
        kill(pid as i32, signal);
    }
}

/// SIGTERM.
pub const SIGTERM: i32 = 15;
/// SIGINT.
pub const SIGINT: i32 = 2;
