//! `bench-intake`: the intake part of the relay alone, for `scripts/bench.sh`. An HTTP/1.1
//! server on 127.0.0.1 that reads the body (at most 8192 bytes), parses it with the relay's
//! own parser (`sealrelay::v1::envelope::parse`) and answers 202 `{"v":1,"outcome":"forwarded"}`
//! (400 with the parser's error otherwise). No store, no APNs: the ceiling of "one HTTP
//! request in" on this machine.
//!
//! ```text
//! bench-intake [--port 0] [--max-seconds 600] [--threads 0]
//! ```
//!
//! Prints `listening http://127.0.0.1:PORT/` on stdout and stops on SIGTERM, Ctrl-C or after
//! `--max-seconds`.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// The same allocator as the relay (`src/main.rs`), so the parts are measured on equal terms.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "The relay's intake alone: parse the envelope, answer 202 (127.0.0.1 only)")]
struct Args {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Stop by itself after this many seconds.
    #[arg(long, default_value_t = 600)]
    max_seconds: u64,
    /// Runtime worker threads (0: one per core, like the relay).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Largest accepted ciphertext (the relay's default).
    #[arg(long, default_value_t = 3800)]
    max_ciphertext_chars: usize,
}

const FORWARDED: &[u8] = br#"{"v":1,"outcome":"forwarded"}"#;

async fn handle(
    req: Request<Incoming>,
    max_ct: usize,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let json = |status: StatusCode, body: Bytes| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap()
    };
    if req.method() != hyper::Method::POST || req.uri().path() != "/" {
        return Ok(json(
            StatusCode::NOT_FOUND,
            Bytes::from_static(br#"{"v":1,"error":"not found"}"#),
        ));
    }
    let body = match Limited::new(req.into_body(), 8192).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Ok(json(
                StatusCode::PAYLOAD_TOO_LARGE,
                Bytes::from_static(br#"{"v":1,"error":"body too large"}"#),
            ))
        }
    };
    match sealrelay::v1::envelope::parse(&body, max_ct) {
        Ok(env) => {
            std::hint::black_box(&env);
            Ok(json(StatusCode::ACCEPTED, Bytes::from_static(FORWARDED)))
        }
        Err(e) => Ok(json(
            StatusCode::BAD_REQUEST,
            Bytes::from(serde_json::json!({"v": 1, "error": e.to_string()}).to_string()),
        )),
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if args.threads > 0 {
        rt.worker_threads(args.threads);
    }
    rt.enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening http://{}/", listener.local_addr()?);
    let max_ct = args.max_ciphertext_chars;
    let stop = tokio::time::sleep(Duration::from_secs(args.max_seconds));
    tokio::pin!(stop);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
            _ = &mut stop => break,
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(req, max_ct));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
    Ok(())
}
