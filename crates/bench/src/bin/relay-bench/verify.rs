//! Ed25519 verification alone (`relay-bench verify`): ring 0.17 against ed25519-dalek 2 over
//! the signatures of real signed pushes, and the verification part of a signed push's
//! combined limit.
//!
//! The run signs `--requests` pushes built as `relay-bench signed` builds them (a fresh key,
//! `--targets` devices each), parses each with the relay's own `SignedPush::parse` and keeps
//! the bytes the relay verifies (`signing_bytes`) with the decoded signature. Then, for
//! `--rounds` rounds, each verifier checks `--iterations` signatures (cycling over the
//! requests) on each of `--threads` threads; the order of the verifiers alternates from round
//! to round, so drift and the neighbours' load hit both alike. A verification that fails
//! stops the run: both verifiers must accept every one.
//!
//! Three verifiers are timed, each as the relay would call it:
//!
//! - `ring`: `UnparsedPublicKey::new(&ED25519, key).verify(..)`, the key parsed on every
//!   call (ring keeps no parsed Ed25519 key);
//! - `dalek`: `VerifyingKey::from_bytes(key)` then `verify_strict`, the key decompressed on
//!   every call;
//! - `dalek-cached`: `verify_strict` under a `VerifyingKey` decompressed once (what a relay
//!   that keeps the decoded key with the enrolled signer would pay).
//!
//! Per verifier, the JSON line has the per-round microseconds per verification (thread time
//! over verifications: with one thread, the cost on one core), their median, and the
//! verifications per second of the whole run (all threads together: with one thread per
//! core, the machine's ceiling for that part). `ratio_dalek_over_ring` is the median of the
//! per-round ratios of `dalek` to `ring` (below 1: dalek is faster).

use super::*;

use base64::Engine;
use ed25519_dalek::{Signature, VerifyingKey};
use ring::signature::{UnparsedPublicKey, ED25519};

/// The verifiers, in the order of the JSON line.
const VERIFIERS: [&str; 3] = ["ring", "dalek", "dalek-cached"];

#[derive(Args)]
pub struct VerifyArgs {
    /// Distinct signed pushes whose signatures are verified (cycled through).
    #[arg(long, default_value_t = 64)]
    requests: u64,
    /// Targets per push (the signed bytes grow with them).
    #[arg(long, default_value_t = 1)]
    targets: u64,
    /// Verifications per verifier, per thread, per round.
    #[arg(long, default_value_t = 4000)]
    iterations: u64,
    /// Interleaved rounds (the report takes medians over them).
    #[arg(long, default_value_t = 7)]
    rounds: u32,
    /// Threads verifying at once (0: one per core).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Ciphertext length in base64 characters (multiple of 4).
    #[arg(long, default_value_t = 1024)]
    ciphertext_chars: usize,
    /// A label copied into the JSON line.
    #[arg(long, default_value = "")]
    label: String,
    /// Append the JSON line to this file too.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// One request as the relay verifies it.
struct Signed {
    message: Vec<u8>,
    signature: [u8; 64],
}

/// Verifies `n` signatures with `verifier`, cycling over `reqs`; false if one fails.
fn verify_n(
    verifier: &str,
    key: &[u8; 32],
    cached: &VerifyingKey,
    reqs: &[Signed],
    n: u64,
) -> bool {
    let mut ok = true;
    for i in 0..n {
        let r = &reqs[(i % reqs.len() as u64) as usize];
        let good = match verifier {
            "ring" => UnparsedPublicKey::new(&ED25519, key)
                .verify(&r.message, &r.signature)
                .is_ok(),
            "dalek" => VerifyingKey::from_bytes(key).is_ok_and(|k| {
                k.verify_strict(&r.message, &Signature::from_bytes(&r.signature))
                    .is_ok()
            }),
            _ => cached
                .verify_strict(&r.message, &Signature::from_bytes(&r.signature))
                .is_ok(),
        };
        ok &= std::hint::black_box(good);
    }
    ok
}

/// One verifier's timed pass: (thread-seconds, wall seconds), or an error if one failed.
fn pass(
    verifier: &str,
    key: &[u8; 32],
    cached: &VerifyingKey,
    reqs: &[Signed],
    n: u64,
    threads: usize,
) -> anyhow::Result<(f64, f64)> {
    let start = Instant::now();
    let results: Vec<(bool, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let t = Instant::now();
                    let ok = verify_n(verifier, key, cached, reqs, n);
                    (ok, t.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((false, 0.0)))
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        results.iter().all(|(ok, _)| *ok),
        "{verifier}: a signature the relay's own signing made did not verify"
    );
    Ok((results.iter().map(|(_, t)| t).sum(), wall))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub async fn run_verify(a: VerifyArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=100).contains(&a.targets),
        "--targets is 1 to 100 (SIGNED.md)"
    );
    anyhow::ensure!(
        a.requests > 0 && a.iterations > 0 && a.rounds > 0,
        "--requests, --iterations and --rounds must be positive"
    );
    let threads = match a.threads {
        0 => std::thread::available_parallelism().map_or(1, |t| t.get()),
        t => t,
    };
    let key = sealrelay::testing::PrivateKey::generate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let public = *key.public_key().as_bytes();
    let c = Common {
        duration: 0.0,
        max_requests: a.requests,
        rate: None,
        burst: a.targets,
        dup: 1,
        devices: 0,
        salt: None,
        ciphertext_chars: a.ciphertext_chars,
        pids: Vec::new(),
        redis_url: None,
        label: a.label.clone(),
        out: a.out.clone(),
    };
    let gen = SignedGen {
        mix: Mix::new(&c),
        key,
        key_id: "ed25519:bench".to_owned(),
        targets: a.targets,
    };
    let mut reqs = Vec::new();
    for body in gen.pregen(a.requests) {
        let push = sealrelay::testing::SignedPush::parse(
            &body,
            sealrelay::testing::DEFAULT_MAX_CIPHERTEXT_CHARS,
        )
        .map_err(|e| anyhow::anyhow!("a generated push does not parse: {e}"))?;
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(push.signature())
            .ok()
            .and_then(|s| <[u8; 64]>::try_from(s).ok())
            .ok_or_else(|| anyhow::anyhow!("a generated signature is not 64 bytes"))?;
        reqs.push(Signed {
            message: push.signing_bytes().to_vec(),
            signature,
        });
    }
    let message_bytes = reqs.first().map_or(0, |r| r.message.len());
    let cached = VerifyingKey::from_bytes(&public)
        .map_err(|e| anyhow::anyhow!("the generated key does not decode: {e}"))?;

