//! `sealrelay smoke <url>`: one well-formed envelope with a synthetic device token, to check
//! a deployed relay end to end. Against a relay with real APNs credentials the healthy
//! answer is 410: Apple authenticated the relay and rejected the unknown token.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::envelope::hex;

/// A synthetic device token: valid hex, never a real device.
pub const SMOKE_DEVICE: &str = "5ea1e1a7000000000000000000000000000000000000000000000000000000aa";

/// The envelope the smoke test posts: a fresh collapse id each time, so it is never
/// coalesced.
pub fn envelope() -> serde_json::Value {
    let mut id = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id);
    serde_json::json!({
        "v": 1,
        "device": SMOKE_DEVICE,
        "suite": "x25519",
        // 72 base64 characters: a sealed box's overhead plus a small payload.
        "ciphertext": "c2VhbHJlbGF5IHNtb2tlIHRlc3Q6IG5vdCBhIHJlYWwgY2lwaGVydGV4dCwgbmV2ZXIgZGVj",
        "collapseId": hex(&id),
        "priority": "passive",
        "event": false,
    })
}

/// Posts the smoke envelope to `url` and returns the status and body.
pub async fn run(url: &str) -> anyhow::Result<(u16, String)> {
    let tls = crate::apns::client::tls_config(None)?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let body = serde_json::to_vec(&envelope())?;
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))?;
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
