//! What a run measures beside throughput: the CPU and memory of a process, Redis's INFO and command counts, the probe that samples them, and the report a run writes.

use super::*;

pub(super) fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime in seconds.
pub(super) fn cpu_s(pid: &str, tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm) ": state is field 3, utime field 14, stime field 15.
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / tck)
}

pub(super) fn status_kb(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub(super) fn redis_addr(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| anyhow::anyhow!("only redis://host:port URLs are supported"))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = hostport.rsplit('@').next().unwrap_or(hostport);
    anyhow::ensure!(
        hostport.starts_with("127.0.0.1:") || hostport.starts_with("localhost:"),
        "the benchmark talks to 127.0.0.1 only"
    );
    Ok(hostport.to_owned())
}

/// `INFO <section>` over a plain RESP connection.
pub(super) async fn redis_info(addr: &str, section: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    let cmd = format!("*2\r\n$4\r\nINFO\r\n${}\r\n{}\r\n", section.len(), section);
    s.write_all(cmd.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = s.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "Redis closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(nl) = buf.windows(2).position(|w| w == b"\r\n") {
            let len: usize = std::str::from_utf8(&buf[1..nl])?.parse()?;
            if buf.len() >= nl + 2 + len {
                return Ok(String::from_utf8_lossy(&buf[nl + 2..nl + 2 + len]).into_owned());
            }
        }
    }
}

pub(super) fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

pub(super) fn commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

pub(super) struct Probe {
    pub(super) tck: f64,
    pub(super) pids: Vec<(String, String)>,
    pub(super) redis: Option<String>,
    cpu0: Vec<Option<f64>>,
    self0: Option<f64>,
    stats0: BTreeMap<String, u64>,
    /// Script-internal commands beyond `SCRIPT_INTERNAL` (the receipt scripts' for `signed`).
    pub(super) also_internal: &'static [&'static str],
}

impl Probe {
    pub(super) async fn start(c: &Common) -> anyhow::Result<Self> {
        let tck = clk_tck();
        let mut pids: Vec<(String, String)> = c
            .pids
            .iter()
            .map(|p| match p.split_once('=') {
                Some((n, p)) => (n.to_owned(), p.to_owned()),
                None => (format!("pid{p}"), p.clone()),
            })
            .collect();
        let mut redis = None;
        let mut stats0 = BTreeMap::new();
        if let Some(url) = &c.redis_url {
            let addr = redis_addr(url)?;
            let server = redis_info(&addr, "server").await?;
            if let Some(pid) = info_field(&server, "process_id") {
                pids.push(("redis".to_owned(), pid));
            }
            stats0 = commandstats(&redis_info(&addr, "commandstats").await?);
            redis = Some(addr);
        }
        let cpu0 = pids.iter().map(|(_, p)| cpu_s(p, tck)).collect();
        Ok(Self {
            tck,
            self0: cpu_s("self", tck),
            pids,
            redis,
            cpu0,
            stats0,
            also_internal: &[],
        })
    }

    /// Adds CPU, RSS and Redis fields to `out`; `forwarded` is the per-forward denominator.
    pub(super) async fn finish(
        &self,
        out: &mut serde_json::Map<String, Value>,
        done: u64,
        forwarded: u64,
    ) {
        let per = |x: f64, n: u64| if n > 0 { x / n as f64 } else { 0.0 };
        let mut procs = serde_json::Map::new();
        let mut total_cpu = 0.0;
        for ((name, pid), c0) in self.pids.iter().zip(&self.cpu0) {
            let c1 = cpu_s(pid, self.tck);
            let cpu = match (c0, c1) {
                (Some(a), Some(b)) => b - a,
                _ => f64::NAN,
            };
            if cpu.is_finite() {
                total_cpu += cpu;
            }
            procs.insert(
                name.clone(),
                json!({
                    "pid": pid,
                    "cpu_s": cpu,
                    "cpu_us_per_request": per(cpu * 1e6, done),
                    "cpu_us_per_forwarded": per(cpu * 1e6, forwarded),
                    "vm_hwm_kb": status_kb(pid, "VmHWM:"),
                    "vm_rss_kb": status_kb(pid, "VmRSS:"),
                }),
            );
        }
        let me = match (self.self0, cpu_s("self", self.tck)) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        };
        out.insert("processes".into(), Value::Object(procs));
        out.insert("measured_cpu_s".into(), json!(total_cpu));
        out.insert(
            "measured_cpu_us_per_forwarded".into(),
            json!(per(total_cpu * 1e6, forwarded)),
        );
        out.insert("generator_cpu_s".into(), json!(me));
        out.insert(
            "generator_cpu_us_per_request".into(),
            json!(per(me * 1e6, done)),
        );
        if let Some(addr) = &self.redis {
            if let Ok(info) = redis_info(addr, "commandstats").await {
                let s1 = commandstats(&info);
                let mut delta = BTreeMap::new();
                let mut round_trips = 0u64;
                for (k, v) in &s1 {
                    let d = v - self.stats0.get(k).copied().unwrap_or(0);
                    if d == 0 {
                        continue;
                    }
                    delta.insert(k.clone(), d);
                    // Our own INFO calls are not the relay's.
                    if !SCRIPT_INTERNAL.contains(&k.as_str())
                        && !self.also_internal.contains(&k.as_str())
                        && k != "info"
                        && k != "dbsize"
                    {
                        round_trips += d;
                    }
                }
                let evalsha = delta.get("evalsha").copied().unwrap_or(0);
                // Background calls, not on any request's path: the retry-queue worker's
                // queue_claim.lua polls (one ZRANGEBYSCORE inside each) and the queue gauges'
                // queue_stats.lua calls (one ZCARD inside each); both are EVALSHAs.
                let background = delta.get("zrangebyscore").copied().unwrap_or(0)
                    + delta.get("zcard").copied().unwrap_or(0);
                let request_path = round_trips.saturating_sub(background);
                out.insert("redis_background_calls".into(), json!(background));
                out.insert(
                    "redis_request_path_calls_per_forwarded".into(),
                    json!(per(request_path as f64, forwarded)),
                );
                out.insert("redis_commandstats_delta".into(), json!(delta));
                out.insert("redis_evalsha".into(), json!(evalsha));
                out.insert("redis_round_trips".into(), json!(round_trips));
                out.insert(
                    "redis_evalsha_per_request".into(),
                    json!(per(evalsha as f64, done)),
                );
                out.insert(
                    "redis_round_trips_per_forwarded".into(),
                    json!(per(round_trips as f64, forwarded)),
                );
                out.insert(
                    "redis_evalsha_per_forwarded".into(),
                    json!(per(evalsha as f64, forwarded)),
                );
            }
            if let Ok(mem) = redis_info(addr, "memory").await {
                out.insert(
                    "redis_used_memory".into(),
                    json!(info_field(&mem, "used_memory").and_then(|v| v.parse::<u64>().ok())),
                );
            }
        }
    }
}

