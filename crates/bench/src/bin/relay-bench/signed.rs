//! Signed pushes under load: pre-generated signed requests, the workers and the run.

use super::*;

/// Commands inside the receipt scripts (`receipt_begin.lua`, `receipt_update.lua`) that
/// `SCRIPT_INTERNAL` does not list: not round trips of the relay either (`time` reads the
/// lease's clock, `set` keeps the sealed request beside it).
pub(super) const SIGNED_SCRIPT_INTERNAL: &[&str] =
    &["exists", "lrange", "rpush", "set", "spublish", "time"];

/// A pre-signed body older than this is signed again (the relay accepts 5 minutes).
pub(super) const PREGEN_MAX_AGE_MS: u64 = 240_000;

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Builds and signs the bodies of one run.
pub(super) struct SignedGen {
    pub(super) mix: Mix,
    pub(super) key: sealrelay::testing::PrivateKey,
    pub(super) key_id: String,
    pub(super) targets: u64,
}

impl SignedGen {
    /// A lowercase version-4 UUID, fresh per push and per run (from the salt).
    pub(super) fn request_id(&self, i: u64) -> String {
        let a = splitmix(self.mix.salt.rotate_left(29) ^ splitmix(i ^ 0x5EED_0F1D));
        let mut h = self.mix.hex(&[a, splitmix(a ^ 5)]).into_bytes();
        h[12] = b'4';
        h[16] = b"89ab"[(h[16] % 4) as usize];
        let h = String::from_utf8(h).unwrap_or_default();
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// Push i, signed, issued at `issued_ms`.
    pub(super) fn body(&self, i: u64, issued_ms: u64) -> Bytes {
        let it = self.mix.item(i * self.targets);
        let targets: Vec<Value> = (0..self.targets)
            .map(|j| {
                json!({
                    "device": self.mix.item(i * self.targets + j).device,
                    "suite": "x25519",
                    "ciphertext": &*self.mix.ciphertext,
                })
            })
            .collect();
        let mut m = serde_json::Map::new();
        m.insert("schemaVersion".into(), json!("2"));
        m.insert("requestId".into(), json!(self.request_id(i)));
        m.insert("targets".into(), Value::Array(targets));
        m.insert("collapseId".into(), json!(it.collapse));
        m.insert("flapId".into(), json!(it.flap));
        m.insert("priority".into(), json!("time-sensitive"));
        m.insert("event".into(), json!(false));
        m.insert("issuedAtMs".into(), json!(issued_ms));
        m.insert("signerKeyId".into(), json!(self.key_id));
        sealrelay::testing::sign_request(&self.key, &mut m);
        Bytes::from(Value::Object(m).to_string())
    }

    /// Bodies 0..n, signed now, on every core.
    pub(super) fn pregen(&self, n: u64) -> Vec<Bytes> {
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get()) as u64;
        let per = n.div_ceil(threads.max(1)).max(1);
        let issued = now_ms();
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..n)
                .step_by(per as usize)
                .map(|lo| {
                    s.spawn(move || {
                        (lo..(lo + per).min(n))
                            .map(|i| self.body(i, issued))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            parts
                .into_iter()
                .flat_map(|p| p.join().expect("signing thread"))
                .collect()
        })
    }
}

/// One answer of `/v2/pushes`: `201 delivered` when every one of the `want` targets is
/// delivered; target states are counted into `res`.
pub(super) fn signed_outcome(
    status: u16,
    body: &[u8],
    want: u64,
    res: &mut WorkerResult,
) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status != 200 && status != 201 {
        let code = v["error"]["code"].as_str().unwrap_or("-");
        return format!("{status} {code}");
    }
    let Some(targets) = v["targets"].as_object() else {
        return format!("{status} no receipt");
    };
    let mut all = targets.len() as u64 == want;
    for t in targets.values() {
        let state = t["state"].as_str().unwrap_or("-");
        all &= state == "delivered";
        match res.target_states.get_mut(state) {
            Some(n) => *n += 1,
            None => {
                res.target_states.insert(state.to_owned(), 1);
            }
        }
    }
    match (status, all) {
        (201, true) => "201 delivered".to_owned(),
        (201, false) => "201 not all delivered".to_owned(),
        _ => format!("{status} replayed"),
    }
}

pub(super) async fn signed_worker(
    ctl: Arc<Ctl>,
    gen: Arc<SignedGen>,
    pool: Arc<(u64, Vec<Bytes>)>,
    addr: SocketAddr,
    host: String,
) -> WorkerResult {
    let mut res = WorkerResult::new();
    let mut sender = None;
    while let Some((i, from)) = ctl.ticket().await {
        let now = now_ms();
        let body = match pool.1.get(i as usize) {
            Some(b) if now.saturating_sub(pool.0) < PREGEN_MAX_AGE_MS => b.clone(),
            _ => {
                res.signed_in_loop += 1;
                gen.body(i, now)
            }
        };
        let answer = async {
            if sender.is_none() {
                sender = Some(connect_h1(addr).await?);
            }
            let s = sender.as_mut().unwrap();
            s.ready().await?;
            let req = Request::post("/v2/pushes")
                .header("host", &host)
                .header("content-type", "application/json")
                .body(Full::new(body))?;
            let resp = s.send_request(req).await?;
            let status = resp.status().as_u16();
            let b = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, b))
        }
        .await;
        match answer {
            Ok((status, b)) => {
                let o = signed_outcome(status, &b, gen.targets, &mut res);
                res.record(from, &o);
            }
            Err(_) => {
                sender = None;
                res.record(from, "connection error");
            }
        }
    }
    res
}

