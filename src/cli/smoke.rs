//! `sealrelay smoke <url>`: one well-formed envelope for a synthetic device, to check a
//! deployed relay end to end (also the chart's `helm test` hook).
//!
//! Every run uses a fresh random device token and collapse id, so no run is coalesced, rate
//! limited or answered from the dead-token memory: against real credentials every run
//! reaches Apple. The healthy answers are:
//! - `410 {"v":1,"error":"device token rejected by APNs","reason":"BadDeviceToken"}`: Apple
//!   authenticated the relay (key, key id, team id and topic are right) and rejected the
//!   made-up token;
//! - `202 {"v":1,"outcome":"forwarded"}`: a dry-run relay (`RELAY_DRY_RUN=true`).
//!
//! Anything else exits 1: `502 ... credentials rejected` means the key, key id, team id or
//! topic is wrong; `502 ... not configured` that the relay has no credentials; `202 queued`
//! that APNs could not be reached right now.

use serde_json::Value;

/// The envelope the smoke test posts: a random token and collapse id each time.
pub fn envelope() -> Value {
    let mut device = [0u8; 32];
    let mut id = [0u8; 16];
    let rng = ring::rand::SystemRandom::new();
    let _ = ring::rand::SecureRandom::fill(&rng, &mut device);
    let _ = ring::rand::SecureRandom::fill(&rng, &mut id);
    serde_json::json!({
        "v": 1,
        "device": crate::device::hex(&device),
        "suite": "x25519",
        // 72 base64 characters: a sealed box's overhead plus a small payload.
        "ciphertext": "c2VhbHJlbGF5IHNtb2tlIHRlc3Q6IG5vdCBhIHJlYWwgY2lwaGVydGV4dCwgbmV2ZXIgZGVj",
        "collapseId": crate::device::hex(&id),
        "priority": "passive",
        "event": false,
    })
}

/// Whether an answer is one of the healthy ones.
pub fn healthy(status: u16, body: &str) -> bool {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    match status {
        410 => v["reason"] == "BadDeviceToken",
        202 => v["outcome"] == "forwarded",
        _ => false,
    }
}

/// Posts the smoke envelope to `url` and returns the status and body.
pub async fn run(url: &str) -> anyhow::Result<(u16, String)> {
    let body = serde_json::to_vec(&envelope())?;
    super::endpoint::request(
        hyper::Method::POST,
        url,
        &[("content-type", "application/json".to_owned())],
        body,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_is_a_new_device_and_alert() {
        let (a, b) = (envelope(), envelope());
        assert_ne!(a["device"], b["device"]);
        assert_ne!(a["collapseId"], b["collapseId"]);
        let body = serde_json::to_vec(&a).unwrap();
        assert!(crate::v1::envelope::parse(&body, 3800).is_ok());
    }

    #[test]
    fn healthy_answers() {
        assert!(healthy(
            410,
            r#"{"v":1,"error":"device token rejected by APNs","reason":"BadDeviceToken"}"#
        ));
        assert!(healthy(202, r#"{"v":1,"outcome":"forwarded"}"#));
        assert!(!healthy(202, r#"{"v":1,"outcome":"queued"}"#));
        assert!(!healthy(
            410,
            r#"{"v":1,"error":"device token rejected by APNs","reason":"Unregistered"}"#
        ));
        assert!(!healthy(
            502,
            r#"{"v":1,"error":"relay APNs credentials rejected","reason":"InvalidProviderToken"}"#
        ));
        assert!(!healthy(200, "not json"));
    }
}