    // One untimed pass each: tables, caches, the CPU's clock.
    for v in VERIFIERS {
        pass(v, &public, &cached, &reqs, a.iterations.min(500), threads)?;
    }
    let mut us: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut per_s: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut ratios = Vec::new();
    let total = a.iterations * threads as u64;
    for round in 0..a.rounds {
        let mut order = VERIFIERS.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        let mut this = BTreeMap::new();
        for v in order {
            let (thread_s, wall_s) = pass(v, &public, &cached, &reqs, a.iterations, threads)?;
            let u = thread_s * 1e6 / total as f64;
            this.insert(v, u);
            us.entry(v).or_default().push(u);
            per_s.entry(v).or_default().push(total as f64 / wall_s);
        }
        ratios.push(this["dalek"] / this["ring"]);
        eprintln!(
            "verify round {}: ring {:.2} us, dalek {:.2} us, dalek-cached {:.2} us per verification",
            round + 1,
            this["ring"],
            this["dalek"],
            this["dalek-cached"]
        );
    }

    let mut out = serde_json::Map::new();
    out.insert("kind".into(), json!("verify"));
    out.insert("label".into(), json!(a.label));
    out.insert("threads".into(), json!(threads));
    out.insert("requests".into(), json!(a.requests));
    out.insert("targets".into(), json!(a.targets));
    out.insert("message_bytes".into(), json!(message_bytes));
    out.insert("iterations".into(), json!(a.iterations));
    out.insert("rounds".into(), json!(a.rounds));
    out.insert("cpu_features".into(), json!(cpu_features()));
    let mut verifiers = serde_json::Map::new();
    for v in VERIFIERS {
        verifiers.insert(
            v.into(),
            json!({
                "us_per_verify": us[v],
                "us_per_verify_median": median(&us[v]),
                "verifies_per_s_median": median(&per_s[v]),
            }),
        );
    }
    out.insert("verifiers".into(), Value::Object(verifiers));
    let ratio = median(&ratios);
    out.insert("ratio_dalek_over_ring".into(), json!(ratio));
    out.insert("ratio_dalek_over_ring_per_round".into(), json!(ratios));
    let line = Value::Object(out).to_string();
    println!("{line}");
    if let Some(path) = &a.out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{line}")?;
    }
    eprintln!(
        "verify {}: {} threads, {} B signed: median us per verification: ring {:.2}, dalek {:.2}, dalek-cached {:.2}; dalek/ring {:.3}; verifications/s: ring {:.0}, dalek {:.0}, dalek-cached {:.0}",
        a.label,
        threads,
        message_bytes,
        median(&us["ring"]),
        median(&us["dalek"]),
        median(&us["dalek-cached"]),
        ratio,
        median(&per_s["ring"]),
        median(&per_s["dalek"]),
        median(&per_s["dalek-cached"]),
    );
    Ok(())
}

/// The x86-64 vector extensions this CPU has that curve25519-dalek's backends use.
fn cpu_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut f = Vec::new();
        if std::arch::is_x86_feature_detected!("avx2") {
            f.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("avx512ifma") {
            f.push("avx512ifma");
        }
        f
    }
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}
