//! An OTLP/HTTP (protobuf) trace receiver on 127.0.0.1, plain or over TLS (with a
//! [`crate::pki::Pki`] certificate), recording the spans and the request headers it gets,
//! and able to answer 503 to exercise an exporter's failure path.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

#[derive(Default)]
struct Shared {
    spans: Mutex<Vec<Span>>,
    headers: Mutex<Vec<Vec<(String, String)>>>,
    failing: AtomicBool,
    requests: AtomicUsize,
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    tls: bool,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Starts a receiver; with `tls`, it serves HTTPS with that certificate.
    pub async fn start(tls: Option<&crate::pki::Pki>) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let acceptor = match tls {
            Some(p) => {
                use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
                let certs: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_slice_iter(p.cert_pem.as_bytes())
                        .collect::<Result<_, _>>()?;
                let key = PrivateKeyDer::from_pem_slice(p.key_pem.as_bytes())?;
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()?
                    .with_no_client_auth()
                    .with_single_cert(certs, key)?;
                cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
            }
            None => None,
        };
        let shared: Arc<Shared> = Arc::default();
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&s, req).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                let _ = http
                                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                                    .await;
                            }
                        }
                        None => {
                            let _ = http
                                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                                .await;
                        }
                    }
                });
            }
        });
        Ok(Self {
            addr,
            tls: tls.is_some(),
            shared,
        })
    }

    /// The base URL (`http://` or `https://127.0.0.1:port`).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.addr.port())
    }

    /// Spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.shared.spans.lock().unwrap().clone()
    }

    /// The headers of every export request so far (lowercase names).
    pub fn headers(&self) -> Vec<Vec<(String, String)>> {
        self.shared.headers.lock().unwrap().clone()
    }

    /// Export requests received so far (answered or failed).
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// From now on, answer every export 503 (true) or accept it (false).
    pub fn set_failing(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }
}

async fn handle(
    s: &Shared,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_owned();
    s.headers.lock().unwrap().push(
        req.headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
    );
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if s.failing.load(Ordering::SeqCst) {
        return hyper::Response::builder()
            .status(503)
            .body(Full::new(Bytes::new()))
            .unwrap();
    }
    if path == "/v1/traces" {
        if let Ok(export) = ExportTraceServiceRequest::decode(body) {
            let mut spans = s.spans.lock().unwrap();
            for rs in export.resource_spans {
                for ss in rs.scope_spans {
                    spans.extend(ss.spans);
                }
            }
        }
    }
    hyper::Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::new()))
        .unwrap()
}
