//! A stand-in for APNs that speaks HTTP/2 over TLS, for tests, benchmarks and demos.
//!
//! It checks what Apple checks that matters here (the provider JWT's ES256 signature,
//! `kid`, `iss` and age; the topic), records every request, and answers as scripted per
//! device token: queued one-shot replies first, then a standing reply, else 200. It can
//! send GOAWAY on every open connection and delay its answers, to exercise the client's
//! reconnect and timeout paths. It binds to 127.0.0.1 only.
//!
//! Certificates come from [`crate::pki`].

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How the mock is set up.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// Server certificate chain, PEM.
    pub cert_pem: String,
    /// Server private key, PEM.
    pub key_pem: String,
    /// The provider key's public half (SPKI PEM); `None` skips JWT checks.
    pub jwt_public_key_pem: Option<String>,
    /// Expected JWT `iss`.
    pub team_id: String,
    /// Expected JWT `kid`.
    pub key_id: String,
    /// Expected `apns-topic`.
    pub topic: String,
    /// Keep every request for inspection (tests); `false` keeps only counters, for long
    /// runs (benchmarks, the local stack).
    pub record: bool,
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The device token from the path.
    pub token: String,
    /// Request headers (lowercase names).
    pub headers: HashMap<String, String>,
    /// The body.
    pub body: Bytes,
    /// The bearer token.
    pub jwt: String,
    /// Which accepted connection carried it (1-based).
    pub connection: usize,
    /// The status the mock answered.
    pub status: u16,
}

impl Received {
    /// A header's value, or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// A scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// `reason` in the JSON body.
    pub reason: Option<String>,
}

impl Reply {
    /// An answer with this status and reason.
    pub fn new(status: u16, reason: Option<&str>) -> Self {
        Self {
            status,
            reason: reason.map(str::to_owned),
        }
    }
}

#[derive(Default)]
struct Script {
    once: HashMap<String, VecDeque<Reply>>,
    always: HashMap<String, Reply>,
    default: Option<Reply>,
}

struct Shared {
    cfg: MockConfig,
    decoding: Option<jsonwebtoken::DecodingKey>,
    script: Mutex<Script>,
    received: Mutex<Vec<Received>>,
    started: AtomicUsize,
    answered: AtomicUsize,
    answered_ok: AtomicUsize,
    connections: AtomicUsize,
    delay: Mutex<Duration>,
    goaway: watch::Sender<u64>,
}

/// A running mock APNs.
pub struct MockApns {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl MockApns {
    /// Starts the mock on a free loopback port.
    pub async fn start(cfg: MockConfig) -> anyhow::Result<Self> {
        Self::start_on(cfg, 0).await
    }

    /// Starts the mock on `127.0.0.1:port` (0: any free port).
    pub async fn start_on(cfg: MockConfig, port: u16) -> anyhow::Result<Self> {
        use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cfg.cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(cfg.key_pem.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let decoding = match &cfg.jwt_public_key_pem {
            Some(pem) => Some(jsonwebtoken::DecodingKey::from_ec_pem(pem.as_bytes())?),
            None => None,
        };
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (goaway, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            cfg,
            decoding,
            script: Mutex::default(),
            received: Mutex::default(),
            started: AtomicUsize::new(0),
            answered: AtomicUsize::new(0),
            answered_ok: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            delay: Mutex::new(Duration::ZERO),
            goaway,
        });
        let (stop, mut stop_rx) = watch::channel(false);
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
                    _ = stop_rx.changed() => return,
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let s = s.clone();
                let mut stop_rx = stop_rx.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let n = s.connections.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut goaway_rx = s.goaway.subscribe();
                    let svc_shared = s.clone();
                    let svc = hyper::service::service_fn(move |req| {
                        let s = svc_shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&s, n, req).await) }
                    });
                    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .max_concurrent_streams(1000)
                        .serve_connection(TokioIo::new(tls), svc);
                    tokio::pin!(conn);
                    loop {
                        tokio::select! {
                            _ = conn.as_mut() => return,
                            r = goaway_rx.changed() => {
                                if r.is_err() { return; }
                                conn.as_mut().graceful_shutdown();
                            }
                            _ = stop_rx.changed() => {
                                conn.as_mut().graceful_shutdown();
                            }
                        }
                    }
                });
            }
        });
        Ok(Self { addr, shared, stop })
    }

    /// `https://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next `times` requests for `token` get this answer.
    pub fn reply_times(&self, token: &str, reply: Reply, times: usize) {
        let mut s = self.shared.script.lock().unwrap();
        let q = s.once.entry(token.to_owned()).or_default();
        for _ in 0..times {
            q.push_back(reply.clone());
        }
    }

    /// Every request for `token` gets this answer (after any queued ones).
    pub fn reply_always(&self, token: &str, reply: Reply) {
        self.shared
            .script
            .lock()
            .unwrap()
            .always
            .insert(token.to_owned(), reply);
    }

    /// Every request for a token with no script of its own gets this answer.
    pub fn reply_default(&self, reply: Option<Reply>) {
        self.shared.script.lock().unwrap().default = reply;
    }

    /// Delays every answer.
    pub fn set_delay(&self, d: Duration) {
        *self.shared.delay.lock().unwrap() = d;
    }

    /// Sends GOAWAY on every open connection.
    pub fn goaway_all(&self) {
        self.shared.goaway.send_modify(|n| *n += 1);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Requests received for one token.
    pub fn received_for(&self, token: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.token == token)
            .collect()
    }

    /// Requests answered 200 so far.
    pub fn delivered(&self) -> usize {
        self.shared.answered_ok.load(Ordering::SeqCst)
    }

    /// Requests received so far, answered or not (an answer may be delayed).
    pub fn started(&self) -> usize {
        self.shared.started.load(Ordering::SeqCst)
    }

    /// Requests answered so far, whatever the status.
    pub fn answered(&self) -> usize {
        self.shared.answered.load(Ordering::SeqCst)
    }
}

