//! Mailboxes from the test side: a client for one mailbox (its base URL, app, id and
//! bearer), and WebSocket connections with the bearer in the header or as a subprotocol.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::{request_headers, Resp};

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A bearer for test link `n` (22+ characters of the allowed set).
pub fn bearer(n: u32) -> String {
    format!("Zq3k8r2mT1u0wQ-{n:08}_tok")
}

/// A mailbox id for test mailbox `n`.
pub fn mailbox_id(n: u32) -> String {
    format!("mbx-{n:012}-test")
}

/// One mailbox, as one device of the link sees it.
#[derive(Clone)]
pub struct Mb {
    pub addr: SocketAddr,
    pub app: String,
    pub id: String,
    pub bearer: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Mb {
    pub fn new(addr: SocketAddr, app: &str, id: &str, bearer: &str) -> Self {
        Self {
            addr,
            app: app.to_owned(),
            id: id.to_owned(),
            bearer: bearer.to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The same mailbox through another replica.
    pub fn at(&self, addr: SocketAddr) -> Self {
        let mut m = self.clone();
        m.addr = addr;
        m
    }

    /// The same mailbox with another bearer.
    pub fn with_bearer(&self, bearer: &str) -> Self {
        let mut m = self.clone();
        m.bearer = bearer.to_owned();
        m
    }

    pub fn path(&self, rest: &str) -> String {
        format!("/v1/{}/mailbox/{}{rest}", self.app, self.id)
    }

    pub async fn call(
        &self,
        method: &str,
        rest: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Resp {
        let mut h = vec![("authorization", format!("Bearer {}", self.bearer))];
        h.extend(headers.iter().cloned());
        request_headers(
            &self.client,
            method,
            &format!("http://{}{}", self.addr, self.path(rest)),
            &h,
            body,
        )
        .await
    }

    /// A request without any Authorization header.
    pub async fn anonymous(&self, method: &str, rest: &str) -> Resp {
        request_headers(
            &self.client,
            method,
            &format!("http://{}{}", self.addr, self.path(rest)),
            &[],
            Vec::new(),
        )
        .await
    }

    pub async fn claim(&self) -> u16 {
        self.call("PUT", "", &[], Vec::new()).await.status
    }

    pub async fn erase(&self) -> u16 {
        self.call("DELETE", "", &[], Vec::new()).await.status
    }

    pub async fn put(&self, dir: &str, seq: u64, body: &[u8]) -> Resp {
        self.call("PUT", &format!("/{dir}/{seq}"), &[], body.to_vec())
            .await
    }

    pub async fn put_notify(&self, dir: &str, seq: u64, body: &[u8], notify: &str) -> Resp {
        self.call(
            "PUT",
            &format!("/{dir}/{seq}"),
            &[("x-relay-notify", notify.to_owned())],
            body.to_vec(),
        )
        .await
    }

    pub async fn list(&self, dir: &str, query: &str) -> Resp {
        self.call("GET", &format!("/{dir}{query}"), &[], Vec::new())
            .await
    }

    pub async fn register(&self, dir: &str, reg: &serde_json::Value) -> Resp {
        self.call(
            "PUT",
            &format!("/{dir}/push"),
            &[],
            serde_json::to_vec(reg).unwrap(),
        )
        .await
    }

    /// Opens a socket at `rest` with the bearer in the header (`via_header`) or as the
    /// `zerobyte.bearer.<token>` subprotocol, offering `zerobyte.v1`.
    pub async fn socket(
        &self,
        rest: &str,
        via_header: bool,
    ) -> Result<
        (
            Ws,
            tokio_tungstenite::tungstenite::handshake::client::Response,
        ),
        tokio_tungstenite::tungstenite::Error,
    > {
        let mut req = format!("ws://{}{}", self.addr, self.path(rest))
            .into_client_request()
            .unwrap();
        let h = req.headers_mut();
        if via_header {
            h.insert(
                "authorization",
                format!("Bearer {}", self.bearer).parse().unwrap(),
            );
            h.insert("sec-websocket-protocol", "zerobyte.v1".parse().unwrap());
        } else {
            h.insert(
                "sec-websocket-protocol",
                format!("zerobyte.v1, zerobyte.bearer.{}", self.bearer)
                    .parse()
                    .unwrap(),
            );
        }
        tokio_tungstenite::connect_async(req).await
    }

    /// A watch on `dir`, bearer in the header.
    pub async fn watch(&self, dir: &str) -> Ws {
        self.socket(&format!("/{dir}/watch"), true)
            .await
            .unwrap_or_else(|e| panic!("watch: {e}"))
            .0
    }
}

/// The status and body of a refused upgrade.
pub fn refused(e: tokio_tungstenite::tungstenite::Error) -> (u16, String) {
    match e {
        tokio_tungstenite::tungstenite::Error::Http(r) => (
            r.status().as_u16(),
            r.body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
        ),
        other => panic!("not an HTTP refusal: {other}"),
    }
}

/// The next text message within `wait`, skipping pings; `None` on close or timeout.
pub async fn next_text(ws: &mut Ws, wait: Duration) -> Option<String> {
    loop {
        match tokio::time::timeout(wait, ws.next()).await.ok()?? {
            Ok(Message::Text(t)) => return Some(t.to_string()),
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            _ => return None,
        }
    }
}

/// The close code the relay sends within `wait`, skipping other messages.
pub async fn close_code(ws: &mut Ws, wait: Duration) -> Option<u16> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await.ok()? {
            Some(Ok(Message::Close(Some(f)))) => return Some(u16::from(f.code)),
            Some(Ok(Message::Close(None))) => return Some(1005),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

pub async fn send_text(ws: &mut Ws, t: &str) {
    ws.send(Message::Text(t.into())).await.unwrap();
}

/// The next binary message within `wait` (text, Ping and Pong skipped); `None` on a close,
/// an error or the wait running out.
pub async fn next_binary(ws: &mut Ws, wait: Duration) -> Option<Vec<u8>> {
    loop {
        match tokio::time::timeout(wait, ws.next()).await.ok()?? {
            Ok(Message::Binary(b)) => return Some(b.to_vec()),
            Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_)) => continue,
            _ => return None,
        }
    }
}

pub async fn send_binary(ws: &mut Ws, b: Vec<u8>) {
    ws.send(Message::Binary(b.into())).await.unwrap();
}

/// A client that opens a socket and then neither reads nor writes: a half-open mobile
/// socket. Raw TCP, so nothing answers the relay's Pings.
pub struct SilentClient(tokio::net::TcpStream);

impl SilentClient {
    /// Upgrades `rest` of `m` (bearer in the header) and reads only the 101.
    pub async fn open(m: &Mb, rest: &str) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(m.addr).await.unwrap();
        let req = format!(
            "GET {} HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
             sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             sec-websocket-protocol: zerobyte.v1\r\nauthorization: Bearer {}\r\n\r\n",
            m.path(rest),
            m.bearer
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                s.read(&mut b).await.unwrap(),
                1,
                "connection closed in the 101"
            );
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Self(s)
    }

    /// Reads everything the relay sent until it closed the connection (or `wait` passed):
    /// the opcodes of the frames and the close code, if a close frame came.
    pub async fn frames_until_closed(mut self, wait: Duration) -> (Vec<u8>, Option<u16>) {
        use tokio::io::AsyncReadExt;
        let mut all = Vec::new();
        let _ = tokio::time::timeout(wait, self.0.read_to_end(&mut all)).await;
        let (mut opcodes, mut code, mut at) = (Vec::new(), None, 0);
        while at + 10 <= all.len() || (at + 2 <= all.len() && all[at + 1] & 0x7f < 126) {
            let opcode = all[at] & 0x0f;
            let mut len = usize::from(all[at + 1] & 0x7f);
            at += 2;
            if len == 126 {
                len = usize::from(u16::from_be_bytes([all[at], all[at + 1]]));
                at += 2;
            } else if len == 127 {
                len = u64::from_be_bytes(all[at..at + 8].try_into().unwrap()) as usize;
                at += 8;
            }
            if at + len > all.len() {
                break;
            }
            if opcode == 8 && len >= 2 {
                code = Some(u16::from_be_bytes([all[at], all[at + 1]]));
            }
            opcodes.push(opcode);
            at += len;
        }
        (opcodes, code)
    }
}
