//! `mock-apns`: the test suite's APNs stand-in as a process, for the local stack
//! (`scripts/dev-cluster.sh`) and benchmarks. HTTP/2 over TLS on 127.0.0.1 only, a production
//! and a sandbox listener, JWT checks against a key it generates.
//!
//! ```text
//! mock-apns --state-dir DIR [--production-port 8443] [--sandbox-port 8444]
//!           [--team-id TEAM123456] [--key-id KEY1234567] [--topic com.example.cronstable]
//!           [--delay-ms 0]
//! ```
//!
//! On first start it writes `DIR/ca.pem` (trust it with `APNS_CA_FILE`) and
//! `DIR/AuthKey.p8` (the relay's `APNS_AUTH_KEY_FILE`), and reuses them afterwards. It
//! prints how many requests it answered every few seconds, and stops on SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use sealrelay_testkit::mock_apns::{MockApns, MockConfig};
use sealrelay_testkit::pki::{generate_auth_key, generate_pki};

/// The same allocator as the relay (`src/main.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "An HTTP/2 APNs stand-in for local stacks and benchmarks (127.0.0.1 only)")]
struct Args {
    /// Where the CA, server certificate and auth key live.
    #[arg(long)]
    state_dir: PathBuf,
    /// Production listener port (0: any free port).
    #[arg(long, default_value_t = 8443)]
    production_port: u16,
    /// Sandbox listener port (0: any free port).
    #[arg(long, default_value_t = 8444)]
    sandbox_port: u16,
    /// Expected JWT issuer.
    #[arg(long, default_value = "TEAM123456")]
    team_id: String,
    /// Expected JWT key id.
    #[arg(long, default_value = "KEY1234567")]
    key_id: String,
    /// Expected apns-topic.
    #[arg(long, default_value = "com.example.cronstable")]
    topic: String,
    /// Delay every answer by this many milliseconds.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
}

fn read_or_create(path: &std::path::Path, make: impl FnOnce() -> String) -> anyhow::Result<String> {
    if let Ok(text) = std::fs::read_to_string(path) {
        return Ok(text);
    }
    let text = make();
    std::fs::write(path, &text)?;
    Ok(text)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.state_dir)?;
    let dir = &args.state_dir;
    let (cert, key) = match (
        dir.join("ca.pem").exists(),
        std::fs::read_to_string(dir.join("server.pem")),
        std::fs::read_to_string(dir.join("server.key")),
    ) {
        (true, Ok(cert), Ok(key)) => (cert, key),
        _ => {
            let p = generate_pki()?;
            std::fs::write(dir.join("server.pem"), &p.cert_pem)?;
            std::fs::write(dir.join("server.key"), &p.key_pem)?;
            std::fs::write(dir.join("ca.pem"), &p.ca_pem)?;
            (p.cert_pem, p.key_pem)
        }
    };
    let generated = generate_auth_key()?;
    let private = read_or_create(&dir.join("AuthKey.p8"), || generated.0.clone())?;
    let public = if private == generated.0 {
        generated.1
    } else {
        sealrelay_testkit::pki::public_key_pem(&private)?
    };
    let cfg = MockConfig {
        cert_pem: cert,
        key_pem: key,
        jwt_public_key_pem: Some(public),
        team_id: args.team_id.clone(),
        key_id: args.key_id.clone(),
        topic: args.topic.clone(),
        record: false,
    };
    let prod = MockApns::start_on(cfg.clone(), args.production_port).await?;
    let sandbox = MockApns::start_on(cfg, args.sandbox_port).await?;
    for m in [&prod, &sandbox] {
        m.set_delay(Duration::from_millis(args.delay_ms));
    }
    println!("production {}", prod.url());
    println!("sandbox {}", sandbox.url());
    println!("ca {}", dir.join("ca.pem").display());
    println!("auth-key {}", dir.join("AuthKey.p8").display());

    let mut last = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = (prod.answered(), sandbox.answered());
                if now != last {
                    eprintln!("mock-apns: answered production={} sandbox={}", now.0, now.1);
                    last = now;
                }
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    Ok(())
}
