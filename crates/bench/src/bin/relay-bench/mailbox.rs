//! Mailboxes (`MAILBOX.md`): envelope PUT and list throughput against a relay (or
//! bench-intake, the HTTP part alone), the mailbox script alone on Redis, and watch
//! notification latency across replicas.
//!
//! Every phase spreads its requests over many mailboxes, claimed (and for a list, filled)
//! before the timed loop, because each mailbox has its own buckets (envelopes 120 then 2/s,
//! reads 240 then 4/s, sockets 20 then 1 per 5 s): request i goes to mailbox `i % M` and,
//! for a PUT, to its fresh seq `depth + i / M + 1`, so no mailbox sees more than
//! `--per-mailbox` requests of a run. Mailbox ids and bearers are fresh per run (the salt).

use super::*;

use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Commands inside `mailbox.lua` that `SCRIPT_INTERNAL` does not list: not round trips
/// (`time` is the store's clock the script reads).
pub const MAILBOX_SCRIPT_INTERNAL: &[&str] = &["spublish", "time", "zremrangebyscore"];

use sealrelay::testing::mailbox_lua;

/// One mailbox of a run: its id and its bearer.
#[derive(Clone)]
pub struct Mb {
    pub id: String,
    pub bearer: String,
    pub auth: String,
}

/// The run's `n` mailboxes, fresh for the salt.
pub fn mailboxes(salt: u64, n: u64) -> Vec<Mb> {
    (0..n)
        .map(|k| {
            let t = splitmix(salt ^ splitmix(k ^ 0xB0A7));
            let bearer = format!("tok{t:016x}{k:08x}.bench");
            Mb {
                id: format!("bench{salt:016x}{k:08x}"),
                auth: format!("Bearer {bearer}"),
                bearer,
            }
        })
        .collect()
}

/// The run's salt (`--salt`, else the clock).
pub fn salt_of(c: &Common) -> u64 {
    c.salt.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

/// An envelope's bytes: opaque, `n` of them, different per (mailbox, seq).
pub fn envelope_bytes(n: usize, k: u64, seq: u64) -> Bytes {
    let mut x = splitmix(k.rotate_left(32) ^ seq);
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        x = splitmix(x);
        for b in x.to_le_bytes() {
            if v.len() < n {
                v.push(b);
            }
        }
    }
    Bytes::from(v)
}

/// One HTTP/1.1 request over a kept-alive connection (opened on first use, dropped on error).
pub async fn h1(
    sender: &mut Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    addr: SocketAddr,
    host: &str,
    method: hyper::Method,
    path: &str,
    auth: &str,
    body: Bytes,
) -> anyhow::Result<(u16, Bytes)> {
    let r = async {
        if sender.is_none() {
            *sender = Some(connect_h1(addr).await?);
        }
        let s = sender.as_mut().unwrap();
        s.ready().await?;
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", host)
            .header("authorization", auth);
        if !body.is_empty() {
            req = req.header("content-type", "application/octet-stream");
        }
        let resp = s.send_request(req.body(Full::new(body))?).await?;
        let status = resp.status().as_u16();
        let b = resp.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, b))
    }
    .await;
    if r.is_err() {
        *sender = None;
    }
    r
}

fn base(app: &str, mb: &Mb) -> String {
    format!("/v1/{app}/mailbox/{}", mb.id)
}