impl Drop for MockApns {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Checks the provider token the way APNs does; returns the failure reason.
fn check_jwt(s: &Shared, jwt: &str) -> Result<(), &'static str> {
    let Some(key) = &s.decoding else {
        return Ok(());
    };
    if jwt.is_empty() {
        return Err("MissingProviderToken");
    }
    let header = jsonwebtoken::decode_header(jwt).map_err(|_| "InvalidProviderToken")?;
    if header.alg != jsonwebtoken::Algorithm::ES256 || header.kid.as_deref() != Some(&s.cfg.key_id)
    {
        return Err("InvalidProviderToken");
    }
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    v.validate_exp = false;
    v.required_spec_claims.clear();
    #[derive(serde::Deserialize)]
    struct Claims {
        iss: String,
        iat: u64,
    }
    let data = jsonwebtoken::decode::<Claims>(jwt, key, &v).map_err(|_| "InvalidProviderToken")?;
    if data.claims.iss != s.cfg.team_id {
        return Err("InvalidProviderToken");
    }
    let now = now_s();
    if data.claims.iat > now + 60 {
        return Err("InvalidProviderToken");
    }
    if now.saturating_sub(data.claims.iat) > 3600 {
        return Err("ExpiredProviderToken");
    }
    Ok(())
}

async fn handle(s: &Shared, connection: usize, req: Request<Incoming>) -> Response<Full<Bytes>> {
    s.started.fetch_add(1, Ordering::SeqCst);
    let delay = *s.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let path = req.uri().path().to_owned();
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let token = path.strip_prefix("/3/device/").unwrap_or("").to_owned();
    let jwt = headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("bearer "))
        .unwrap_or("")
        .to_owned();

    let reply = if token.is_empty() {
        Reply::new(404, Some("BadPath"))
    } else if let Err(reason) = check_jwt(s, &jwt) {
        Reply::new(403, Some(reason))
    } else if headers.get("apns-topic").map(String::as_str) != Some(s.cfg.topic.as_str()) {
        Reply::new(400, Some("TopicDisallowed"))
    } else if body.len() > 4096 {
        Reply::new(413, Some("PayloadTooLarge"))
    } else {
        let mut script = s.script.lock().unwrap();
        let queued = script.once.get_mut(&token).and_then(VecDeque::pop_front);
        queued
            .or_else(|| script.always.get(&token).cloned())
            .or_else(|| script.default.clone())
            .unwrap_or(Reply::new(200, None))
    };

    let apns_id = headers.get("apns-id").cloned();
    if s.cfg.record {
        s.received.lock().unwrap().push(Received {
            token,
            headers,
            body,
            jwt,
            connection,
            status: reply.status,
        });
    }
    s.answered.fetch_add(1, Ordering::SeqCst);
    if reply.status == 200 {
        s.answered_ok.fetch_add(1, Ordering::SeqCst);
    }

    let mut resp = Response::builder().status(reply.status);
    if let Some(id) = apns_id {
        resp = resp.header("apns-id", id);
    }
    let body = match &reply.reason {
        Some(r) if reply.status == 410 => {
            format!("{{\"reason\":\"{r}\",\"timestamp\":{}}}", now_s() * 1000)
        }
        Some(r) => format!("{{\"reason\":\"{r}\"}}"),
        None => String::new(),
    };
    resp.header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
