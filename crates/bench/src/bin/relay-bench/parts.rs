//! The parts' ceilings, each alone: the mock APNs process, HTTP/2 to a mock APNs, and the admission script on Redis.

use super::*;
use sealrelay::testing::SmallFrames;

pub(super) async fn run_mock(a: MockArgs) -> anyhow::Result<()> {
    use sealrelay_testkit::mock_apns::{MockApns, MockConfig};
    use sealrelay_testkit::pki::{generate_auth_key, generate_pki};
    std::fs::create_dir_all(&a.state_dir)?;
    let pki = generate_pki()?;
    let (private, public) = generate_auth_key()?;
    std::fs::write(a.state_dir.join("ca.pem"), &pki.ca_pem)?;
    std::fs::write(a.state_dir.join("AuthKey.p8"), &private)?;
    let mock = MockApns::start_on(
        MockConfig {
            cert_pem: pki.cert_pem,
            key_pem: pki.key_pem,
            jwt_public_key_pem: a.check_jwt.then_some(public),
            team_id: "TEAM123456".into(),
            key_id: "KEY1234567".into(),
            topic: "com.example.cronstable".into(),
            record: false,
        },
        a.port,
    )
    .await?;
    println!("url {}", mock.url());
    let stop = tokio::time::sleep(Duration::from_secs(a.max_seconds));
    tokio::pin!(stop);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = &mut stop => {},
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    eprintln!(
        "relay-bench mock: answered {} (200: {})",
        mock.answered(),
        mock.delivered()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// apns: the relay's HTTP/2 client alone

pub(super) async fn run_apns(a: ApnsArgs) -> anyhow::Result<()> {
    use hyper_util::client::legacy::{connect::HttpConnector, Client};
    use hyper_util::rt::TokioExecutor;
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    anyhow::ensure!(
        a.url.starts_with("https://127.0.0.1:") || a.url.starts_with("https://localhost:"),
        "the benchmark targets loopback only"
    );
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&a.ca)? {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http2()
        .wrap_connector(http);
    // The relay's client settings (src/push/apns/client.rs): one pooled HTTP/2 connection,
    // bodies in the small DATA frames the relay sends (src/push/frames.rs), so that the
    // requests waiting together share a write as they do in the relay.
    let client: Client<_, SmallFrames> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .pool_idle_timeout(None)
        .timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    let mix = Mix::new(&a.c);
    // The body the relay builds (src/push/apns/payload.rs) for this mix's envelope.
    let env = sealrelay::v1::envelope::parse(mix.envelope(0).as_bytes(), 3800)
        .map_err(|e| anyhow::anyhow!("envelope: {e}"))?;
    let body = Bytes::from(sealrelay::testing::alert_body(
        &env,
        "cronstable",
        "New alert",
    ));
    // An ES256 JWT is about this long; the fast mock does not verify it.
    let jwt: Arc<str> = format!(
        "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IktFWTEyMzQ1NjcifQ.eyJpc3MiOiJURUFNMTIzNDU2IiwiaWF0IjoxNzAwMDAwMDAwfQ.{}",
        "A".repeat(86)
    )
    .into();
    // Warm the connection up outside the measurement.
    {
        let it = mix.item(u64::MAX / 2);
        let req = Request::post(format!("{}/3/device/{}", a.url, it.device))
            .header("authorization", &*jwt)
            .header("apns-topic", "com.example.cronstable")
            .body(SmallFrames::new(body.clone()))?;
        let r = client.request(req).await?;
        let _ = r.into_body().collect().await;
    }
    let probe = Probe::start(&a.c).await?;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (ctl, mix, client, body, jwt, base) = (
            ctl.clone(),
            mix.clone(),
            client.clone(),
            body.clone(),
            jwt.clone(),
            a.url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            let expiration = (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + 600)
                .to_string();
            while let Some((i, from)) = ctl.ticket().await {
                let it = mix.item(i);
                let req = Request::post(format!("{base}/3/device/{}", it.device))
                    .header("authorization", &*jwt)
                    .header("apns-topic", "com.example.cronstable")
                    .header("apns-push-type", "alert")
                    .header("apns-priority", "10")
                    .header("apns-collapse-id", &it.collapse)
                    .header("apns-expiration", &expiration)
                    .header(
                        "apns-id",
                        format!(
                            "{}-{}-{}-{}-{}",
                            &it.flap[..8],
                            &it.flap[8..12],
                            &it.flap[12..16],
                            &it.flap[16..20],
                            &it.flap[20..32]
                        ),
                    )
                    .header("content-type", "application/json")
                    .body(SmallFrames::new(body.clone()));
                let outcome = match req {
                    Ok(req) => match client.request(req).await {
                        Ok(r) => {
                            let s = r.status().as_u16();
                            let _ = r.into_body().collect().await;
                            if s == 200 {
                                "200 forwarded".to_owned()
                            } else {
                                format!("{s}")
                            }
                        }
                        Err(_) => "connection error".to_owned(),
                    },
                    Err(_) => "invalid request".to_owned(),
                };
                res.record(from, &outcome);
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
    let mut extra = serde_json::Map::new();
    extra.insert("url".into(), json!(a.url));
    extra.insert("concurrency".into(), json!(a.concurrency));
    extra.insert("apns_body_bytes".into(), json!(body.len()));
    let mut out = report("apns", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, forwarded_of(&res)).await;
    emit(out, &a.c)
}

// ---------------------------------------------------------------------------------------
// redis: the admission script alone

pub(super) async fn run_redis(a: RedisArgs) -> anyhow::Result<()> {
    use fred::prelude::*;
    use fred::types::Value as RValue;
    let url =
        a.c.redis_url
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--redis-url is required"))?;
    let addr = redis_addr(&url)?;
    let config = Config::from_url(&url)?;
    let pool = Builder::from_config(config).build_pool(a.connections.max(1))?;
    pool.init().await?;
    let sha: String = pool
        .next()
        .script_load(sealrelay::testing::admit_lua())
        .await?;
    let mem0 = if a.memory {
        info_field(&redis_info(&addr, "memory").await?, "used_memory")
            .and_then(|v| v.parse::<i64>().ok())
    } else {
        None
    };
    let keys0: i64 = pool.next().dbsize().await?;
    let emission_us = (1e6 / a.rate_refill_per_s).round() as i64;
    let bucket_ms = emission_us * a.rate_capacity / 1000 + 1;
    let horizon_ms: i64 = [600_000, 75_000, 1_800_000, 7_200_000, bucket_ms]
        .into_iter()
        .max()
        .unwrap();
    let mix = Mix::new(&a.c);
    let probe = Probe::start(&a.c).await?;
    let ctl = Ctl::new(&a.c);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (ctl, mix, pool, sha, prefix) = (
            ctl.clone(),
            mix.clone(),
            pool.clone(),
            sha.clone(),
            a.prefix.clone(),
        );
        let cap = a.rate_capacity;
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            while let Some((i, from)) = ctl.ticket().await {
                let it = mix.item(i);
                // The relay's key: prefix{first 32 hex of SHA-256(token)}.
                let d = ring::digest::digest(&ring::digest::SHA256, it.device.as_bytes());
                let mut h = String::with_capacity(32);
                for b in &d.as_ref()[..16] {
                    h.push_str(&format!("{b:02x}"));
                }
                let key = format!("{prefix}{{{h}}}");
                let dead = format!("{key}:dead");
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64;
                let args: Vec<RValue> = vec![
                    now_ms.into(),
                    it.collapse.as_str().into(),
                    it.flap.as_str().into(),
                    75_000i64.into(),
                    6i64.into(),
                    1_800_000i64.into(),
                    1_800_000i64.into(),
                    7_200_000i64.into(),
                    cap.into(),
                    emission_us.into(),
                    horizon_ms.into(),
                    (horizon_ms + 60_000).into(),
                    24i64.into(),
                ];
                let r: Result<Vec<RValue>, _> = pool
                    .next()
                    .evalsha(sha.as_str(), vec![key, dead], args)
                    .await;
                let outcome = match r
                    .as_ref()
                    .ok()
                    .and_then(|v| v.first())
                    .and_then(|v| v.as_i64())
                {
                    Some(0) => "forwarded",
                    Some(1) => "coalesced",
                    Some(2) => "suppressed",
                    Some(3) => "rate_limited",
                    Some(4) => "dead",
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
    let mut extra = serde_json::Map::new();
    extra.insert("connections".into(), json!(a.connections));
    extra.insert("concurrency".into(), json!(a.concurrency));
    let keys1: i64 = pool.next().dbsize().await?;
    extra.insert("keys_added".into(), json!(keys1 - keys0));
    if let Some(m0) = mem0 {
        let m1 = info_field(&redis_info(&addr, "memory").await?, "used_memory")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(m0);
        let devices = (keys1 - keys0).max(1);
        extra.insert("used_memory_delta".into(), json!(m1 - m0));
        extra.insert(
            "bytes_per_device".into(),
            json!((m1 - m0) as f64 / devices as f64),
        );
    }
    let mut out = report("redis", &a.c, extra, &res, elapsed);
    probe.finish(&mut out, done, forwarded_of(&res)).await;
    let _ = pool.quit().await;
    emit(out, &a.c)
}
