//! A Cloudflare Realtime TURN API stand-in on 127.0.0.1 (HTTP/1.1, plain or over TLS with a
//! [`crate::pki::Pki`] certificate). It serves
//! `POST /v1/turn/keys/<key id>/credentials/generate-ice-servers` and checks the request as
//! Cloudflare does: another method or path (another key id) is 404, a missing or wrong
//! `Authorization: Bearer <token>` is 401, a body that is not `{"ttl":<seconds>}` is 400.
//! A request that passes is answered as the test asks ([`Reply`]): ICE servers as Cloudflare
//! answers them, another status or body, or nothing ever. Every request is recorded.
//!
//! [`Refused`] is the unreachable provider: a port held bound without listening.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

/// The STUN URL in the mock's answers.
pub const STUN_URL: &str = "stun:stun.cloudflare.com:3478";
/// The TURN URLs in the mock's answers.
pub const TURN_URLS: [&str; 3] = [
    "turn:turn.cloudflare.com:3478?transport=udp",
    "turn:turn.cloudflare.com:3478?transport=tcp",
    "turns:turn.cloudflare.com:5349?transport=tcp",
];

/// How the mock answers a request that passed its checks.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 201 `{"iceServers":[{"urls":[STUN_URL]},{"urls":TURN_URLS,"username":..,"credential":..}]}`,
    /// as Cloudflare answers today; see [`MockCloudflare::username`] and
    /// [`MockCloudflare::credential`].
    Servers,
    /// 200 with `iceServers` a single object holding every URL and the credentials (the
    /// shape of older answers).
    SingleObject,
    /// This status and body, sent as `application/json` whatever it holds.
    Raw(u16, String),
    /// Reads the request and never answers (the connection stays open).
    Hang,
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `POST`, normally.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
    /// The status answered (0 for [`Reply::Hang`]).
    pub status: u16,
}

struct Shared {
    key_id: String,
    api_token: String,
    reply: Mutex<Reply>,
    received: Mutex<Vec<Received>>,
    /// Requests that passed the checks and were answered with credentials.
    issued: AtomicUsize,
}

/// A running mock; the server lives as long as the runtime it was started on.
#[derive(Clone)]
pub struct MockCloudflare {
    addr: SocketAddr,
    tls: bool,
    shared: Arc<Shared>,
}

impl MockCloudflare {
    /// Starts the mock for one key id and its API token; with `tls`, it serves HTTPS with
    /// that certificate. It answers [`Reply::Servers`] until told otherwise.
    pub async fn start(
        key_id: &str,
        api_token: &str,
        tls: Option<&crate::pki::Pki>,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let acceptor = match tls {
            Some(p) => {
                use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
                let certs: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_slice_iter(p.cert_pem.as_bytes())
                        .collect::<Result<_, _>>()?;
                let key = PrivateKeyDer::from_pem_slice(p.key_pem.as_bytes())?;
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()?
                    .with_no_client_auth()
                    .with_single_cert(certs, key)?;
                cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            key_id: key_id.to_owned(),
            api_token: api_token.to_owned(),
            reply: Mutex::new(Reply::Servers),
            received: Mutex::default(),
            issued: AtomicUsize::new(0),
        });
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&s, req).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                let _ = http
                                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                                    .await;
                            }
                        }
                        None => {
                            let _ = http
                                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                                .await;
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            tls: tls.is_some(),
            shared,
        })
    }

    /// The base URL, for `RELAY_ICE_CLOUDFLARE_URL`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How the next requests that pass the checks are answered.
    pub fn set_reply(&self, reply: Reply) {
        *self.shared.reply.lock().unwrap() = reply;
    }

    /// Every request received, in order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// The username of the `n`th credentials issued (from 1) for `ttl` seconds.
    pub fn username(n: usize, ttl: u64) -> String {
        format!("cf-user-{n}-ttl{ttl}")
    }

    /// The credential of the `n`th credentials issued (from 1).
    pub fn credential(n: usize) -> String {
        format!("cf-credential-{n}")
    }
}

async fn handle(
    s: &Shared,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut received = Received {
        method: parts.method.to_string(),
        path: path.clone(),
        authorization: header("authorization"),
        content_type: header("content-type"),
        body: body.clone(),
        status: 0,
    };
    let expected_path = format!(
        "/v1/turn/keys/{}/credentials/generate-ice-servers",
        s.key_id
    );
    let bearer = format!("Bearer {}", s.api_token);
    let ttl = serde_json::from_slice::<Value>(&body)
        .ok()
        .filter(|v| v.as_object().is_some_and(|o| o.len() == 1))
        .and_then(|v| v.get("ttl").and_then(Value::as_u64));
    let answer = if parts.method != hyper::Method::POST || path != expected_path {
        Some(error(404, "Not found"))
    } else if received.authorization.as_deref() != Some(bearer.as_str()) {
        Some(error(401, "Authentication error"))
    } else if ttl.is_none() {
        Some(error(400, "Invalid body: {\"ttl\":<seconds>} expected"))
    } else {
        None
    };
    let reply = s.reply.lock().unwrap().clone();
    let (status, text) = match (answer, reply) {
        (Some(a), _) => a,
        (None, Reply::Hang) => {
            s.received.lock().unwrap().push(received);
            match std::future::pending::<std::convert::Infallible>().await {}
        }
        (None, Reply::Raw(status, text)) => (status, text),
        (None, reply @ (Reply::Servers | Reply::SingleObject)) => {
            let n = s.issued.fetch_add(1, Ordering::SeqCst) + 1;
            let ttl = ttl.unwrap_or_default();
            let (username, credential) = (
                MockCloudflare::username(n, ttl),
                MockCloudflare::credential(n),
            );
            let servers = if matches!(reply, Reply::Servers) {
                json!([
                    {"urls": [STUN_URL]},
                    {"urls": TURN_URLS, "username": username, "credential": credential},
                ])
            } else {
                let mut urls = vec![STUN_URL];
                urls.extend(TURN_URLS);
                json!({"urls": urls, "username": username, "credential": credential})
            };
            let status = if matches!(reply, Reply::Servers) {
                201
            } else {
                200
            };
            (status, json!({ "iceServers": servers }).to_string())
        }
    };
    received.status = status;
    s.received.lock().unwrap().push(received);
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(text)))
        .expect("a valid response")
}

/// Cloudflare's error envelope.
fn error(status: u16, message: &str) -> (u16, String) {
    (
        status,
        json!({"success": false, "errors": [{"code": status, "message": message}]}).to_string(),
    )
}

/// An unreachable provider: a port on 127.0.0.1 held bound but not listening, so connecting
/// is refused at once, and no other process can take the port while this value lives.
pub struct Refused {
    _socket: tokio::net::TcpSocket,
    addr: SocketAddr,
}

impl Refused {
    /// Binds the port (must be called inside a runtime).
    pub fn new() -> anyhow::Result<Self> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        let addr = socket.local_addr()?;
        Ok(Self {
            _socket: socket,
            addr,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
