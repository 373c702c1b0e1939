//! The region listener (`RELAY_REGION_LISTEN`): where other regions' hops land, over HTTP/2
//! (or HTTP/1.1). `GET /readyz` answers the peers' probes; every other request is a hop: its
//! what needs no body is checked ([`Regions::precheck`]), its body is read (to a bound) and its
//! signature checked ([`Regions::verify`]), and the request, marked [`Hop`]
//! and with the client address the edge saw, goes to the same router the public listener
//! serves, which decides it here and never forwards it again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use super::peers::Regions;
use super::wire::{Refused, AUTH, CLIENT, HOP, REFUSAL_HEADER, SET};

/// The largest hop body: the largest body any protocol takes (a mailbox envelope, 64 KiB by
/// default and at most 1 MiB) with room to spare.
const MAX_HOP_BODY: usize = 2 << 20;
/// How long a hop's body may take to arrive.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

fn refusal(status: StatusCode, error: &str) -> Response {
    let mut r = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        format!("{{\"error\":\"{error}\",\"status\":{}}}", status.as_u16()),
    )
        .into_response();
    r.headers_mut()
        .insert(REFUSAL_HEADER, HeaderValue::from_static("1"));
    r
}

/// What a hop is handed to: the public router, and the admin router for `/admin/` paths (a
/// signer write sent to the signer's home region by another region's admin API).
#[derive(Clone)]
pub struct Routers {
    /// The public listener's router.
    pub public: axum::Router,
    /// The admin API's router.
    pub admin: axum::Router,
}

/// One request on the region listener.
async fn handle(
    regions: Arc<Regions>,
    routers: Routers,
    ready: Arc<dyn Fn() -> bool + Send + Sync>,
    peer: SocketAddr,
    req: Request,
) -> Response {
    if req.method() == axum::http::Method::GET && req.uri().path() == "/readyz" {
        return if ready() {
            (StatusCode::OK, "ready\n").into_response()
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
        };
    }
    let (mut parts, body) = req.into_parts();
    let sender = parts
        .headers
        .get(HOP)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    // What needs no body first: a stranger's request is refused before it is read.
    let checked = match regions.precheck(&parts.headers) {
        Err(e) => Err(e),
        Ok(from) => {
            let read =
                tokio::time::timeout(BODY_DEADLINE, axum::body::to_bytes(body, MAX_HOP_BODY));
            let bytes = match read.await {
                Ok(Ok(b)) => b,
                _ => return refusal(StatusCode::BAD_REQUEST, "invalid_request"),
            };
            regions
                .verify(from, &parts.method, &parts.uri, &parts.headers, &bytes)
                .map(|ok| (ok, bytes))
        }
    };
    let ((hop, client), bytes) = match checked {
        Ok(x) => x,
        Err(Refused::Unauthorized(why)) => {
            crate::metrics::region_hop_received(known(&regions, &sender), "unauthorized");
            tracing::warn!(from = %known(&regions, &sender), peer = %peer.ip(), why, "hop refused: unauthorized");
            return refusal(StatusCode::UNAUTHORIZED, "unauthorized");
        }
        Err(Refused::SetMismatch(from)) => {
            crate::metrics::region_hop_received(&from, "region_set_mismatch");
            tracing::warn!(%from, "hop refused: the sender lists another set of regions");
            return refusal(StatusCode::CONFLICT, "region_set_mismatch");
        }
    };
    crate::metrics::region_hop_received(&hop.from, "accepted");
    for h in [HOP, CLIENT, SET, AUTH] {
        parts.headers.remove(h);
    }
    // The per-source limits count the client the edge saw, not the peer region.
    let client = client.unwrap_or(peer.ip());
    parts
        .extensions
        .insert(ConnectInfo(SocketAddr::new(client, 0)));
    parts.extensions.insert(hop);
    let router = if parts.uri.path().starts_with("/admin/") {
        routers.admin
    } else {
        routers.public
    };
    let req = Request::from_parts(parts, Body::from(bytes));
    match router.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// A label for a sending region: its name when configured, else `unknown` (a metric label
/// never takes a stranger's text).
fn known<'a>(regions: &'a Regions, sender: &str) -> &'a str {
    regions.peer_name(sender).unwrap_or("unknown")
}

/// The region listener's TLS configuration from its certificate chain and key (PEM):
/// HTTP/2 and HTTP/1.1 offered by ALPN. Errors name the variables.
pub fn server_config(
    chain: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<rustls::ServerConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("RELAY_REGION_TLS_CERT_FILE={}: {e}", chain.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "RELAY_REGION_TLS_CERT_FILE={} holds no certificate",
        chain.display()
    );
    // The key's text is never printed: only its file and what is wrong with it.
    let key = PrivateKeyDer::from_pem_file(key).map_err(|_| {
        anyhow::anyhow!(
            "RELAY_REGION_TLS_KEY_FILE={} holds no readable PEM private key",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            anyhow::anyhow!("RELAY_REGION_TLS_CERT_FILE and RELAY_REGION_TLS_KEY_FILE: {e}")
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves the region listener until `stop`: HTTP/2 (prior knowledge, or by ALPN over TLS)
/// and HTTP/1.1; over TLS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    regions: Arc<Regions>,
    router: Routers,
    tls: Option<tokio_rustls::TlsAcceptor>,
    ready: Arc<dyn Fn() -> bool + Send + Sync>,
    mut stop: watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    // Every connection holds a receiver; at stop each is told to finish and close, and the
    // listener waits (a bounded time) until every receiver is gone.
    let (closing, connections) = watch::channel(false);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "region listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let (regions, router, ready) = (regions.clone(), router.clone(), ready.clone());
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let (regions, router, ready) = (regions.clone(), router.clone(), ready.clone());
            async move {
                Ok::<_, std::convert::Infallible>(
                    handle(regions, router, ready, peer, req.map(Body::new)).await,
                )
            }
        });
        let mut closing_rx = connections.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            match tls {
                // With upgrades: a proxied mailbox socket is upgraded here at home.
                None => serve_conn(&builder, TokioIo::new(tcp), svc, &mut closing_rx).await,
                Some(acceptor) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(BODY_DEADLINE, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    serve_conn(&builder, TokioIo::new(stream), svc, &mut closing_rx).await;
                }
            }
            drop(closing_rx);
        });
    }
    drop(listener);
    drop(connections);
    let _ = closing.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), closing.closed()).await;
}

/// One connection served until it ends, or until `closing` says the listener stops (then
/// its requests in flight finish first).
async fn serve_conn<I, S>(
    builder: &hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    io: I,
    svc: S,
    closing: &mut watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let conn = builder.serve_connection_with_upgrades(io, svc);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = closing.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.as_mut().await;
        }
    }
}
