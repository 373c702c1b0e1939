//! Where a client command's requests go, and how they are sent: a URL (http or https,
//! through the relay's own rustls client) or the admin API's Unix socket; and the message of
//! an error answer.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// How long a client waits for an answer's headers.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of an answer's body the client reads.
const MAX_ANSWER: usize = 1 << 20;

/// Where a client request goes.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A base URL, `http://host:port` or `https://...` (no trailing slash needed).
    Url(String),
    /// The admin API's Unix socket.
    Socket(PathBuf),
}

impl Endpoint {
    fn describe(&self) -> String {
        match self {
            Endpoint::Url(u) => u.clone(),
            Endpoint::Socket(p) => format!("the admin socket {}", p.display()),
        }
    }

    /// Sends one request to `path` (with query), returns the answer with its body unread.
    pub async fn send(
        &self,
        method: hyper::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> anyhow::Result<hyper::Response<Incoming>> {
        let answer = async {
            match self {
                Endpoint::Url(base) => {
                    let tls = crate::push::tls::client_config(None, "--url")?;
                    let connector = hyper_rustls::HttpsConnectorBuilder::new()
                        .with_tls_config(tls)
                        .https_or_http()
                        .enable_http1()
                        .build();
                    let client: Client<_, Full<Bytes>> =
                        Client::builder(TokioExecutor::new()).build(connector);
                    let uri = format!("{}{path}", base.trim_end_matches('/'));
                    let mut req = hyper::Request::builder().method(method).uri(uri);
                    for (k, v) in headers {
                        req = req.header(*k, v);
                    }
                    Ok(client
                        .request(req.body(Full::new(Bytes::from(body)))?)
                        .await?)
                }
                Endpoint::Socket(socket) => {
                    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
                        anyhow::anyhow!("cannot connect to the admin socket {}: {e} (is the relay running, as this user? set --socket or RELAY_ADMIN_SOCKET)", socket.display())
                    })?;
                    let (mut sender, conn) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    let mut req = hyper::Request::builder()
                        .method(method)
                        .uri(path)
                        .header("host", "localhost");
                    for (k, v) in headers {
                        req = req.header(*k, v);
                    }
                    Ok(sender
                        .send_request(req.body(Full::new(Bytes::from(body)))?)
                        .await?)
                }
            }
        };
        tokio::time::timeout(ANSWER_TIMEOUT, answer)
            .await
            .map_err(|_| anyhow::anyhow!("no answer from {} within 30 s", self.describe()))?
    }

    /// Sends one request and reads the whole answer: the status and the body as text.
    pub async fn call(
        &self,
        method: hyper::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> anyhow::Result<(u16, String)> {
        let resp = self.send(method, path, headers, body).await?;
        let status = resp.status().as_u16();
        let bytes = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
}

/// One HTTP(S) request to a full URL: the status and the body.
pub(crate) async fn request(
    method: hyper::Method,
    url: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("{url:?} is not a URL: {e}"))?;
    let base = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str())
    );
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Endpoint::Url(base).call(method, &path, headers, body).await
}

/// The message of an error envelope (`{"error":{"code","message"}}`), or the body itself.
pub fn error_text(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    match (v["error"]["code"].as_str(), v["error"]["message"].as_str()) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        _ => match v["error"].as_str() {
            Some(e) => e.to_owned(),
            None => body.trim().to_owned(),
        },
    }
}
