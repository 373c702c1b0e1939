//! A link between two regions on loopback: a TCP proxy the test holds, in front of a target
//! set once the target has bound its port, that can add a one-way delay to every chunk it
//! carries, can be cut (open connections closed, new ones closed at once) and healed, and
//! can lose the answers of the next connections (the request reaches the target, which
//! runs it; the client's connection is closed as the answer begins, so it never sees it).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Default)]
struct State {
    target: Mutex<Option<SocketAddr>>,
    cut: AtomicBool,
    delay_ms: AtomicU64,
    lose_answers: AtomicU64,
}

/// A proxy on 127.0.0.1 that the test owns; dropped, it stops.
pub struct Link {
    addr: SocketAddr,
    state: Arc<State>,
    cuts: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    /// Binds a port and starts accepting (connections wait for a target, closed until then).
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind link");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let (cuts, _) = watch::channel(0u64);
        let task = {
            let state = state.clone();
            let cuts = cuts.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let target = *state.target.lock().unwrap();
                    if state.cut.load(Ordering::SeqCst) || target.is_none() {
                        drop(client);
                        continue;
                    }
                    let lose = state
                        .lose_answers
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if lose {
                        tokio::spawn(lose_answer(client, target.unwrap()));
                        continue;
                    }
                    let (state, cut_rx) = (state.clone(), cuts.subscribe());
                    tokio::spawn(carry(client, target.unwrap(), state, cut_rx));
                }
            })
        };
        Self {
            addr,
            state,
            cuts,
            task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where it forwards to.
    pub fn set_target(&self, target: SocketAddr) {
        *self.state.target.lock().unwrap() = Some(target);
    }

    /// Adds `d` to every chunk, each way.
    pub fn set_delay(&self, d: Duration) {
        self.state
            .delay_ms
            .store(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// Cuts the link: open connections are closed and new ones refused.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Heals it.
    pub fn heal(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }

    /// Loses the answers of the next `n` connections (see the module's doc).
    pub fn lose_answers(&self, n: u64) {
        self.state.lose_answers.store(n, Ordering::SeqCst);
    }
}

/// Carries `client`'s bytes to `target` until the target starts to answer, then closes
/// both connections: the request ran, its answer never arrives.
async fn lose_answer(client: TcpStream, target: SocketAddr) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut cr, cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
    });
    let mut first = [0u8; 1];
    let _ = sr.read(&mut first).await;
    up.abort();
    drop(cw);
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

async fn carry(
    client: TcpStream,
    target: SocketAddr,
    state: Arc<State>,
    mut cut: watch::Receiver<u64>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, state.clone());
    let down = pump(sr, cw, state);
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = cut.changed() => {}
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read (a one-way delay: a
/// chunk read while an earlier one waits is not delayed twice).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = Duration::from_millis(state.delay_ms.load(Ordering::SeqCst));
        if tx
            .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}