/// Claims every mailbox and puts `depth` envelopes (seq 1..=depth) in each, over
/// `connections` connections spread over `targets`; fails unless every one was stored.
pub async fn setup(
    targets: &[(SocketAddr, String)],
    connections: usize,
    app: &str,
    mbs: Arc<Vec<Mb>>,
    depth: u64,
    body_bytes: usize,
) -> anyhow::Result<()> {
    let conns = connections.max(1);
    let mut tasks = Vec::new();
    for t in 0..conns {
        let (addr, host) = targets[t % targets.len()].clone();
        let (mbs, app) = (mbs.clone(), app.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut sender = None;
            let mut bad: Option<String> = None;
            let mut k = t;
            while k < mbs.len() {
                let mb = &mbs[k];
                let p = base(&app, mb);
                let mut answers = vec![(
                    "claim",
                    h1(
                        &mut sender,
                        addr,
                        &host,
                        hyper::Method::PUT,
                        &p,
                        &mb.auth,
                        Bytes::new(),
                    )
                    .await,
                )];
                for seq in 1..=depth {
                    let body = envelope_bytes(body_bytes, k as u64, seq);
                    answers.push((
                        "put",
                        h1(
                            &mut sender,
                            addr,
                            &host,
                            hyper::Method::PUT,
                            &format!("{p}/p2c/{seq}"),
                            &mb.auth,
                            body,
                        )
                        .await,
                    ));
                }
                for (what, a) in answers {
                    match a {
                        Ok((201 | 204, _)) => {}
                        Ok((s, b)) => {
                            bad.get_or_insert(format!("{what}: {}", outcome_of(s, &b)));
                        }
                        Err(e) => {
                            bad.get_or_insert(format!("{what}: {e}"));
                        }
                    }
                }
                k += conns;
            }
            bad
        }));
    }
    for t in tasks {
        if let Some(bad) = t.await? {
            anyhow::bail!("mailbox setup failed ({bad})");
        }
    }
    Ok(())
}

/// The outcome of one timed request: `201 stored`, `200 listed` (with exactly `depth`
/// envelopes), else the status and the error code.
fn mb_outcome(op: &str, status: u16, body: &[u8], depth: u64) -> String {
    match (op, status) {
        ("put", 201) => "201 stored".to_owned(),
        ("put", 204) => "204 same".to_owned(),
        ("list", 200) => {
            let n = body.windows(6).filter(|w| w == b"\"seq\":").count() as u64;
            if n == depth {
                "200 listed".to_owned()
            } else {
                format!("200 listed {n} of {depth}")
            }
        }
        _ => outcome_of(status, body),
    }
}

#[derive(Args)]
pub struct MailboxArgs {
    /// Relay (or bench-intake) URL; repeat to spread connections over replicas.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// Keep-alive connections (each carries one request at a time).
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// `put` (an envelope to a fresh seq) or `list` (`GET .../p2c?after=0&limit=64`).
    #[arg(long, value_parser = ["put", "list"])]
    op: String,
    /// The app (`RELAY_APPS`).
    #[arg(long, default_value = "bench")]
    app: String,
    /// Timed requests per mailbox at most: `ceil(--max-requests / this)` mailboxes.
    #[arg(long, default_value_t = 100)]
    per_mailbox: u64,
    /// Envelope size, bytes.
    #[arg(long, default_value_t = 256)]
    body_bytes: usize,
    /// Envelopes put in each mailbox before the timed loop (what a list answers); default 0
    /// for put, 1 for list.
    #[arg(long)]
    depth: Option<u64>,
    #[command(flatten)]
    c: Common,
}

