//! The public listener: HTTP/1.1 with a deadline for the request headers (a slow client
//! cannot hold a connection open by trickling them), the peer address for each request,
//! upgrades (the mailbox's WebSockets), and graceful shutdown (stop accepting, let
//! in-flight requests finish; upgraded sockets are closed by their own front-end).
//!
//! hyper-util's `GracefulShutdown` does not watch an HTTP/1 connection with upgrades, so
//! this does what it does: every connection holds a receiver of one watch channel; at stop
//! each is told to finish its current request and close, and the listener waits until
//! every receiver is gone.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub(super) async fn serve_public(
    listener: TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let (closing, connections) = watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
        let conn = http
            .serve_connection(TokioIo::new(tcp), svc)
            .with_upgrades();
        let closing = connections.clone();
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = wait_for(closing.clone()) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
            // The receiver goes with this task: the listener waits for every one.
            drop(closing);
        });
    }
    drop(listener);
    drop(connections);
    let _ = closing.send(true);
    closing.closed().await;
}

/// Resolves once `rx` holds true.
pub(super) async fn wait_for(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
