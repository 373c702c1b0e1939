//! Signal (`MAILBOX.md` "Signal"): frame latency between the two sides of many mailboxes,
//! on one replica or across two, and the relayed-bytes ceiling of one replica.
//!
//! Setup (before the timed loop): `--pairs` mailboxes are claimed on `--url`, each gets its
//! primary side on `--url` and its companion side on `--peer-url` (default: the same
//! replica), and the run starts once both sides of every pair have heard `peer 1`. Frames
//! go both ways; frame i carries i and the instant it was timed from (ns since the run's
//! base, one clock: both sides are in this process) in its first 16 bytes, so the side that
//! receives it knows its latency.
//!
//! With `--rate` (latency): open loop, frame i is due at start + i/rate and belongs to side
//! `i % (2 * pairs)`, so each side sends `rate / (2 * pairs)` frames per second; a frame
//! that leaves more than 2 ms after it was due is timed from when it was due.
//! Without (ceiling): closed loop per side, at most `--window` of its frames in flight (a
//! frame not received within 500 ms is given up on and counted, so one the relay lost does
//! not stall its side).
//!
//! Either way every side paces itself under the relay's frame bucket (400, then 50 per
//! second per side, kept per side across reconnects): at most 360 in a burst and one per
//! 21 ms after that, so the relay never closes a side with 1008 and the buckets, not the
//! generator, bound what a pair can send. The report says how many bytes per second the
//! buckets of all pairs allowed over the run, next to what was relayed.

use super::mailbox::{mailboxes, salt_of, setup, ws_connect, Ws};
use super::*;

use bytes::{BufMut, BytesMut};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// The relay's frame bucket per side (`src/mailbox/state.rs`): burst and emission.
const RELAY_CAPACITY: i64 = 400;
const RELAY_EMISSION_US: i64 = 20_000;
/// The generator's own pacing, under the relay's.
const PACE_CAPACITY: i64 = 360;
const PACE_EMISSION_US: i64 = 21_000;
/// The largest frame the relay passes.
const MAX_FRAME: usize = 64 * 1024;
/// Closed loop: how long a side waits for its frames in flight before it gives up on them.
const GIVE_UP: Duration = Duration::from_millis(500);

#[derive(Args)]
pub struct SignalArgs {
    /// The replica of the primary sides (and of the claims).
    #[arg(long)]
    url: String,
    /// The replica of the companion sides (default: `--url`).
    #[arg(long)]
    peer_url: Option<String>,
    /// Mailboxes, one pair of sides each.
    #[arg(long, default_value_t = 20)]
    pairs: u64,
    /// Frame size, bytes (16 to 65536).
    #[arg(long, default_value_t = 1024)]
    frame_bytes: usize,
    /// Closed loop: frames of one side in flight at once.
    #[arg(long, default_value_t = 2)]
    window: u64,
    #[arg(long, default_value = "bench")]
    app: String,
    #[command(flatten)]
    c: Common,
}

/// GCRA pacing of one side, the relay's algorithm with the generator's margins.
struct Pacer {
    tat_us: i64,
}

impl Pacer {
    /// Waits until a token is there, then takes it.
    async fn take(&mut self, base: Instant) {
        let now = base.elapsed().as_micros() as i64;
        let tat = self.tat_us.max(now);
        let tolerance = PACE_EMISSION_US * (PACE_CAPACITY - 1);
        if tat - now > tolerance {
            tokio::time::sleep(Duration::from_micros((tat - now - tolerance) as u64)).await;
        }
        self.tat_us = tat + PACE_EMISSION_US;
    }
}

/// One side's counters.
#[derive(Default)]
struct SideState {
    /// Frames this side sent.
    sent: AtomicU64,
    /// Frames of this side that the other side received.
    acked: AtomicU64,
    /// Rung when `acked` grows.
    notify: tokio::sync::Notify,
}

/// Counters of the whole run.
#[derive(Default)]
struct Totals {
    frames: AtomicU64,
    bytes: AtomicU64,
    /// ns since the base of the last frame received.
    last_ns: AtomicU64,
    /// Closed loop: frames given up on (not received within a second).
    given_up: AtomicU64,
}

struct Plan {
    base: Instant,
    start: Instant,
    deadline: Instant,
    rate: Option<f64>,
    slots: u64,
    max: u64,
    frame_bytes: usize,
    window: u64,
    filler: Bytes,
    next: AtomicU64,
}

