//! The admin API's two transports (SIGNED.md, "Transport boundary").
//!
//! - The Unix socket: bound under a temporary name in its directory (created 0700 when
//!   missing), given mode 0600, then renamed into place, so no one ever finds the path with
//!   a looser mode or half made. Each connection's peer credentials (SO_PEERCRED) are read
//!   at accept: a peer whose uid is not the relay's own is answered 403 on every request.
//! - Loopback TCP, opt-in: every request needs `Authorization: Bearer <token>`, compared in
//!   constant time (an HMAC of each side under a key drawn at start-up, checked by
//!   `ring::hmac::verify`), else 401.
//!
//! Each request carries a [`Transport`] extension, so a handler can tell where it came from
//! (the deprecated unsigned push is served on the socket only).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::secret::Secret;
use crate::signed::error::ApiError;

/// Where an admin request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The Unix socket, from the relay's own user.
    Socket,
    /// Loopback TCP, with the bearer token.
    Tcp,
}

impl Transport {
    /// Every transport, for the metrics registered at start-up.
    pub const ALL: [Transport; 2] = [Transport::Socket, Transport::Tcp];

    /// The statuses the admin API answers on either transport (200 and 201 served, 400 a
    /// bad body, 401 a TCP request without the token, 403 a socket peer of another user, 404
    /// an unknown path or signer, 503 the store not answering): the `status` label values
    /// registered at zero for every transport.
    pub const STATUSES: [StatusCode; 7] = [
        StatusCode::OK,
        StatusCode::CREATED,
        StatusCode::BAD_REQUEST,
        StatusCode::UNAUTHORIZED,
        StatusCode::FORBIDDEN,
        StatusCode::NOT_FOUND,
        StatusCode::SERVICE_UNAVAILABLE,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Transport::Socket => "unix",
            Transport::Tcp => "tcp",
        }
    }
}

/// The user the relay runs as.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The admin socket, bound; the path is removed when this is dropped (if it is still ours).
#[derive(Debug)]
pub struct BoundSocket {
    listener: UnixListener,
    path: PathBuf,
    identity: (u64, u64),
}

impl BoundSocket {
    /// Binds `path` atomically with mode 0600; its directory is created 0700 if missing.
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)?;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "admin.sock".to_owned());
        let mut nonce = [0u8; 6];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|_| std::io::Error::other("no randomness for the socket's temporary name"))?;
        let temp = dir.join(format!(
            ".{name}.{}.{}",
            std::process::id(),
            crate::device::hex(&nonce)
        ));
        let listener = UnixListener::bind(&temp)?;
        let placed = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&temp, path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        let meta = std::fs::symlink_metadata(path)?;
        Ok(Self {
            listener,
            path: path.to_owned(),
            identity: (meta.dev(), meta.ino()),
        })
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        // Another relay may have taken the path since: remove only our own socket.
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.identity {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A bearer token, held as its HMAC under a key drawn at start-up.
#[derive(Clone)]
pub struct TokenCheck {
    key: Arc<ring::hmac::Key>,
    tag: Arc<[u8]>,
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCheck([redacted])")
    }
}

impl TokenCheck {
    /// The check for `token`.
    pub fn new(token: &Secret) -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system's random source failed");
        let tag = ring::hmac::sign(&key, token.expose().as_bytes());
        Self {
            key: Arc::new(key),
            tag: tag.as_ref().into(),
        }
    }

    /// Whether the `Authorization` header carries the token, in constant time.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(presented) = authorization.and_then(|v| v.strip_prefix(b"Bearer ")) else {
            return false;
        };
        ring::hmac::verify(&self.key, presented, &self.tag).is_ok()
    }
}

fn refuse(status: StatusCode, e: ApiError, transport: Transport) -> Response {
    crate::metrics::admin_request(transport.label(), status.as_u16());
    let mut r = e.into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

/// Serves `app` on the socket until `stop`, checking each connection's peer uid.
pub async fn serve_socket(socket: BoundSocket, app: Router, stop: watch::Receiver<bool>) {
    let me = effective_uid();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = stop;
    loop {
        let stream = tokio::select! {
            accepted = socket.listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let peer = stream.peer_cred().ok().map(|c| c.uid());
        let allowed = peer == Some(me);
        if !allowed {
            tracing::warn!(peer_uid = ?peer, "admin socket: a peer of another user was refused");
        }
        let app = app.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let app = app.clone();
                async move {
                    if !allowed {
                        return Ok::<_, std::convert::Infallible>(refuse(
                            StatusCode::FORBIDDEN,
                            ApiError::forbidden(
                                "the admin socket serves only the relay's own user",
                            ),
                            Transport::Socket,
                        ));
                    }
                    req.extensions_mut().insert(Transport::Socket);
                    let resp =
                        tower::ServiceExt::oneshot(app, req.map(axum::body::Body::new)).await?;
                    crate::metrics::admin_request(
                        Transport::Socket.label(),
                        resp.status().as_u16(),
                    );
                    Ok(resp)
                }
            });
        serve_connection(stream, svc, &graceful);
    }
    drop(socket);
    graceful.shutdown().await;
}

/// Serves `app` on loopback TCP until `stop`, each request with the bearer token.
pub async fn serve_tcp(
    listener: TcpListener,
    app: Router,
    token: TokenCheck,
    stop: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = stop;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin API listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let app = app.clone();
        let token = token.clone();
        let svc = hyper::service::service_fn(
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                let app = app.clone();
                let ok = token.accepts(
                    req.headers()
                        .get(header::AUTHORIZATION)
                        .map(|v| v.as_bytes()),
                );
                async move {
                    if !ok {
                        return Ok::<_, std::convert::Infallible>(refuse(
                        StatusCode::UNAUTHORIZED,
                        ApiError::unauthorized("the admin API needs Authorization: Bearer <the token of RELAY_ADMIN_TOKEN_FILE>"),
                        Transport::Tcp,
                    ));
                    }
                    req.extensions_mut().insert(Transport::Tcp);
                    let resp =
                        tower::ServiceExt::oneshot(app, req.map(axum::body::Body::new)).await?;
                    crate::metrics::admin_request(Transport::Tcp.label(), resp.status().as_u16());
                    Ok(resp)
                }
            },
        );
        serve_connection(stream, svc, &graceful);
    }
    drop(listener);
    graceful.shutdown().await;
}

fn serve_connection<S, Svc>(
    stream: S,
    svc: Svc,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    Svc::Future: Send + 'static,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), svc));
    tokio::spawn(async move {
        let _ = conn.await;
    });
}
