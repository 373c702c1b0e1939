//! `bench-intake`: the intake part of the relay alone, for `scripts/bench.sh`. An HTTP/1.1
//! server on 127.0.0.1 that reads the body (at most 8192 bytes), parses it with the relay's
//! own parser (`sealrelay::v1::envelope::parse`) and answers 202 `{"v":1,"outcome":"forwarded"}`
//! (400 with the parser's error otherwise). No store, no APNs: the ceiling of "one HTTP
//! request in" on this machine.
//!
//! ```text
//! bench-intake [--port 0] [--max-seconds 600] [--threads 0] [--list-envelopes 1] [--envelope-bytes 256]
//! ```
//!
//! Prints `listening http://127.0.0.1:PORT/` on stdout and stops on SIGTERM, Ctrl-C or after
//! `--max-seconds`.
//!
//! Mailbox requests (`/v1/<app>/mailbox/<id>...`, for the mailbox phases) get the HTTP part
//! of the relay's mailbox front-end without the store: the bearer's shape is checked (401),
//! a claim answers 201, an envelope PUT reads its body (at most 65536 bytes; 400 empty, 413
//! larger) and answers 201, a list (`GET .../<dir>?after=&limit=`) answers the relay's JSON
//! with `min(limit, --list-envelopes)` envelopes of `--envelope-bytes` bytes, base64-encoded
//! per request as the relay does. Anything else under `/v1/` is the relay's 404.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
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
    /// Envelopes a mailbox list answers at most (the mailbox phases put this many first).
    #[arg(long, default_value_t = 1)]
    list_envelopes: usize,
    /// Bytes of each listed envelope (the mailbox phases' envelope size).
    #[arg(long, default_value_t = 256)]
    envelope_bytes: usize,
}

/// What a mailbox list answers: its envelopes' bytes.
struct Listing {
    envelopes: usize,
    data: Vec<u8>,
}

/// The relay's limit on a `/v2/pushes` body (SIGNED.md).
const SIGNED_MAX_BODY_BYTES: usize = 512 * 1024;
/// The topic of a push that names none (the benchmark's relays run with this APNS_TOPIC).
const SIGNED_TOPIC: &str = "com.example.cronstable";

const FORWARDED: &[u8] = br#"{"v":1,"outcome":"forwarded"}"#;

fn json(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap()
}

/// A bearer token's shape: 22 to 256 of `[A-Za-z0-9._~+/=-]` (MAILBOX.md).
fn is_bearer(s: &str) -> bool {
    (22..=256).contains(&s.len())
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-')
        })
}

fn mailbox_error(status: StatusCode, code: &str) -> Response<Full<Bytes>> {
    json(
        status,
        Bytes::from(format!(
            r#"{{"error":"{code}","status":{}}}"#,
            status.as_u16()
        )),
    )
}

/// A mailbox request without the store (see the module's documentation).
async fn mailbox(req: Request<Incoming>, listing: &Listing) -> Response<Full<Bytes>> {
    let not_found = || {
        json(
            StatusCode::NOT_FOUND,
            Bytes::from_static(br#"{"v":1,"error":"not found"}"#),
        )
    };
    let path = req.uri().path().to_owned();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segs.len() < 4 || segs[2] != "mailbox" || !(16..=64).contains(&segs[3].len()) {
        return not_found();
    }
    let bearer = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| is_bearer(t.trim()));
    if !bearer {
        return mailbox_error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let dir_ok = |d: &str| d == "p2c" || d == "c2p";
    match (req.method().clone(), segs.len()) {
        (hyper::Method::PUT, 4) => Response::builder()
            .status(StatusCode::CREATED)
            .body(Full::new(Bytes::new()))
            .unwrap(),
        (hyper::Method::PUT, 6) if dir_ok(segs[4]) && segs[5].parse::<u64>().is_ok() => {
            match Limited::new(req.into_body(), 65536)
                .collect()
                .await
                .map(|b| b.to_bytes())
            {
                Ok(b) if b.is_empty() => mailbox_error(StatusCode::BAD_REQUEST, "bad_request"),
                Ok(_) => Response::builder()
                    .status(StatusCode::CREATED)
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
                Err(_) => mailbox_error(StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            }
        }
        (hyper::Method::GET, 5) if dir_ok(segs[4]) => {
            let limit = req
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("limit="))
                .map_or(Some(64), |v| {
                    v.parse::<usize>().ok().filter(|n| (1..=256).contains(n))
                });
            let Some(limit) = limit else {
                return mailbox_error(StatusCode::BAD_REQUEST, "bad_request");
            };
            let n = limit.min(listing.envelopes);
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut body = String::with_capacity(64 + n * (listing.data.len() * 4 / 3 + 32));
            body.push_str(r#"{"envelopes":["#);
            for i in 0..n {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(&format!(r#"{{"seq":{},"data":""#, i + 1));
                b64.encode_string(&listing.data, &mut body);
                body.push_str(r#""}"#);
            }
            body.push_str(&format!(r#"],"last":{n},"more":false}}"#));
            json(StatusCode::OK, Bytes::from(body))
        }
        _ => not_found(),
    }
}

/// The HTTP part of `POST /v2/pushes`: the body read to the relay's limit, parsed (and
/// canonicalised, its hash taken) by the relay's parser, and answered 201 with the receipt the
/// relay renders for a push whose targets were all delivered. No signer lookup, no signature,
/// no store, no APNs: those are the other parts.
async fn signed(req: Request<Incoming>, max_ct: usize) -> Response<Full<Bytes>> {
    let body = match Limited::new(req.into_body(), SIGNED_MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return json(
                StatusCode::PAYLOAD_TOO_LARGE,
                Bytes::from_static(br#"{"error":{"code":"payload_too_large"}}"#),
            )
        }
    };
    match sealrelay::testing::SignedPush::parse(&body, max_ct) {
        Ok(push) => {
            let topic = push.topic().unwrap_or(SIGNED_TOPIC);
            let answer = sealrelay::testing::signed_answer(&push, topic, now_ms());
            json(StatusCode::CREATED, Bytes::from(answer))
        }
        Err(e) => json(
            StatusCode::BAD_REQUEST,
            Bytes::from(
                serde_json::json!({"error": {"code": "invalid_request", "message": e.message()}})
                    .to_string(),
            ),
        ),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn handle(
    req: Request<Incoming>,
    max_ct: usize,
    listing: Arc<Listing>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path().starts_with("/v1/") {
        return Ok(mailbox(req, &listing).await);
    }
    if req.uri().path() == "/v2/pushes" && req.method() == hyper::Method::POST {
        return Ok(signed(req, max_ct).await);
    }
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
    let listing = Arc::new(Listing {
        envelopes: args.list_envelopes,
        data: (0..args.envelope_bytes)
            .map(|i| (i * 7 + 1) as u8)
            .collect(),
    });
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
        let listing = listing.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(req, max_ct, listing.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
    Ok(())
}