impl Plan {
    fn frame(&self, i: u64, from: Instant) -> Bytes {
        let t = from.saturating_duration_since(self.base).as_nanos() as u64;
        let mut b = BytesMut::with_capacity(self.frame_bytes);
        b.put_u64(i);
        b.put_u64(t);
        b.put_slice(&self.filler[..self.frame_bytes - 16]);
        b.freeze()
    }
}

type Sink = SplitSink<Ws, Message>;

/// One side's sending loop; hands its sink back.
async fn send_side(
    mut sink: Sink,
    me: usize,
    plan: Arc<Plan>,
    sides: Arc<Vec<SideState>>,
    totals: Arc<Totals>,
) -> (Sink, u64) {
    let st = &sides[me];
    let mut pacer = Pacer { tat_us: 0 };
    let mut errors = 0u64;
    let mut j = 0u64;
    let mut given_up = 0u64;
    loop {
        let (i, from) = match plan.rate {
            Some(r) => {
                let i = j * plan.slots + me as u64;
                j += 1;
                if i >= plan.max {
                    break;
                }
                let due = plan.start + Duration::from_secs_f64(i as f64 / r);
                if due >= plan.deadline {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                pacer.take(plan.base).await;
                let left = Instant::now();
                (
                    i,
                    if left.duration_since(due) > Duration::from_millis(2) {
                        due
                    } else {
                        left
                    },
                )
            }
            None => {
                // At most `window` in flight; frames not received within GIVE_UP are given
                // up on (counted), so a frame the relay lost does not stall the side for
                // good. One that still arrives later only makes the side's count generous.
                loop {
                    let notified = st.notify.notified();
                    let inflight = st
                        .sent
                        .load(Ordering::Relaxed)
                        .saturating_sub(st.acked.load(Ordering::Relaxed) + given_up);
                    if inflight < plan.window || Instant::now() >= plan.deadline {
                        break;
                    }
                    if tokio::time::timeout(GIVE_UP, notified).await.is_err() {
                        given_up += inflight;
                        totals.given_up.fetch_add(inflight, Ordering::Relaxed);
                    }
                }
                pacer.take(plan.base).await;
                if Instant::now() >= plan.deadline {
                    break;
                }
                let i = plan.next.fetch_add(1, Ordering::Relaxed);
                if i >= plan.max {
                    break;
                }
                (i, Instant::now())
            }
        };
        st.sent.fetch_add(1, Ordering::Relaxed);
        if sink
            .send(Message::Binary(plan.frame(i, from)))
            .await
            .is_err()
        {
            errors += 1;
            break;
        }
    }
    (sink, errors)
}

/// One side's receiving loop: frames from the other side, `peer 0`, closes.
async fn receive_side(
    mut stream: SplitStream<Ws>,
    peer: usize,
    plan: Arc<Plan>,
    sides: Arc<Vec<SideState>>,
    totals: Arc<Totals>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> WorkerResult {
    let mut res = WorkerResult::new();
    loop {
        tokio::select! {
            msg = stream.next() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    let now = plan.base.elapsed().as_nanos() as u64;
                    if b.len() < 16 {
                        res.count("short frame");
                        continue;
                    }
                    let t = u64::from_be_bytes(b[8..16].try_into().unwrap_or_default());
                    let _ = res.hist.record((now.saturating_sub(t) / 1000).clamp(1, 120_000_000));
                    totals.frames.fetch_add(1, Ordering::Relaxed);
                    totals.bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
                    totals.last_ns.fetch_max(now, Ordering::Relaxed);
                    sides[peer].acked.fetch_add(1, Ordering::Relaxed);
                    sides[peer].notify.notify_one();
                }
                Some(Ok(Message::Text(t))) => match t.as_str() {
                    "peer 1" | "pong" => {}
                    "peer 0" => res.count("peer 0"),
                    _ => res.count("other text"),
                },
                Some(Ok(Message::Close(f))) => {
                    res.count(&format!("closed {}", f.map_or(0, |f| u16::from(f.code))));
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    res.count("connection lost");
                    break;
                }
            },
            _ = stop.changed() => break,
        }
    }
    res
}

