//! The body of an HTTP/2 request to a push service, sent as DATA frames small enough to
//! share one write with the other requests on the connection.
//!
//! The `h2` crate copies a DATA frame shorter than 256 bytes into its write buffer, but
//! keeps a longer one aside and writes the buffer and that frame out before it takes the
//! next frame. A request body of one chunk (a notification of a kilobyte, say) therefore
//! costs its connection one write, and one TLS record, per request, however many requests
//! are waiting behind it. Split into frames under that threshold, the bodies of every
//! request waiting when the connection's task runs are copied into the buffer and go out
//! in one write. The frames carry the same bytes; a frame header is 9 bytes per
//! [`FRAME_BYTES`] of payload.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The largest DATA frame payload a [`SmallFrames`] body sends: under `h2`'s threshold
/// (256 bytes) for copying a frame into its write buffer rather than writing it alone.
pub const FRAME_BYTES: usize = 255;

/// A request body of known bytes, sent in frames of at most [`FRAME_BYTES`]. Its `Debug`
/// shows the length only: a body is a sealed notification or a token request.
#[derive(Clone)]
pub struct SmallFrames {
    rest: Bytes,
}

impl std::fmt::Debug for SmallFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmallFrames")
            .field("len", &self.rest.len())
            .finish()
    }
}

impl SmallFrames {
    /// A body of these bytes.
    pub fn new(bytes: Bytes) -> Self {
        Self { rest: bytes }
    }
}

impl Body for SmallFrames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            return Poll::Ready(None);
        }
        let n = this.rest.len().min(FRAME_BYTES);
        Poll::Ready(Some(Ok(Frame::data(this.rest.split_to(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use http_body_util::BodyExt;
    use proptest::prelude::*;

    use super::*;

    fn frames_of(bytes: Vec<u8>) -> Vec<Bytes> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut body = SmallFrames::new(Bytes::from(bytes));
            let mut frames = Vec::new();
            while let Some(frame) = body.frame().await {
                frames.push(frame.unwrap().into_data().unwrap());
            }
            assert!(body.is_end_stream());
            frames
        })
    }

    #[test]
    fn debug_shows_the_length_not_the_bytes() {
        let body = SmallFrames::new(Bytes::from_static(b"sealed-secret"));
        assert_eq!(format!("{body:?}"), "SmallFrames { len: 13 }");
    }

    #[test]
    fn an_empty_body_is_ended_and_sends_no_frame() {
        let body = SmallFrames::new(Bytes::new());
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        assert!(frames_of(Vec::new()).is_empty());
    }

    /// A client stream that counts the writes that reach its socket, vectored like a
    /// `TcpStream`.
    struct Counted {
        inner: tokio::net::TcpStream,
        writes: Arc<AtomicUsize>,
    }

    impl Counted {
        /// Counts a write that took bytes (not one the socket refused for now).
        fn count(&self, r: &Poll<std::io::Result<usize>>) {
            if matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    impl tokio::io::AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl tokio::io::AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write(cx, buf);
            self.count(&r);
            r
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
            self.count(&r);
            r
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// The writes an HTTP/2 client connection makes for `n` requests of `len` bytes sent
    /// together (bodies made by `body`), to a server that reads each body whole.
    async fn writes_for<B>(n: usize, len: usize, body: fn(Bytes) -> B) -> usize
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(
                |req: hyper::Request<hyper::body::Incoming>| async move {
                    let got = req.into_body().collect().await?.to_bytes().len();
                    Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Full::new(
                        Bytes::from(got.to_string()),
                    )))
                },
            );
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let writes = Arc::new(AtomicUsize::new(0));
        let stream = Counted {
            inner: tokio::net::TcpStream::connect(addr).await.unwrap(),
            writes: writes.clone(),
        };
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let send = |sender: hyper::client::conn::http2::SendRequest<B>| async move {
            let mut sender = sender;
            let request = hyper::Request::post("http://relay.test/3/device/x")
                .body(body(Bytes::from(vec![b'a'; len])))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            response.into_body().collect().await.unwrap().to_bytes()
        };
        // One request first, so the connection's own set-up is not counted.
        assert_eq!(send(sender.clone()).await, len.to_string());
        let before = writes.load(Ordering::Relaxed);
        let answers = futures_util::future::join_all((0..n).map(|_| send(sender.clone()))).await;
        for answer in answers {
            assert_eq!(answer, len.to_string(), "every body arrives whole");
        }
        writes.load(Ordering::Relaxed) - before
    }

    /// Thirty-two notifications of a kilobyte sent together on one connection go out in a
    /// few writes as small frames; as one frame each, h2 writes them one by one (the
    /// behaviour this module works around: should a release of h2 coalesce those too, this
    /// test says so and the module can go).
    #[tokio::test(flavor = "current_thread")]
    async fn requests_waiting_together_share_writes() {
        let small = writes_for(32, 1000, SmallFrames::new).await;
        let whole = writes_for(32, 1000, http_body_util::Full::new).await;
        assert!(
            small <= 4,
            "32 requests in small frames took {small} writes"
        );
        assert!(
            whole >= 32,
            "32 requests in one frame each took {whole} writes"
        );
    }

    proptest! {
        /// Every frame is at most FRAME_BYTES, only the last is shorter, and together
        /// they are the body, in order, of the size the hint announced.
        #[test]
        fn frames_are_small_and_make_up_the_body(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let hint = SmallFrames::new(Bytes::from(bytes.clone())).size_hint().exact();
            prop_assert_eq!(hint, Some(bytes.len() as u64));
            let frames = frames_of(bytes.clone());
            prop_assert_eq!(frames.len(), bytes.len().div_ceil(FRAME_BYTES));
            for (i, f) in frames.iter().enumerate() {
                prop_assert!(!f.is_empty());
                prop_assert!(f.len() <= FRAME_BYTES);
                if i + 1 < frames.len() {
                    prop_assert_eq!(f.len(), FRAME_BYTES);
                }
            }
            prop_assert_eq!(frames.concat(), bytes);
        }
    }
}
