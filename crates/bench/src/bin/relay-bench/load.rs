//! Closed-loop v1 load against a relay: the request mix, the workers, the run.

use super::*;

pub(super) fn outcome_of(status: u16, body: &[u8]) -> String {
    pub(super) fn field<'a>(body: &'a [u8], name: &str) -> Option<&'a str> {
        let pat = format!("\"{name}\":\"");
        let pos = body.windows(pat.len()).position(|w| w == pat.as_bytes())?;
        let rest = &body[pos + pat.len()..];
        let end = rest.iter().position(|&b| b == b'"')?;
        std::str::from_utf8(&rest[..end]).ok()
    }
    let text = field(body, "outcome")
        .or_else(|| field(body, "error"))
        .unwrap_or("-");
    format!("{status} {text}")
}

pub(super) async fn connect_h1(
    addr: SocketAddr,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

pub(super) async fn load_worker(
    ctl: Arc<Ctl>,
    mix: Mix,
    addr: SocketAddr,
    host: String,
) -> WorkerResult {
    let mut res = WorkerResult::new();
    let mut sender = None;
    while let Some((i, from)) = ctl.ticket().await {
        let body = mix.envelope(i);
        let outcome = async {
            if sender.is_none() {
                sender = Some(connect_h1(addr).await?);
            }
            let s = sender.as_mut().unwrap();
            s.ready().await?;
            let req = Request::post("/")
                .header("host", &host)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))?;
            let resp = s.send_request(req).await?;
            let status = resp.status().as_u16();
            let b = resp.into_body().collect().await?.to_bytes();
            anyhow::Ok(outcome_of(status, &b))
        }
        .await;
        match outcome {
            Ok(o) => res.record(from, &o),
            Err(_) => {
                sender = None;
                res.record(from, "connection error");
            }
        }
    }
    res
}

/// `(address, Host header)` of each `--url`, loopback only.
pub(super) fn loopback_targets(urls: &[String]) -> anyhow::Result<Vec<(SocketAddr, String)>> {
    let mut targets = Vec::new();
    for u in urls {
        let rest = u
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("--url must be http://127.0.0.1:PORT/"))?;
        let hostport = rest.split('/').next().unwrap_or(rest).to_owned();
        let addr: SocketAddr = hostport.parse()?;
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "the benchmark targets loopback only"
        );
        targets.push((addr, hostport));
    }
    Ok(targets)
}

pub(super) async fn run_load(a: LoadArgs) -> anyhow::Result<()> {
    let targets = loopback_targets(&a.urls)?;
    let mix = Mix::new(&a.c);
    let probe = Probe::start(&a.c).await?;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for k in 0..a.connections.max(1) {
        let (addr, host) = targets[k % targets.len()].clone();
        tasks.push(tokio::spawn(load_worker(
            ctl.clone(),
            mix.clone(),
            addr,
            host,
        )));
    }
    let mut res = WorkerResult::new();
    for t in tasks {
        res.merge(t.await?);
    }
    let elapsed = ctl.start.elapsed().as_secs_f64();
    let done: u64 = res.outcomes.values().sum();
    let fwd = forwarded_of(&res);
    let mut extra = serde_json::Map::new();
    extra.insert("urls".into(), json!(a.urls));
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("forwarded".into(), json!(fwd));
    extra.insert("forwarded_per_s".into(), json!(fwd as f64 / elapsed));
    let mut out = report("load", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, fwd).await;
    emit(out, &a.c)
}
