//! `sealrelay push`: signs one push with a signer's key, sends it to `/v2/pushes`, prints
//! the receipt, and with `--wait` follows its events (a line per target as it settles)
//! until the push is settled, resuming the stream where it broke off.
//!
//! Exit status: 0 when the relay took the push (and, waiting, every target ended
//! delivered, coalesced, suppressed or dry_run); 2 when a target ended rejected, failed,
//! expired or rate limited; 1 when the relay refused the push or could not be reached.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::{json, Map, Value};

use super::endpoint::{error_text, Endpoint};
use crate::signed::sig::{self, PrivateKey};

/// What to push.
#[derive(Debug, Clone)]
pub struct Args {
    /// The relay's public base URL.
    pub url: String,
    /// The signer's private key file.
    pub key: PathBuf,
    /// `ed25519:<name>`.
    pub key_id: String,
    /// The APNs topic; the relay's `APNS_TOPIC` when `None`.
    pub topic: Option<String>,
    /// `(device token, ciphertext)` per target.
    pub targets: Vec<(String, String)>,
    /// The ciphertexts' suite, when named.
    pub suite: Option<String>,
    /// 32 lowercase hex; random when `None`.
    pub collapse_id: Option<String>,
    /// 32 lowercase hex, when the alert flaps.
    pub flap_id: Option<String>,
    /// `time-sensitive` or `passive`.
    pub priority: String,
    /// Whether this is an event (not a state change).
    pub event: bool,
    /// The request id; a random UUID when `None` (give the same one to retry safely).
    pub request_id: Option<String>,
    /// Follow the events until settled.
    pub wait: bool,
    /// Stop waiting after this long.
    pub wait_timeout: Duration,
}

/// How a push ended, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Taken, and every target fine (or not waited for).
    Ok,
    /// Some target ended undelivered.
    Undelivered,
    /// Refused, or the relay could not be reached.
    Refused,
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    crate::device::hex(&b)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The signed request object.
pub fn request(args: &Args, key: &PrivateKey, issued_at_ms: u64) -> Map<String, Value> {
    let targets: Vec<Value> = args
        .targets
        .iter()
        .map(|(device, ciphertext)| {
            let mut t = json!({"device": device, "ciphertext": ciphertext});
            if let Some(s) = &args.suite {
                t["suite"] = Value::from(s.as_str());
            }
            t
        })
        .collect();
    let mut m = Map::new();
    m.insert("schemaVersion".into(), "2".into());
    m.insert(
        "requestId".into(),
        args.request_id
            .clone()
            .unwrap_or_else(crate::device::uuid4)
            .into(),
    );
    if let Some(t) = &args.topic {
        m.insert("topic".into(), t.as_str().into());
    }
    m.insert("targets".into(), targets.into());
    m.insert(
        "collapseId".into(),
        args.collapse_id
            .clone()
            .unwrap_or_else(|| random_hex(16))
            .into(),
    );
    if let Some(f) = &args.flap_id {
        m.insert("flapId".into(), f.as_str().into());
    }
    m.insert("priority".into(), args.priority.as_str().into());
    m.insert("event".into(), args.event.into());
    m.insert("issuedAtMs".into(), issued_at_ms.into());
    m.insert("signerKeyId".into(), args.key_id.as_str().into());
    sig::sign_request(key, &mut m);
    m
}

fn undelivered(state: &str) -> bool {
    matches!(state, "rejected" | "failed" | "expired" | "rate_limited")
}

/// Signs, sends, prints; follows the events with `--wait`.
pub async fn run(args: &Args, out: &mut (dyn Write + Send)) -> anyhow::Result<Ended> {
    let key = super::keygen::load(&args.key)?;
    let body = request(args, &key, now_ms());
    let push_id = body["requestId"].as_str().unwrap_or_default().to_owned();
    let endpoint = Endpoint::Url(args.url.clone());
    let (status, text) = endpoint
        .call(
            hyper::Method::POST,
            "/v2/pushes",
            &[("content-type", "application/json".to_owned())],
            serde_json::to_vec(&Value::Object(body))?,
        )
        .await?;
    if status != 200 && status != 201 {
        writeln!(out, "{status} {}", error_text(&text))?;
        return Ok(Ended::Refused);
    }
    let receipt: Value = serde_json::from_str(&text).unwrap_or_default();
    writeln!(out, "{}", serde_json::to_string_pretty(&receipt)?)?;
    let mut states: std::collections::BTreeMap<String, String> = receipt["targets"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v["state"].as_str().unwrap_or("").to_owned()))
        .collect();
    if args.wait && receipt["state"] == "pending" {
        let last = receipt["events"]
            .as_array()
            .and_then(|e| e.last())
            .and_then(|e| e["sequence"].as_u64())
            .unwrap_or(0);
        follow(
            &endpoint,
            &key,
            &args.key_id,
            &push_id,
            last,
            args.wait_timeout,
            &mut states,
            out,
        )
        .await?;
    }
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for s in states.values() {
        *counts.entry(s.as_str()).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    writeln!(out, "push {push_id}: {}", summary.join(", "))?;
    Ok(if states.values().any(|s| undelivered(s)) {
        Ended::Undelivered
    } else {
        Ended::Ok
    })
}