/// Reads until `peer 1` (10 s at most).
async fn wait_peer(ws: &mut Ws) -> anyhow::Result<()> {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(until, ws.next()).await {
            Err(_) => anyhow::bail!("no peer 1 within 10 s"),
            Ok(Some(Ok(Message::Text(t)))) if t.as_str() == "peer 1" => return Ok(()),
            Ok(Some(Ok(Message::Close(f)))) => anyhow::bail!("closed before peer 1: {f:?}"),
            Ok(Some(Err(e))) => anyhow::bail!("before peer 1: {e}"),
            Ok(None) => anyhow::bail!("connection lost before peer 1"),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// `relay-bench signal`.
pub async fn run_signal(a: SignalArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (16..=MAX_FRAME).contains(&a.frame_bytes),
        "--frame-bytes is 16 to {MAX_FRAME}"
    );
    let primary = loopback_targets(std::slice::from_ref(&a.url))?;
    let peer_url = a.peer_url.clone().unwrap_or_else(|| a.url.clone());
    let companion = loopback_targets(std::slice::from_ref(&peer_url))?[0].0;
    let pairs = a.pairs.max(1);
    if let Some(r) = a.c.rate {
        let per_side = r / (2 * pairs) as f64;
        anyhow::ensure!(
            per_side <= 1e6 / PACE_EMISSION_US as f64,
            "{per_side:.1} frames/s per side is over the relay's frame bucket: raise --pairs"
        );
    }
    let salt = salt_of(&a.c);
    let mbs = Arc::new(mailboxes(salt, pairs));
    setup(&primary, 8, &a.app, mbs.clone(), 0, 0).await?;
    // Both sides of every pair, 8 pairs at a time, each waiting for `peer 1`.
    let a_addr = primary[0].0;
    let mut opened: Vec<(Ws, Ws)> = Vec::new();
    for chunk in (0..pairs as usize).collect::<Vec<_>>().chunks(8) {
        let mut tasks = Vec::new();
        for &k in chunk {
            let mb = mbs[k].clone();
            let app = a.app.clone();
            tasks.push(tokio::spawn(async move {
                let base = format!("/v1/{app}/mailbox/{}/signal", mb.id);
                let (pp, cp) = (format!("{base}/primary"), format!("{base}/companion"));
                let (p, c) = tokio::join!(
                    ws_connect(a_addr, &pp, &mb.auth),
                    ws_connect(companion, &cp, &mb.auth)
                );
                let (mut p, mut c) = (p?, c?);
                let (x, y) = tokio::join!(wait_peer(&mut p), wait_peer(&mut c));
                x?;
                y?;
                anyhow::Ok((p, c))
            }));
        }
        for t in tasks {
            opened.push(t.await??);
        }
    }
    let mut filler = vec![0u8; MAX_FRAME];
    let mut x = salt;
    for chunk in filler.chunks_mut(8) {
        x = splitmix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let slots = 2 * pairs;
    let sides: Arc<Vec<SideState>> = Arc::new((0..slots).map(|_| SideState::default()).collect());
    let totals = Arc::new(Totals::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut probe = Probe::start(&a.c).await?;
    probe.also_internal = super::mailbox::MAILBOX_SCRIPT_INTERNAL;
    let start = Instant::now();
    let plan = Arc::new(Plan {
        base: start,
        start,
        deadline: start + Duration::from_secs_f64(a.c.duration),
        rate: a.c.rate,
        slots,
        max: a.c.max_requests,
        frame_bytes: a.frame_bytes,
        window: a.window.max(1),
        filler: Bytes::from(filler),
        next: AtomicU64::new(0),
    });
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for (k, (p, c)) in opened.into_iter().enumerate() {
        for (s, ws) in [(0usize, p), (1usize, c)] {
            let me = 2 * k + s;
            let peer = 2 * k + (1 - s);
            let (sink, stream) = ws.split();
            senders.push(tokio::spawn(send_side(
                sink,
                me,
                plan.clone(),
                sides.clone(),
                totals.clone(),
            )));
            receivers.push(tokio::spawn(receive_side(
                stream,
                peer,
                plan.clone(),
                sides.clone(),
                totals.clone(),
                stop_rx.clone(),
            )));
        }
    }
    let mut sinks = Vec::new();
    let mut send_errors = 0u64;
    for t in senders {
        let (sink, e) = t.await?;
        sinks.push(sink);
        send_errors += e;
    }
    let send_s = start.elapsed().as_secs_f64();
    let sent: u64 = sides.iter().map(|s| s.sent.load(Ordering::Relaxed)).sum();
    // Frames still in flight: up to 2 s.
    let wait = Instant::now();
    while totals.frames.load(Ordering::Relaxed) < sent && wait.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    let mut res = WorkerResult::new();
    for t in receivers {
        res.merge(t.await?);
    }
    let received = totals.frames.load(Ordering::Relaxed);
    let bytes = totals.bytes.load(Ordering::Relaxed);
    let last_s = totals.last_ns.load(Ordering::Relaxed) as f64 / 1e9;
    let relay_s = if last_s > 0.0 { last_s } else { send_s };
    let mut out_counts = res.outcomes.clone();
    out_counts.insert("relayed".into(), received);
    out_counts.insert("lost".into(), sent.saturating_sub(received));
    res.outcomes = out_counts;
    // What the buckets of every side allowed over the run.
    let allowed_frames =
        (slots as f64) * (RELAY_CAPACITY as f64 + relay_s * 1e6 / RELAY_EMISSION_US as f64);
    let mut extra = serde_json::Map::new();
    extra.insert("url".into(), json!(a.url));
    extra.insert("peer_url".into(), json!(peer_url));
    extra.insert("cross".into(), json!(peer_url != a.url));
    extra.insert("pairs".into(), json!(pairs));
    extra.insert("frame_bytes".into(), json!(a.frame_bytes));
    extra.insert(
        "window".into(),
        json!(if a.c.rate.is_none() {
            Some(a.window.max(1))
        } else {
            None
        }),
    );
    extra.insert("frames_sent".into(), json!(sent));
    extra.insert("frames_received".into(), json!(received));
    extra.insert("frames_lost".into(), json!(sent.saturating_sub(received)));
    extra.insert(
        "frames_given_up".into(),
        json!(totals.given_up.load(Ordering::Relaxed)),
    );
    extra.insert("send_errors".into(), json!(send_errors));
    extra.insert("bytes_received".into(), json!(bytes));
    extra.insert("relay_s".into(), json!(relay_s));
    extra.insert("relayed_bytes_per_s".into(), json!(bytes as f64 / relay_s));
    extra.insert(
        "relayed_mb_per_s".into(),
        json!(bytes as f64 / relay_s / 1e6),
    );
    extra.insert(
        "bucket_allowed_mb_per_s".into(),
        json!(allowed_frames * a.frame_bytes as f64 / relay_s / 1e6),
    );
    extra.insert(
        "per_side_rate".into(),
        json!(a.c.rate.map(|r| r / slots as f64)),
    );
    let mut out = report("signal", &a.c, extra, &res, send_s);
    out.insert("requests".into(), json!(sent));
    out.insert("rps".into(), json!(received as f64 / relay_s));
    probe.finish(&mut out, received, received).await;
    let relay_cpu = out
        .get("processes")
        .and_then(|p| p.get("relay"))
        .and_then(|r| r.get("cpu_s"))
        .and_then(Value::as_f64);
    if let Some(g) = out.get("generator_cpu_s").and_then(Value::as_f64) {
        out.insert("generator_cores".into(), json!(g / relay_s));
    }
    if let Some(cpu) = relay_cpu {
        out.insert("relay_cores".into(), json!(cpu / relay_s));
        out.insert(
            "relay_cpu_us_per_mb".into(),
            json!(if bytes > 0 {
                cpu * 1e6 / (bytes as f64 / 1e6)
            } else {
                0.0
            }),
        );
    }
    // Leave politely: a close frame on every side, concurrently, a second at most each.
    let closing: Vec<_> = sinks
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), s.close()).await;
            })
        })
        .collect();
    for c in closing {
        let _ = c.await;
    }
    eprintln!(
        "signal {}: {} pairs ({} -> {}), {} frames of {} B sent, {} received ({} lost), {:.1} MB/s relayed over {:.2}s (the buckets allowed {:.1} MB/s); relay cores {}",
        a.c.label,
        pairs,
        a.url,
        peer_url,
        sent,
        a.frame_bytes,
        received,
        sent.saturating_sub(received),
        bytes as f64 / relay_s / 1e6,
        relay_s,
        allowed_frames * a.frame_bytes as f64 / relay_s / 1e6,
        out.get("relay_cores").and_then(Value::as_f64).map_or("n/a".to_owned(), |c| format!("{c:.2}")),
    );
    emit(out, &a.c)
}