pub(super) fn report(
    kind: &str,
    c: &Common,
    mut extra: serde_json::Map<String, Value>,
    res: &WorkerResult,
    elapsed: f64,
) -> serde_json::Map<String, Value> {
    let done: u64 = res.outcomes.values().sum();
    let h = &res.hist;
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    extra.insert("kind".into(), json!(kind));
    extra.insert("label".into(), json!(c.label));
    extra.insert("requests".into(), json!(done));
    extra.insert("elapsed_s".into(), json!(elapsed));
    extra.insert("rps".into(), json!(done as f64 / elapsed));
    extra.insert("target_rate".into(), json!(c.rate));
    extra.insert(
        "latency_ms".into(),
        json!({
            "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "p999": q(0.999),
            "max": h.max() as f64 / 1000.0, "mean": h.mean() / 1000.0,
        }),
    );
    extra.insert("outcomes".into(), json!(res.outcomes));
    extra.insert(
        "mix".into(),
        json!({"burst": c.burst, "dup": c.dup, "devices": c.devices, "ciphertext_chars": c.ciphertext_chars}),
    );
    extra
}

pub(super) fn emit(out: serde_json::Map<String, Value>, c: &Common) -> anyhow::Result<()> {
    let v = Value::Object(out);
    let line = v.to_string();
    println!("{line}");
    if let Some(path) = &c.out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{line}")?;
    }
    let l = &v["latency_ms"];
    eprintln!(
        "{} {}: {} requests in {:.2}s = {:.0}/s; latency ms p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        v["kind"].as_str().unwrap_or(""),
        v["label"].as_str().unwrap_or(""),
        v["requests"],
        v["elapsed_s"].as_f64().unwrap_or(0.0),
        v["rps"].as_f64().unwrap_or(0.0),
        l["p50"].as_f64().unwrap_or(0.0),
        l["p90"].as_f64().unwrap_or(0.0),
        l["p99"].as_f64().unwrap_or(0.0),
        l["p999"].as_f64().unwrap_or(0.0),
        l["max"].as_f64().unwrap_or(0.0),
    );
    eprintln!("  outcomes: {}", v["outcomes"]);
    if let Some(p) = v.get("processes").and_then(Value::as_object) {
        for (name, p) in p {
            eprintln!(
                "  {name}: cpu {:.3}s ({:.1} us/request, {:.1} us/forwarded), peak RSS {} kB",
                p["cpu_s"].as_f64().unwrap_or(f64::NAN),
                p["cpu_us_per_request"].as_f64().unwrap_or(f64::NAN),
                p["cpu_us_per_forwarded"].as_f64().unwrap_or(f64::NAN),
                p["vm_hwm_kb"]
            );
        }
    }
    if let Some(e) = v.get("redis_evalsha_per_forwarded") {
        eprintln!(
            "  redis: {} EVALSHA per forwarded, {} round trips per forwarded; commands {}",
            e, v["redis_round_trips_per_forwarded"], v["redis_commandstats_delta"]
        );
    }
    if let Some(m) = v.get("bytes_per_device") {
        eprintln!("  redis memory: {m} bytes per device");
    }
    Ok(())
}

pub(super) fn forwarded_of(res: &WorkerResult) -> u64 {
    res.outcomes
        .iter()
        .filter(|(k, _)| k.ends_with(" forwarded") || k.as_str() == "forwarded")
        .map(|(_, v)| v)
        .sum()
}