/// Follows `/v2/pushes/<id>/events` after `last` until `settled`, printing each target's
/// change; a broken stream is resumed with `after=`.
#[allow(clippy::too_many_arguments)]
async fn follow(
    endpoint: &Endpoint,
    key: &PrivateKey,
    key_id: &str,
    push_id: &str,
    mut last: u64,
    timeout: Duration,
    states: &mut std::collections::BTreeMap<String, String>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "gave up waiting after {} s; the push is still pending",
            timeout.as_secs()
        );
        let path = format!("/v2/pushes/{push_id}/events?after={last}");
        let auth = sig::read_authorization(key, key_id, "GET", &path, now_ms());
        let resp = endpoint
            .send(
                hyper::Method::GET,
                &path,
                &[("authorization", auth)],
                Vec::new(),
            )
            .await?;
        if resp.status() != 200 {
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            anyhow::bail!(
                "the event stream answered {status} {}",
                error_text(&String::from_utf8_lossy(&body))
            );
        }
        let mut body = resp.into_body();
        let mut buf = String::new();
        let mut event = (None::<u64>, String::new());
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = match tokio::time::timeout(left, body.frame()).await {
                Err(_) => anyhow::bail!(
                    "gave up waiting after {} s; the push is still pending",
                    timeout.as_secs()
                ),
                Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.push_str(&String::from_utf8_lossy(&data));
            while let Some(i) = buf.find('\n') {
                let line = buf[..i].trim_end_matches('\r').to_owned();
                buf.drain(..=i);
                if let Some(id) = line.strip_prefix("id: ") {
                    event.0 = id.trim().parse().ok();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    event.1 = data.to_owned();
                } else if line.is_empty() && !event.1.is_empty() {
                    let e: Value = serde_json::from_str(&event.1).unwrap_or_default();
                    if let Some(seq) = event.0.take() {
                        last = last.max(seq);
                    }
                    event.1.clear();
                    match e["event"].as_str() {
                        Some("target") => {
                            let (t, s) = (
                                e["target"].as_str().unwrap_or(""),
                                e["state"].as_str().unwrap_or(""),
                            );
                            writeln!(out, "{t}  {s}")?;
                            states.insert(t.to_owned(), s.to_owned());
                        }
                        Some("settled") => return Ok(()),
                        _ => {}
                    }
                }
            }
        }
        // The stream broke before `settled`: resume after the last event seen.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_have_the_contracts_shape() {
        for _ in 0..100 {
            let u = crate::device::uuid4();
            assert!(crate::signed::request::is_request_id(&u), "{u}");
            assert_eq!(&u[14..15], "4");
        }
        assert_ne!(crate::device::uuid4(), crate::device::uuid4());
    }

    #[test]
    fn the_request_it_signs_parses_and_verifies() {
        let key = PrivateKey::generate().unwrap();
        let args = Args {
            url: "http://127.0.0.1:1".into(),
            key: PathBuf::new(),
            key_id: "ed25519:ops".into(),
            topic: Some("com.example.app".into()),
            targets: vec![("ab".repeat(32), "A".repeat(72))],
            suite: Some("x25519".into()),
            collapse_id: None,
            flap_id: None,
            priority: "passive".into(),
            event: false,
            request_id: None,
            wait: false,
            wait_timeout: Duration::from_secs(1),
        };
        let m = request(&args, &key, 1_767_225_600_000);
        let body = serde_json::to_vec(&Value::Object(m)).unwrap();
        let push = crate::signed::request::SignedPush::parse(&body, 4096).unwrap();
        sig::verify_push(&key.public_key(), &push).unwrap();
        assert_eq!(push.targets().len(), 1);
        assert_eq!(push.topic(), Some("com.example.app"));
    }
}
