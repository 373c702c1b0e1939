//! The store part of a signed push alone (`relay-bench signed-redis`): the relay's own
//! `Store` on Redis, driven through the three calls `POST /v2/pushes` makes for a one-target
//! push (`receipt_begin.lua`, `policy_admit.lua`, `receipt_update.lua`), with no HTTP, no signature
//! and no APNs (`sealrelay::testing::SignedStorePart`).
//!
//! The pushes are the ones `relay-bench signed` posts (the same generator, fresh request ids
//! and devices per run), signed and parsed before the timed loop so the loop costs the client
//! only the store calls; a run stops when it has used them all.

use super::*;

use sealrelay::testing::{SignedPush, SignedStoreOutcome, SignedStorePart};

#[derive(Args)]
pub struct SignedRedisArgs {
    /// Redis connections (the relay's RELAY_REDIS_POOL_SIZE is 4 by default).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Pushes in flight at once (their calls pipelined over the connections, like the relay).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Key prefix (the relay's default).
    #[arg(long, default_value = "sealrelay:")]
    prefix: String,
    /// Distinct devices per push, 1 to 100 (each target is one admission).
    #[arg(long, default_value_t = 1)]
    targets: u64,
    /// Pushes signed and parsed before the timed loop (the run's ceiling on pushes).
    #[arg(long, default_value_t = 150_000)]
    pregen: u64,
    /// Device bucket size (the benchmark's relays: RELAY_RATE_CAPACITY=1000000).
    #[arg(long, default_value_t = 1_000_000)]
    rate_capacity: u32,
    /// Device bucket refill per second (RELAY_RATE_REFILL_PER_S=10000).
    #[arg(long, default_value_t = 10_000.0)]
    rate_refill_per_s: f64,
    #[command(flatten)]
    c: Common,
}

/// `relay-bench signed-redis`.
pub async fn run_signed_redis(a: SignedRedisArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=100).contains(&a.targets),
        "--targets is 1 to 100 (SIGNED.md)"
    );
    let url =
        a.c.redis_url
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--redis-url is required"))?;
    let part = SignedStorePart::connect(
        &url,
        &a.prefix,
        a.connections,
        a.rate_capacity,
        a.rate_refill_per_s,
    )
    .await?;
    let mut c = a.c.clone();
    c.burst = a.targets;
    let n = a.pregen.min(c.max_requests).max(1);
    c.max_requests = n;
    let gen = SignedGen {
        mix: Mix::new(&c),
        key: sealrelay::testing::PrivateKey::generate().map_err(|e| anyhow::anyhow!("{e}"))?,
        key_id: "ed25519:bench".to_owned(),
        targets: a.targets,
    };
    let t0 = Instant::now();
    let pushes: Vec<SignedPush> = tokio::task::spawn_blocking(move || {
        gen.pregen(n)
            .iter()
            .map(|b| SignedPush::parse(b, sealrelay::testing::DEFAULT_MAX_CIPHERTEXT_CHARS))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("a generated push does not parse: {e}"))
    })
    .await??;
    let pregen_s = t0.elapsed().as_secs_f64();
    let pushes = Arc::new(pushes);
    let part = Arc::new(part);
    let mut probe = Probe::start(&c).await?;
    probe.also_internal = SIGNED_SCRIPT_INTERNAL;
    let ctl = Ctl::new(&c);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (ctl, pushes, part) = (ctl.clone(), pushes.clone(), part.clone());
        tasks.push(tokio::spawn(async move {
            let mut res = WorkerResult::new();
            while let Some((i, from)) = ctl.ticket().await {
                let outcome = match pushes.get(i as usize) {
                    Some(p) => part.push(p, TOPIC, now_ms() as i64).await,
                    None => SignedStoreOutcome::Failed,
                };
                res.record(from, outcome.as_str());
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
    extra.insert("targets_per_push".into(), json!(a.targets));
    extra.insert("pregen".into(), json!(n));
    extra.insert("pregen_s".into(), json!(pregen_s));
    let mut out = report("signed-redis", &c, extra, &res, elapsed);
    probe.finish(&mut out, done, forwarded_of(&res)).await;
    emit(out, &c)
}

/// The topic the benchmark's signer is enrolled for (`scripts/bench.sh`).
const TOPIC: &str = "com.example.cronstable";