pub(super) async fn run_signed(a: SignedArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=100).contains(&a.targets),
        "--targets is 1 to 100 (SIGNED.md)"
    );
    anyhow::ensure!(
        a.c.burst == 1 && a.c.dup == 1,
        "signed pushes take --targets, not --burst or --dup"
    );
    let targets = loopback_targets(&a.urls)?;
    let pem =
        std::fs::read_to_string(&a.key).map_err(|e| anyhow::anyhow!("{}: {e}", a.key.display()))?;
    let key = sealrelay::testing::PrivateKey::from_pem(&pem)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.key.display()))?;
    // The report's mix: `burst` devices per push.
    let mut c = a.c.clone();
    c.burst = a.targets;
    let gen = Arc::new(SignedGen {
        mix: Mix::new(&c),
        key,
        key_id: a.key_id.clone(),
        targets: a.targets,
    });
    let n = if a.pregen == 0 {
        c.max_requests
    } else {
        a.pregen.min(c.max_requests)
    };
    let t0 = Instant::now();
    let issued = now_ms();
    let bodies = {
        let gen = gen.clone();
        tokio::task::spawn_blocking(move || gen.pregen(n)).await?
    };
    let pregen_s = t0.elapsed().as_secs_f64();
    let body_bytes = bodies.first().map_or(0, Bytes::len);
    let pool = Arc::new((issued, bodies));
    let mut probe = Probe::start(&c).await?;
    probe.also_internal = SIGNED_SCRIPT_INTERNAL;
    let ctl = Ctl::new(&c);
    let mut tasks = Vec::new();
    for k in 0..a.connections.max(1) {
        let (addr, host) = targets[k % targets.len()].clone();
        tasks.push(tokio::spawn(signed_worker(
            ctl.clone(),
            gen.clone(),
            pool.clone(),
            addr,
            host,
        )));
    }
    let mut res = WorkerResult::new();
    for t in tasks {
        res.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    drop(pool);
    let done: u64 = res.outcomes.values().sum();
    let fwd = res.outcomes.get("201 delivered").copied().unwrap_or(0);
    let created: u64 = res
        .outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("201 "))
        .map(|(_, v)| v)
        .sum();
    let delivered = res.target_states.get("delivered").copied().unwrap_or(0);
    let mut extra = serde_json::Map::new();
    extra.insert("urls".into(), json!(a.urls));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("targets_per_push".into(), json!(a.targets));
    extra.insert("key_id".into(), json!(a.key_id));
    extra.insert("forwarded".into(), json!(fwd));
    extra.insert("forwarded_per_s".into(), json!(fwd as f64 / elapsed));
    extra.insert("created".into(), json!(created));
    extra.insert("targets_delivered".into(), json!(delivered));
    extra.insert(
        "targets_delivered_per_s".into(),
        json!(delivered as f64 / elapsed),
    );
    extra.insert("target_states".into(), json!(res.target_states));
    extra.insert("pregen".into(), json!(n));
    extra.insert("pregen_s".into(), json!(pregen_s));
    extra.insert("signed_in_loop".into(), json!(res.signed_in_loop));
    extra.insert("body_bytes".into(), json!(body_bytes));
    let mut out = report("signed", &c, extra, &res, elapsed);
    probe.finish(&mut out, done, fwd).await;
    // Store round trips per created push: the EVALSHAs minus the background ones (the
    // retry-queue worker's claim polls and the queue gauges' stats scripts, one
    // ZRANGEBYSCORE or ZCARD inside each), and any other command from the client.
    if let Some(delta) = out
        .get("redis_commandstats_delta")
        .and_then(Value::as_object)
    {
        let d = |k: &str| delta.get(k).and_then(Value::as_u64).unwrap_or(0);
        let background = d("zrangebyscore") + d("zcard");
        let path = d("evalsha").saturating_sub(background);
        let other: u64 = delta
            .iter()
            .filter(|(k, _)| {
                !SCRIPT_INTERNAL.contains(&k.as_str())
                    && !SIGNED_SCRIPT_INTERNAL.contains(&k.as_str())
                    && !matches!(k.as_str(), "evalsha" | "info" | "dbsize")
            })
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        let per = |x: u64| {
            if created > 0 {
                x as f64 / created as f64
            } else {
                0.0
            }
        };
        out.insert("redis_evalsha_request_path".into(), json!(path));
        out.insert(
            "redis_evalsha_request_path_per_push".into(),
            json!(per(path)),
        );
        out.insert("redis_other_client_calls".into(), json!(other));
        out.insert(
            "redis_other_client_calls_per_push".into(),
            json!(per(other)),
        );
    }
    eprintln!(
        "signed {}: {} pushes of {} target(s), {} answered 201 with every target delivered ({:.0}/s); {} bodies pre-signed in {:.2}s, {} signed in the loop; target states {}",
        c.label,
        done,
        a.targets,
        fwd,
        fwd as f64 / elapsed,
        n,
        pregen_s,
        res.signed_in_loop,
        json!(res.target_states)
    );
    if let Some(p) = out.get("redis_evalsha_request_path_per_push") {
        eprintln!(
            "  redis: {p} EVALSHA per push on the request path (background {}), {} other client calls",
            out.get("redis_background_calls").unwrap_or(&Value::Null),
            out["redis_other_client_calls"]
        );
    }
    emit(out, &c)
}