/// `relay-bench mailbox`: envelope PUTs or lists, closed loop (or `--rate`).
pub async fn run_mailbox(a: MailboxArgs) -> anyhow::Result<()> {
    let targets = loopback_targets(&a.urls)?;
    let salt = salt_of(&a.c);
    let n = a.c.max_requests.div_ceil(a.per_mailbox.max(1)).max(1);
    let mbs = Arc::new(mailboxes(salt, n));
    let depth = a.depth.unwrap_or(if a.op == "list" { 1 } else { 0 });
    let t0 = Instant::now();
    setup(
        &targets,
        a.connections,
        &a.app,
        mbs.clone(),
        depth,
        a.body_bytes,
    )
    .await?;
    let setup_s = t0.elapsed().as_secs_f64();
    let mut probe = Probe::start(&a.c).await?;
    probe.also_internal = MAILBOX_SCRIPT_INTERNAL;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for t in 0..a.connections.max(1) {
        let (addr, host) = targets[t % targets.len()].clone();
        let (ctl, mbs, app, op) = (ctl.clone(), mbs.clone(), a.app.clone(), a.op.clone());
        let body_bytes = a.body_bytes;
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            let mut sender = None;
            let m = mbs.len() as u64;
            while let Some((i, from)) = ctl.ticket().await {
                let k = i % m;
                let mb = &mbs[k as usize];
                let (method, path, body) = if op == "put" {
                    let seq = depth + i / m + 1;
                    (
                        hyper::Method::PUT,
                        format!("{}/p2c/{seq}", base(&app, mb)),
                        envelope_bytes(body_bytes, k, seq),
                    )
                } else {
                    (
                        hyper::Method::GET,
                        format!("{}/p2c?after=0&limit=64", base(&app, mb)),
                        Bytes::new(),
                    )
                };
                match h1(&mut sender, addr, &host, method, &path, &mb.auth, body).await {
                    Ok((s, b)) => res.record(from, &mb_outcome(&op, s, &b, depth)),
                    Err(_) => res.record(from, "connection error"),
                }
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
    let want = if a.op == "put" {
        "201 stored"
    } else {
        "200 listed"
    };
    let ok = res.outcomes.get(want).copied().unwrap_or(0);
    let limited = res.outcomes.get("429 rate_limited").copied().unwrap_or(0);
    let mut extra = serde_json::Map::new();
    extra.insert("urls".into(), json!(a.urls));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("op".into(), json!(a.op));
    extra.insert("mailboxes".into(), json!(n));
    extra.insert("depth".into(), json!(depth));
    extra.insert("body_bytes".into(), json!(a.body_bytes));
    extra.insert("setup_s".into(), json!(setup_s));
    extra.insert("ok".into(), json!(ok));
    extra.insert("ok_per_s".into(), json!(ok as f64 / elapsed));
    extra.insert("forwarded".into(), json!(ok));
    extra.insert("rate_limited".into(), json!(limited));
    extra.insert(
        "rate_limited_share".into(),
        json!(if done > 0 {
            limited as f64 / done as f64
        } else {
            0.0
        }),
    );
    let mut out = report("mailbox", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, ok).await;
    // Store round trips per request: EVALSHA minus the background ones (the retry-queue
    // worker's claim polls, one ZRANGEBYSCORE inside each, and the queue gauges' stats
    // scripts, one ZCARD inside each; a stored PUT runs one ZCARD inside mailbox.lua too, so
    // those are not background), and any other command from the client.
    if let Some(delta) = out
        .get("redis_commandstats_delta")
        .and_then(Value::as_object)
    {
        let d = |k: &str| delta.get(k).and_then(Value::as_u64).unwrap_or(0);
        let zcard_inside = if a.op == "put" {
            ok + res.outcomes.get("507 mailbox_full").copied().unwrap_or(0)
        } else {
            0
        };
        let background = d("zrangebyscore") + d("zcard").saturating_sub(zcard_inside);
        let path = d("evalsha").saturating_sub(background);
        let other: u64 = delta
            .iter()
            .filter(|(k, _)| {
                !SCRIPT_INTERNAL.contains(&k.as_str())
                    && !MAILBOX_SCRIPT_INTERNAL.contains(&k.as_str())
                    && !matches!(k.as_str(), "evalsha" | "info" | "dbsize")
            })
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        let per = |x: u64| {
            if done > 0 {
                x as f64 / done as f64
            } else {
                0.0
            }
        };
        out.insert("redis_background_calls".into(), json!(background));
        out.insert("redis_evalsha_request_path".into(), json!(path));
        out.insert(
            "redis_evalsha_request_path_per_request".into(),
            json!(per(path)),
        );
        out.insert("redis_other_client_calls".into(), json!(other));
        out.insert(
            "redis_other_client_calls_per_request".into(),
            json!(per(other)),
        );
    }
    eprintln!(
        "mailbox {} {}: {} mailboxes (set up in {:.2}s, depth {}), {} of {} answered {}, {} rate limited ({:.1}%)",
        a.op,
        a.c.label,
        n,
        setup_s,
        depth,
        ok,
        done,
        want,
        limited,
        100.0 * limited as f64 / done.max(1) as f64
    );
    if let Some(p) = out.get("redis_evalsha_request_path_per_request") {
        eprintln!(
            "  redis: {p} EVALSHA per request on the request path (background {}), {} other client calls",
            out["redis_background_calls"], out["redis_other_client_calls"]
        );
    }
    emit(out, &a.c)
}

// ---------------------------------------------------------------------------------------
// mailbox-redis: the mailbox script alone

#[derive(Args)]
pub struct MailboxRedisArgs {
    /// `put` or `list`, the same requests as `relay-bench mailbox`.
    #[arg(long, value_parser = ["put", "list"])]
    op: String,
    /// Redis connections (the relay's RELAY_REDIS_POOL_SIZE is 4 by default).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Commands in flight at once (pipelined over the connections, like the relay).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Key prefix (the relay's default).
    #[arg(long, default_value = "sealrelay:")]
    prefix: String,
    /// The app (part of the mailbox's name, as in the relay).
    #[arg(long, default_value = "bench")]
    app: String,
    #[arg(long, default_value_t = 100)]
    per_mailbox: u64,
    #[arg(long, default_value_t = 256)]
    body_bytes: usize,
    #[arg(long)]
    depth: Option<u64>,
    /// The relay's RELAY_MAILBOX_MAX_ENVELOPES as the bench sets it.
    #[arg(long, default_value_t = 100_000)]
    max_envelopes: u64,
    #[command(flatten)]
    c: Common,
}

/// The relay's keys and channel of a mailbox (`src/store/mailbox/redis.rs`).
fn mb_keys(prefix: &str, app: &str, id: &str) -> (Vec<String>, String) {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{app}/{id}").as_bytes());
    let name: String = d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let k = format!("{prefix}{{mb:{name}}}");
    (
        vec![
            k.clone(),
            format!("{k}:e:p2c"),
            format!("{k}:e:c2p"),
            format!("{k}:s:p2c"),
            format!("{k}:s:c2p"),
        ],
        format!("{k}:ev"),
    )
}

fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `relay-bench mailbox-redis`: EVALSHA of the relay's mailbox script with its keys and
/// arguments, for the same requests as `relay-bench mailbox`.
pub async fn run_mailbox_redis(a: MailboxRedisArgs) -> anyhow::Result<()> {
    use fred::prelude::*;
    use fred::types::Value as RValue;
    let url =
        a.c.redis_url
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--redis-url is required"))?;
    redis_addr(&url)?;
    let pool = Builder::from_config(Config::from_url(&url)?).build_pool(a.connections.max(1))?;
    pool.init().await?;
    let sha: String = pool.next().script_load(mailbox_lua()).await?;
    let salt = salt_of(&a.c);
    let n = a.c.max_requests.div_ceil(a.per_mailbox.max(1)).max(1);
    let depth = a.depth.unwrap_or(if a.op == "list" { 1 } else { 0 });
    // Per mailbox: keys, channel, bearer hash (what the relay passes).
    let mbs: Arc<Vec<(Vec<String>, String, String)>> = Arc::new(
        mailboxes(salt, n)
            .into_iter()
            .map(|mb| {
                let (keys, ch) = mb_keys(&a.prefix, &a.app, &mb.id);
                (keys, ch, sha256_hex(&mb.bearer))
            })
            .collect(),
    );
    let idle_ms = "2592000000".to_owned();
    let max_env = a.max_envelopes.to_string();
    let call = {
        let (pool, sha, idle_ms, max_env) = (pool.clone(), sha.clone(), idle_ms, max_env);
        move |k: usize,
              verb: &'static str,
              rest: Vec<RValue>,
              mbs: Arc<Vec<(Vec<String>, String, String)>>| {
            let (pool, sha, idle_ms, max_env) =
                (pool.clone(), sha.clone(), idle_ms.clone(), max_env.clone());
            async move {
                let (keys, ch, bearer) = &mbs[k];
                let now_ms = now_ms().to_string();
                let mut args: Vec<RValue> = vec![
                    verb.into(),
                    bearer.as_str().into(),
                    now_ms.into(),
                    idle_ms.into(),
                    max_env.into(),
                    ch.as_str().into(),
                ];
                args.extend(rest);
                let r: Result<Vec<RValue>, _> =
                    pool.next().evalsha(sha.as_str(), keys.clone(), args).await;
                r.ok()
                    .and_then(|v| v.first().and_then(|c| c.as_i64()))
                    .unwrap_or(-1)
            }
        }
    };
    // Setup: claim, and fill for a list, like the HTTP runs.
    {
        let mut tasks = Vec::new();
        let conc = a.concurrency.max(1);
        for t in 0..conc {
            let (call, mbs) = (call.clone(), mbs.clone());
            let body_bytes = a.body_bytes;
            tasks.push(tokio::spawn(async move {
                let mut bad = 0u64;
                let mut k = t;
                while k < mbs.len() {
                    if !matches!(call(k, "claim", vec![], mbs.clone()).await, 3 | 4) {
                        bad += 1;
                    }
                    for seq in 1..=depth {
                        let rest = vec![
                            "p2c".into(),
                            seq.to_string().into(),
                            RValue::Bytes(envelope_bytes(body_bytes, k as u64, seq)),
                            "0".into(),
                        ];
                        if call(k, "put", rest, mbs.clone()).await != 5 {
                            bad += 1;
                        }
                    }
                    k += conc;
                }
                bad
            }));
        }
        for t in tasks {
            let bad = t.await?;
            anyhow::ensure!(bad == 0, "mailbox-redis setup: {bad} calls failed");
        }
    }
    let mut probe = Probe::start(&a.c).await?;
    probe.also_internal = MAILBOX_SCRIPT_INTERNAL;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (ctl, call, mbs, op) = (ctl.clone(), call.clone(), mbs.clone(), a.op.clone());
        let body_bytes = a.body_bytes;
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            let m = mbs.len() as u64;
            while let Some((i, from)) = ctl.ticket().await {
                let k = i % m;
                let code = if op == "put" {
                    let seq = depth + i / m + 1;
                    let rest = vec![
                        "p2c".into(),
                        seq.to_string().into(),
                        RValue::Bytes(envelope_bytes(body_bytes, k, seq)),
                        "0".into(),
                    ];
                    call(k as usize, "put", rest, mbs.clone()).await
                } else {
                    let rest = vec!["p2c".into(), "0".into(), "64".into()];
                    call(k as usize, "list", rest, mbs.clone()).await
                };
                let outcome = match code {
                    5 => "stored",
                    9 => "listed",
                    2 => "rate_limited",
                    6 => "same",
                    8 => "full",
                    0 | 1 => "refused",
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
    let ok = res
        .outcomes
        .get(if a.op == "put" { "stored" } else { "listed" })
        .copied()
        .unwrap_or(0);
    let mut extra = serde_json::Map::new();
    extra.insert("op".into(), json!(a.op));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("concurrency".into(), json!(a.concurrency));
    extra.insert("mailboxes".into(), json!(n));
    extra.insert("depth".into(), json!(depth));
    extra.insert("body_bytes".into(), json!(a.body_bytes));
    extra.insert("ok".into(), json!(ok));
    extra.insert("ok_per_s".into(), json!(ok as f64 / elapsed));
    let mut out = report("mailbox-redis", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, ok).await;
    let _ = pool.quit().await;
    emit(out, &a.c)
}

// ---------------------------------------------------------------------------------------
// watch: notification latency across replicas

/// A mailbox socket (watch or signal), offering `zerobyte.v1` with the bearer in the header.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a mailbox socket at `path` on `addr` (Nagle off).
pub async fn ws_connect(addr: SocketAddr, path: &str, auth: &str) -> anyhow::Result<Ws> {
    let mut req = format!("ws://{addr}{path}").into_client_request()?;
    let h = req.headers_mut();
    h.insert("authorization", auth.parse()?);
    h.insert("sec-websocket-protocol", "zerobyte.v1".parse()?);
    let (ws, resp) = tokio_tungstenite::connect_async_with_config(req, None, true).await?;
    anyhow::ensure!(
        resp.headers()
            .get("sec-websocket-protocol")
            .is_some_and(|v| v == "zerobyte.v1"),
        "the relay did not select zerobyte.v1"
    );
    Ok(ws)
}

#[derive(Args)]
pub struct WatchArgs {
    /// The replica the PUTs go to (B).
    #[arg(long)]
    url: String,
    /// The replica the watches are on (A).
    #[arg(long)]
    watch_url: String,
    /// Keep-alive connections for the PUTs.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    #[arg(long, default_value = "bench")]
    app: String,
    /// Mailboxes (one watch each); 0: enough that none gets more than 100 PUTs.
    #[arg(long, default_value_t = 0)]
    mailboxes: u64,
    #[arg(long, default_value_t = 256)]
    body_bytes: usize,
    #[command(flatten)]
    c: Common,
}

/// `relay-bench watch`: a watch on replica A on every mailbox, PUTs open loop on replica B;
/// the latency of each PUT is from when it left (or was due, if it left more than 2 ms
/// late) to its `seq <n>` on A's socket, on this process's one clock.
pub async fn run_watch(a: WatchArgs) -> anyhow::Result<()> {
    let put = loopback_targets(std::slice::from_ref(&a.url))?;
    let watch = loopback_targets(std::slice::from_ref(&a.watch_url))?[0].0;
    let planned = match a.c.rate {
        Some(r) => (r * a.c.duration).ceil() as u64 + 1,
        None => a.c.max_requests,
    }
    .min(a.c.max_requests);
    let n = if a.mailboxes > 0 {
        a.mailboxes
    } else {
        planned.div_ceil(100).max(1)
    };
    let salt = salt_of(&a.c);
    let mbs = Arc::new(mailboxes(salt, n));
    setup(&put, a.connections, &a.app, mbs.clone(), 0, a.body_bytes).await?;
    // One watch per mailbox on A, 16 upgrades at a time.
    let base_t = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..planned).map(|_| AtomicU64::new(0)).collect());
    let notified_so_far = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut sockets = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let mut opening = Vec::new();
        for &k in chunk {
            let mb = mbs[k as usize].clone();
            let path = format!("{}/p2c/watch", base(&a.app, &mb));
            opening.push(tokio::spawn(async move {
                ws_connect(watch, &path, &mb.auth).await
            }));
        }
        for (o, &k) in opening.into_iter().zip(chunk) {
            sockets.push((k, o.await??));
        }
    }
    // Every watch is subscribed before its upgrade is answered; a moment for the sockets'
    // tasks to start.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut readers = Vec::new();
    for (k, mut ws) in sockets {
        let (sent, mut stop, m) = (sent.clone(), stop_rx.clone(), n);
        let so_far = notified_so_far.clone();
        readers.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            loop {
                tokio::select! {
                    msg = ws.next() => match msg {
                        Some(Ok(Message::Text(t))) => {
                            let Some(seq) = t.as_str().strip_prefix("seq ").and_then(|s| s.parse::<u64>().ok()) else {
                                res.count("other text");
                                continue;
                            };
                            let i = (seq.saturating_sub(1)) * m + k;
                            let at = sent.get(i as usize).map_or(0, |t| t.load(Ordering::Acquire));
                            if at == 0 {
                                res.count("unknown seq");
                                continue;
                            }
                            let now = base_t.elapsed().as_nanos() as u64;
                            let us = (now.saturating_sub(at - 1) / 1000).max(1);
                            let _ = res.hist.record(us.min(120_000_000));
                            res.count("notified");
                            so_far.fetch_add(1, Ordering::Relaxed);
                        }
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
                    _ = stop.changed() => {
                        let _ = ws.close(None).await;
                        break;
                    }
                }
            }
            res
        }));
    }
    let mut probe = Probe::start(&a.c).await?;
    probe.also_internal = MAILBOX_SCRIPT_INTERNAL;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for t in 0..a.connections.max(1) {
        let (addr, host) = put[t % put.len()].clone();
        let (ctl, mbs, app, sent) = (ctl.clone(), mbs.clone(), a.app.clone(), sent.clone());
        let body_bytes = a.body_bytes;
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            let mut sender = None;
            let m = mbs.len() as u64;
            while let Some((i, from)) = ctl.ticket().await {
                let k = i % m;
                let mb = &mbs[k as usize];
                let seq = i / m + 1;
                if let Some(slot) = sent.get(i as usize) {
                    let at = from.saturating_duration_since(base_t).as_nanos() as u64 + 1;
                    slot.store(at, Ordering::Release);
                }
                let path = format!("{}/p2c/{seq}", base(&app, mb));
                let body = envelope_bytes(body_bytes, k, seq);
                match h1(
                    &mut sender,
                    addr,
                    &host,
                    hyper::Method::PUT,
                    &path,
                    &mb.auth,
                    body,
                )
                .await
                {
                    Ok((s, b)) => res.record(from, &mb_outcome("put", s, &b, 0)),
                    Err(_) => res.record(from, "connection error"),
                }
            }
            res
        }));
    }
    let mut puts = WorkerResult::new();
    for t in tasks {
        puts.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    let stored = puts.outcomes.get("201 stored").copied().unwrap_or(0);
    // Stragglers: up to 2 s for the last notifications.
    let wait = Instant::now();
    while notified_so_far.load(Ordering::Relaxed) < stored
        && wait.elapsed() < Duration::from_secs(2)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    let mut notes = WorkerResult::new();
    for r in readers {
        notes.merge(r.await?);
    }
    let notified = notes.outcomes.get("notified").copied().unwrap_or(0);
    let done: u64 = puts.outcomes.values().sum();
    let mut extra = serde_json::Map::new();
    extra.insert("url".into(), json!(a.url));
    extra.insert("watch_url".into(), json!(a.watch_url));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("mailboxes".into(), json!(n));
    extra.insert("body_bytes".into(), json!(a.body_bytes));
    extra.insert("stored".into(), json!(stored));
    extra.insert("notified".into(), json!(notified));
    extra.insert("missing".into(), json!(stored.saturating_sub(notified)));
    extra.insert("watch_outcomes".into(), json!(notes.outcomes));
    let h = &puts.hist;
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    extra.insert(
        "put_latency_ms".into(),
        json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": h.max() as f64 / 1000.0}),
    );
    // The report's latency is the notification's; its outcomes are the PUTs'.
    let mut res = WorkerResult::new();
    let _ = res.hist.add(&notes.hist);
    res.outcomes = puts.outcomes.clone();
    let mut out = report("watch", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, stored).await;
    eprintln!(
        "watch {}: {} PUTs on {} over {} mailboxes, {} stored, {} notified on {} ({} missing); PUT answer p99 {:.3} ms",
        a.c.label,
        done,
        a.url,
        n,
        stored,
        notified,
        a.watch_url,
        stored.saturating_sub(notified),
        q(0.99)
    );
    emit(out, &a.c)
}
