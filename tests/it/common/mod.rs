//! The one helper every integration test uses: a mock APNs pair (production and sandbox,
//! HTTP/2 over TLS with a CA made at test time, from the test kit) and a relay started
//! against them on loopback ports it binds itself.

pub mod mailbox;
pub mod process;
pub mod signed;

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use sealrelay::app::Running;
use sealrelay::clock::Clock;
use sealrelay::config::Config;
pub use sealrelay_testkit::mock_apns::{MockApns, MockConfig, Reply};
pub use sealrelay_testkit::pki::{AuthKey, Pki};
pub use sealrelay_testkit::redis::{RedisCluster, RedisServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const TEAM_ID: &str = "TEAM123456";
pub const KEY_ID: &str = "KEY1234567";
pub const TOPIC: &str = "com.example.cronstable";
/// A fixed, plausible instant for manual clocks.
pub const T0: i64 = 1_790_000_000_000;

pub fn pki() -> Pki {
    Pki::new()
}

pub fn auth_key() -> AuthKey {
    AuthKey::new()
}

/// A device token (64 hex characters) for test device `n`.
pub fn device(n: u32) -> String {
    format!("{n:08x}{}", "ab".repeat(28))
}

/// A 32-hex id for test alert `n`.
pub fn id(n: u32) -> String {
    format!("{n:032x}")
}

/// A well-formed envelope.
pub fn envelope(device: &str, collapse: &str) -> Value {
    json!({
        "v": 1,
        "device": device,
        "suite": "x25519",
        "ciphertext": "A".repeat(68),
        "collapseId": collapse,
        "priority": "time-sensitive",
        "event": false,
    })
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A relay, its two mock APNs endpoints, and a client.
pub struct Harness {
    pub prod: MockApns,
    pub sandbox: MockApns,
    pub relay: Running,
    client: Client<HttpConnector, Full<Bytes>>,
    _pki: Pki,
}

pub struct Options {
    pub vars: Vec<(String, String)>,
    pub clock: Clock,
    pub credentials: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            vars: Vec::new(),
            clock: Clock::System,
            credentials: true,
        }
    }
}

impl Options {
    pub fn var(mut self, k: &str, v: &str) -> Self {
        self.vars.push((k.to_owned(), v.to_owned()));
        self
    }

    pub fn clock(mut self, c: Clock) -> Self {
        self.clock = c;
        self
    }

    pub fn without_credentials(mut self) -> Self {
        self.credentials = false;
        self
    }
}

pub async fn mock(pki: &Pki, key: &AuthKey) -> MockApns {
    MockApns::start(MockConfig {
        cert_pem: pki.cert_pem.clone(),
        key_pem: pki.key_pem.clone(),
        jwt_public_key_pem: Some(key.public_pem.clone()),
        team_id: TEAM_ID.to_owned(),
        key_id: KEY_ID.to_owned(),
        topic: TOPIC.to_owned(),
        record: true,
    })
    .await
    .unwrap()
}

/// The variables that point a relay at these mocks.
pub fn relay_vars(
    pki: &Pki,
    key: &AuthKey,
    prod: &MockApns,
    sandbox: &MockApns,
) -> Vec<(String, String)> {
    [
        ("RELAY_LISTEN", "127.0.0.1:0".to_owned()),
        ("RELAY_ADMIN_LISTEN", "127.0.0.1:0".to_owned()),
        ("APNS_TEAM_ID", TEAM_ID.to_owned()),
        ("APNS_KEY_ID", KEY_ID.to_owned()),
        ("APNS_AUTH_KEY", key.private_pem.clone()),
        ("APNS_TOPIC", TOPIC.to_owned()),
        ("APNS_PRODUCTION_URL", prod.url()),
        ("APNS_SANDBOX_URL", sandbox.url()),
        ("APNS_CA_FILE", pki.ca_file.display().to_string()),
        ("APNS_REQUEST_TIMEOUT_MS", "3000".to_owned()),
        // Tests that use the admin socket name their own path.
        ("RELAY_ADMIN_SOCKET", String::new()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

pub fn config(vars: &[(String, String)]) -> Config {
    let map: HashMap<String, String> = vars.iter().cloned().collect();
    Config::load(&move |k: &str| map.get(k).cloned()).unwrap_or_else(|e| panic!("config: {e}"))
}

impl Harness {
    pub async fn start() -> Self {
        Self::with(Options::default()).await
    }

    pub async fn with(opts: Options) -> Self {
        let pki = pki();
        let key = auth_key();
        let prod = mock(&pki, &key).await;
        let sandbox = mock(&pki, &key).await;
        let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
        if !opts.credentials {
            vars.retain(|(k, _)| {
                !["APNS_TEAM_ID", "APNS_KEY_ID", "APNS_AUTH_KEY", "APNS_TOPIC"]
                    .contains(&k.as_str())
            });
        }
        vars.extend(opts.vars);
        let relay = sealrelay::app::spawn(config(&vars), opts.clock)
            .await
            .unwrap();
        Self {
            prod,
            sandbox,
            relay,
            client: Client::builder(TokioExecutor::new()).build_http(),
            _pki: pki,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.relay.addr
    }

    pub async fn request(&self, method: &str, path: &str, body: Vec<u8>) -> Resp {
        request(
            &self.client,
            method,
            &format!("http://{}{path}", self.relay.addr),
            body,
        )
        .await
    }

    pub async fn admin(&self, path: &str) -> Resp {
        request(
            &self.client,
            "GET",
            &format!("http://{}{path}", self.relay.admin_addr),
            Vec::new(),
        )
        .await
    }

    /// A request with extra headers.
    pub async fn request_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Resp {
        request_headers(
            &self.client,
            method,
            &format!("http://{}{path}", self.relay.addr),
            headers,
            body,
        )
        .await
    }

    pub async fn post(&self, body: &Value) -> Resp {
        self.request("POST", "/", serde_json::to_vec(body).unwrap())
            .await
    }
}

/// The sum of a counter family's series (every label set) in a `/metrics` text.
pub fn counter_sum(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub async fn request(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: &str,
    url: &str,
    body: Vec<u8>,
) -> Resp {
    request_headers(client, method, url, &[], body).await
}

pub async fn request_headers(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: &str,
    url: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Resp {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let req = req.body(Full::new(Bytes::from(body))).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Writes raw bytes to `addr` and reads the answer until the server closes or 2 s pass.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(2), s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") && response_complete(&out) {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn response_complete(out: &[u8]) -> bool {
    let text = String::from_utf8_lossy(out);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    body.len() >= len
}

/// Waits until the relay's background work on `redis` has run once (the retry worker's
/// claim runs ZRANGEBYSCORE, the queue gauges ZCARD), so its scripts are loaded: a first run
/// inside a measured window would add a NOSCRIPT EVALSHA and a SCRIPT LOAD that are not the
/// requests'.
pub async fn background_scripts_loaded(redis: &RedisServer) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let c = redis.command_calls();
        if c.contains_key("zrangebyscore") && c.contains_key("zcard") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no background poll ran: {c:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
