//! Signed pushes from the test side: a signer (an Ed25519 key and its key id), request
//! bodies signed the way SIGNED.md says, signed reads, the admin socket, and an event
//! stream read frame by frame.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioExecutor;
use sealrelay::cli::Endpoint;
use sealrelay::testing::{read_authorization, sign_request, PrivateKey};
use serde_json::{json, Map, Value};

use super::{Harness, Options, Resp, TOPIC};

/// A signer.
pub struct Signer {
    pub key: PrivateKey,
    pub id: String,
}

impl Signer {
    pub fn new(name: &str) -> Self {
        Self {
            key: PrivateKey::generate().unwrap(),
            id: format!("ed25519:{name}"),
        }
    }

    /// The public key in the enrolment form.
    pub fn public(&self) -> String {
        self.key.public_key().to_base64()
    }

    /// An unsigned request for `devices`, issued at `issued_ms`.
    pub fn request(
        &self,
        request_id: &str,
        devices: &[String],
        issued_ms: i64,
    ) -> Map<String, Value> {
        let targets: Vec<Value> = devices
            .iter()
            .map(|d| json!({"device": d, "suite": "x25519", "ciphertext": "A".repeat(68)}))
            .collect();
        let collapse = request_id.replace('-', "");
        let v = json!({
            "schemaVersion": "2",
            "requestId": request_id,
            "topic": TOPIC,
            "targets": targets,
            "collapseId": collapse,
            "priority": "time-sensitive",
            "event": false,
            "issuedAtMs": issued_ms,
            "signerKeyId": self.id,
        });
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    /// The request with its signature.
    pub fn sign(&self, mut m: Map<String, Value>) -> Value {
        sign_request(&self.key, &mut m);
        Value::Object(m)
    }

    /// `Authorization` for a signed GET of `path` at `ts_ms`.
    pub fn read_auth(&self, path: &str, ts_ms: i64) -> String {
        read_authorization(&self.key, &self.id, "GET", path, ts_ms as u64)
    }
}

/// A request id: a UUID in lowercase 8-4-4-4-12 form.
pub fn rid(n: u64) -> String {
    format!("2f0c3a8e-0d5b-4f7e-9c1a-{n:012x}")
}

/// A relay with its admin socket in a directory of its own.
pub struct SignedRelay {
    pub h: Harness,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
}

impl SignedRelay {
    pub async fn start(opts: Options) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run").join("admin.sock");
        let opts = opts.var("RELAY_ADMIN_SOCKET", &socket.display().to_string());
        let h = Harness::with(opts).await;
        Self { h, socket, dir }
    }

    pub async fn admin_call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        admin_call(&self.socket, method, path, body).await
    }

    /// Enrols `s` for `topics` and checks the answer. A 503 (a store with a short
    /// `RELAY_REDIS_TIMEOUT_MS` on a busy machine) is tried again for up to 10 s: setting
    /// up never depends on the machine's speed.
    pub async fn enroll(&self, s: &Signer, topics: &[&str]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, v) = self
                .admin_call(
                    "PUT",
                    &format!("/admin/v1/signers/{}", s.id),
                    Some(json!({"publicKey": s.public(), "topics": topics})),
                )
                .await;
            if status == 503 && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            assert!(status == 201 || status == 200, "{status} {v}");
            return;
        }
    }

    pub async fn push(&self, body: &Value) -> Resp {
        self.h
            .request("POST", "/v2/pushes", serde_json::to_vec(body).unwrap())
            .await
    }

    /// A signed GET of `path` by `s` at `ts_ms`.
    pub async fn read(&self, s: &Signer, path: &str, ts_ms: i64) -> Resp {
        self.h
            .request_with(
                "GET",
                path,
                &[("authorization", s.read_auth(path, ts_ms))],
                Vec::new(),
            )
            .await
    }
}

/// A receipt's name for a device: the first 16 hex of SHA-256 of its token.
pub fn hash16(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// One admin API call over a Unix socket.
pub async fn admin_call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, text) = Endpoint::Socket(socket.to_owned())
        .call(
            method.parse().unwrap(),
            path,
            &[("content-type", "application/json".to_owned())],
            body.map(|b| serde_json::to_vec(&b).unwrap())
                .unwrap_or_default(),
        )
        .await
        .unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Checks the one error envelope: exactly `code`, `message` and (when known) `pushId`.
pub fn assert_error(r: &Resp, status: u16, code: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    let e = v["error"]
        .as_object()
        .unwrap_or_else(|| panic!("no error object: {}", r.body));
    assert_eq!(e["code"], code, "{}", r.body);
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        r.body
    );
    assert!(
        e.keys()
            .all(|k| ["code", "message", "pushId"].contains(&k.as_str())),
        "{}",
        r.body
    );
    assert_eq!(v.as_object().unwrap().len(), 1, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    v
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

/// Parses a whole SSE body: its events and how many keepalive comments it held.
pub fn parse_sse(text: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let (mut id, mut event, mut data) = (None, None, None);
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str(v).ok();
            }
        }
        if let (Some(id), Some(event), Some(data)) = (id, event, data) {
            out.push(Sse { id, event, data });
        }
    }
    out
}

/// An open event stream, read as it arrives.
pub struct Stream {
    body: hyper::body::Incoming,
    buf: String,
    pub status: u16,
}

impl Stream {
    pub async fn open(addr: std::net::SocketAddr, path: &str, headers: &[(&str, String)]) -> Self {
        let client: hyper_util::client::legacy::Client<_, Empty<Bytes>> =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
        let mut req = hyper::Request::builder().uri(format!("http://{addr}{path}"));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = client
            .request(req.body(Empty::new()).unwrap())
            .await
            .unwrap();
        Self {
            status: resp.status().as_u16(),
            body: resp.into_body(),
            buf: String::new(),
        }
    }

    /// The next event, or `None` when the stream ended (or nothing came within `wait`).
    pub async fn next(&mut self, wait: Duration) -> Option<Sse> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                if let Some(e) = parse_sse(&block).pop() {
                    return Some(e);
                }
                continue;
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }

    /// Whether the stream ends (the server closes it) within `wait`, with no more events.
    pub async fn ends(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return false,
                Ok(None) => return parse_sse(&self.buf).is_empty(),
                Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.push_str(&String::from_utf8_lossy(&d));
                    }
                }
            }
        }
    }
}
