//! The public listener: HTTP/1.1 with a deadline for the request headers (a slow client
//! cannot hold a connection open by trickling them), the peer address for each request,
//! upgrades (the mailbox's WebSockets), and graceful shutdown (stop accepting, let
//! in-flight requests finish; upgraded sockets are closed by their own front-end).
//!
//! Every connection's writes have a deadline ([`WriteDeadline`]): a write that makes no
//! progress for the stall limit fails, and the connection with it, so a client that stops
//! reading (an event stream's, a socket's) cannot hold it and what it pins.
//!
//! `POST /` (protocol v1, by far the busiest route) is answered before the router
//! ([`Busiest`]): the same handler the router would call, without the router's clone, path
//! match, boxed service and extensions on every request.
//!
//! hyper-util's `GracefulShutdown` does not watch an HTTP/1 connection with upgrades, so
//! this does what it does: every connection holds a receiver of one watch channel; at stop
//! each is told to finish its current request and close, and the listener waits until
//! every receiver is gone.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

/// The headers marked sensitive on every request (by the routers' layer, `super::
/// sensitive_headers`, and by [`Busiest`]): `Authorization` (signed reads, mailbox bearers,
/// the admin token) and `Sec-WebSocket-Protocol` (a browser's mailbox bearer).
pub(super) const SENSITIVE_HEADERS: [axum::http::HeaderName; 2] = [
    axum::http::header::AUTHORIZATION,
    axum::http::header::SEC_WEBSOCKET_PROTOCOL,
];

/// The route served before the router: `POST /` with the v1 front-end that answers it (the
/// router's own route for it, `crate::v1::intake::routes`, answers the same).
pub(super) struct Busiest(pub(super) Arc<crate::v1::V1>);

impl Busiest {
    /// Whether `req` is `POST /`.
    fn takes<B>(req: &hyper::Request<B>) -> bool {
        req.method() == hyper::Method::POST && req.uri().path() == "/"
    }

    /// Answers `req` as the router would: its credential headers marked sensitive (the
    /// router's layer), then the v1 intake.
    async fn answer(
        v1: Arc<crate::v1::V1>,
        mut req: axum::extract::Request,
    ) -> Result<axum::response::Response, std::convert::Infallible> {
        for name in SENSITIVE_HEADERS {
            if let axum::http::header::Entry::Occupied(mut e) = req.headers_mut().entry(name) {
                for v in e.iter_mut() {
                    v.set_sensitive(true);
                }
            }
        }
        Ok(crate::v1::intake::intake(axum::extract::State(v1), req).await)
    }
}

/// Binds the public listener. With `share_port` (`RELAY_RUNTIME=per-core`) the socket is
/// marked `SO_REUSEPORT` before it is bound, so each core binds its own listener on the
/// same address and the kernel spreads new connections across them.
pub(super) fn bind_public(
    addr: std::net::SocketAddr,
    share_port: bool,
) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // What `TcpListener::bind` does on Unix: a restarted relay can bind at once.
    socket.set_reuseaddr(true)?;
    if share_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

pub(super) async fn serve_public(
    listener: TcpListener,
    app: axum::Router,
    busiest: Busiest,
    header_timeout: Duration,
    write_stall: Duration,
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
        let v1 = busiest.0.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                use futures_util::future::Either;
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                let req = req.map(axum::body::Body::new);
                if Busiest::takes(&req) {
                    Either::Left(Busiest::answer(v1.clone(), req))
                } else {
                    Either::Right(app.clone().oneshot(req))
                }
            });
        let conn = http
            .serve_connection(TokioIo::new(WriteDeadline::new(tcp, write_stall)), svc)
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

/// An I/O whose writes fail (`TimedOut`) once one has waited `limit` without progress: the
/// peer stopped reading and the kernel's buffers are full.
#[derive(Debug)]
pub(crate) struct WriteDeadline<T> {
    io: T,
    limit: Duration,
    /// Set when a write first waits; cleared by any progress.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub(crate) fn new(io: T, limit: Duration) -> Self {
        Self {
            io,
            limit,
            stalled: None,
        }
    }

    /// What the inner write answered, with the deadline applied: any answer but `Pending`
    /// is progress (the deadline is forgotten); `Pending` starts it, or fails once it passed.
    fn progress<R>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        inner: std::task::Poll<std::io::Result<R>>,
    ) -> std::task::Poll<std::io::Result<R>> {
        use std::future::Future;
        if inner.is_ready() {
            self.stalled = None;
            return inner;
        }
        let limit = self.limit;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer has not read for the write deadline",
            ))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.progress(cx, r)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.progress(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.io).poll_flush(cx);
        self.progress(cx, r)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that reads nothing: writes fill the pipe, then wait, then fail once the
    /// deadline passes; a peer that reads in time keeps the connection.
    #[tokio::test]
    async fn a_write_that_waits_past_the_deadline_fails() {
        let (near, far) = tokio::io::duplex(1024);
        let mut guarded = WriteDeadline::new(near, Duration::from_millis(200));
        guarded.write_all(&[1u8; 1024]).await.unwrap();
        let started = tokio::time::Instant::now();
        let e = guarded.write_all(&[2u8; 10]).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));

        let (near, mut far2) = tokio::io::duplex(1024);
        let mut guarded = WriteDeadline::new(near, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut total = 0;
            while total < 8 * 1024 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                total += far2.read(&mut buf).await.unwrap();
            }
            total
        });
        // 8 KiB through a 1 KiB pipe read every 50 ms: every wait is shorter than 200 ms.
        guarded.write_all(&[3u8; 8 * 1024]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 8 * 1024);
        drop(far);
    }
}
