//! The binary as a client of a relay: `sealrelay smoke`.

pub mod smoke;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// One HTTP(S) request from the command line: the status and the body (at most 64 KiB).
pub(crate) async fn request(
    method: hyper::Method,
    url: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
    let tls = crate::push::tls::client_config(None, "--url")?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let mut req = hyper::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let req = req.body(Full::new(Bytes::from(body)))?;
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {url} within 30 s"))??;
    let status = resp.status().as_u16();
    let bytes = Limited::new(resp.into_body(), 64 * 1024)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
