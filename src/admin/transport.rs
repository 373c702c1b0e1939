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

/// What a socket directory's owner and mode allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirCheck {
    /// Ours (or root's), and nobody else may add or replace entries in it.
    Private,
    /// Ours (or root's), but others may write into it and it has no sticky bit.
    Shared,
    /// Owned by another user, who could replace what is in it.
    Foreign(u32),
}

fn check_directory(meta: &std::fs::Metadata, euid: u32) -> DirCheck {
    check_mode(meta.uid(), meta.mode(), euid)
}

fn check_mode(owner: u32, mode: u32, euid: u32) -> DirCheck {
    if owner != euid && owner != 0 {
        return DirCheck::Foreign(owner);
    }
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky {
        DirCheck::Shared
    } else {
        DirCheck::Private
    }
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
    ///
    /// The socket is bound inside a private staging directory (0700, beside `path`), made
    /// 0600 there and only then renamed into place: at no moment can another user reach a
    /// socket with the umask's looser mode. The directory itself is checked first: one owned
    /// by another user (not root) is refused, since its owner could swap the socket for
    /// theirs; one that others may write into without the sticky bit is used with a warning
    /// (a pod's emptyDir is such a directory, with no other user in the pod).
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
        match check_directory(&std::fs::metadata(&dir)?, effective_uid()) {
            DirCheck::Private => {}
            DirCheck::Shared => tracing::warn!(
                directory = %dir.display(),
                "the admin socket's directory can be written by other users (no sticky bit): another user could replace the socket; give it mode 0700"
            ),
            DirCheck::Foreign(uid) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                    "{} belongs to uid {uid}, not to this user: its owner could replace the socket",
                    dir.display()
                ),
                ))
            }
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "admin.sock".to_owned());
        let mut nonce = [0u8; 6];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|_| std::io::Error::other("no randomness for the socket's temporary name"))?;
        let staging = dir.join(format!(
            ".{name}.{}.{}",
            std::process::id(),
            crate::device::hex(&nonce)
        ));
        // `create` (not `create_all`) fails if the name exists: the staging directory is
        // ours, made with 0700 before anything is put in it.
        std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
        let temp = staging.join("s");
        let placed = UnixListener::bind(&temp).and_then(|listener| {
            std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&temp, path)?;
            Ok(listener)
        });
        let _ = std::fs::remove_file(&temp);
        let _ = std::fs::remove_dir(&staging);
        let listener = placed?;
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
        let Some(presented) = authorization.and_then(bearer_credentials) else {
            return false;
        };
        ring::hmac::verify(&self.key, presented, &self.tag).is_ok()
    }
}

/// The credentials of an `Authorization: Bearer <token>` value: the scheme matched without
/// regard to case (RFC 9110 11.1), then one or more spaces (RFC 6750 2.1).
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(b"Bearer".len())?;
    if !scheme.eq_ignore_ascii_case(b"Bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_directory_is_judged_by_its_owner_and_mode() {
        let me = 1000;
        let cases = [
            ("ours, 0700", me, 0o40700, DirCheck::Private),
            ("ours, 0755", me, 0o40755, DirCheck::Private),
            ("root's, 0755", 0, 0o40755, DirCheck::Private),
            ("root's, sticky 1777", 0, 0o41777, DirCheck::Private),
            ("ours, 0777 (an emptyDir)", me, 0o40777, DirCheck::Shared),
            ("root's, group-writable 0775", 0, 0o40775, DirCheck::Shared),
            (
                "another user's, 0700",
                1001,
                0o40700,
                DirCheck::Foreign(1001),
            ),
            (
                "another user's, sticky",
                1001,
                0o41777,
                DirCheck::Foreign(1001),
            ),
        ];
        for (name, owner, mode, want) in cases {
            assert_eq!(check_mode(owner, mode, me), want, "{name}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_matched_without_case() {
        type Case = (&'static str, &'static [u8], Option<&'static [u8]>);
        let cases: [Case; 8] = [
            ("canonical", b"Bearer abc", Some(b"abc")),
            ("lower case", b"bearer abc", Some(b"abc")),
            ("upper case", b"BEARER abc", Some(b"abc")),
            ("two spaces", b"Bearer  abc", Some(b"abc")),
            ("no space", b"Bearerabc", None),
            ("no token", b"Bearer ", None),
            ("another scheme", b"Basic abc", None),
            ("short", b"Bear", None),
        ];
        for (name, value, want) in cases {
            assert_eq!(bearer_credentials(value), want, "{name}");
        }
    }

    #[tokio::test]
    async fn a_bound_socket_is_0600_and_leaves_no_staging_behind() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.path().join("admin.sock");
        let bound = BoundSocket::bind(&path).unwrap();
        let mode = std::fs::symlink_metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("admin.sock")]);
        drop(bound);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_directory_of_another_user_is_refused() {
        if effective_uid() != 0 {
            // Only root can give a directory to another user; the judgement itself is
            // covered above.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
        let e = BoundSocket::bind(&theirs.join("admin.sock")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("uid 4242"), "{e}");
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
    }
}
