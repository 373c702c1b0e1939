//! `sealrelay push`: signs one push with a signer's key, sends it to `/v2/pushes`, prints
//! the receipt, and with `--wait` follows its events (a line per target as it settles)
//! until the push is settled, resuming the stream where it broke off.
//!
//! Retrying is safe: the signed bytes of a named request (`--request-id`) are kept beside
//! the key (or in `--save FILE`) before they are sent, so running the command again resends
//! the very same bytes and the relay answers the replay (200, nothing sent twice). Within a
//! run, a 503, a timeout or a lost connection sends the same bytes again with backoff (the
//! answer that did not arrive may be a push that was taken). A `request_id_conflict` for
//! the request's own id, or a kept request past the freshness window, reads the receipt the
//! id already has; a kept request the relay never took is signed afresh.
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
    /// Where the signed request is kept; beside the key when `None` and the id is named.
    pub save: Option<PathBuf>,
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
    crate::clock::Clock::System.now_ms().max(0) as u64
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

/// How many times one request is sent when its answer does not arrive or is a 503.
const ATTEMPTS: u32 = 5;
/// The pause before the second attempt; doubled for each one after, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_secs(8);

/// Where the signed request is kept: `--save`, or for a named request id
/// `<key file>.requests/<id>.json`; `None` for a random id without `--save`.
pub fn saved_path(args: &Args) -> anyhow::Result<Option<PathBuf>> {
    if let Some(p) = &args.save {
        return Ok(Some(p.clone()));
    }
    let Some(id) = args.request_id.as_deref() else {
        return Ok(None);
    };
    anyhow::ensure!(
        crate::signed::request::is_request_id(id),
        "--request-id must be a lowercase UUID"
    );
    let mut dir = args.key.clone().into_os_string();
    dir.push(".requests");
    Ok(Some(PathBuf::from(dir).join(format!("{id}.json"))))
}

/// Writes `bytes` to `path` whole (a temporary file renamed over it), readable by the owner
/// alone: it holds device tokens and ciphertexts.
fn keep(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp", random_hex(8)));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// A request ready to send: its exact bytes, its id, and whether they were kept from an
/// earlier run.
struct Prepared {
    bytes: Vec<u8>,
    push_id: String,
    resent: bool,
}

/// The kept request at `path` when there is one (and it is for the named id), else a newly
/// signed one, kept at `path` before it is sent.
fn prepare(
    args: &Args,
    key: &PrivateKey,
    path: Option<&std::path::Path>,
) -> anyhow::Result<Prepared> {
    if let Some(p) = path.filter(|p| p.exists()) {
        let bytes =
            std::fs::read(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let Some(id) = v["requestId"].as_str() else {
            anyhow::bail!("{} is not a kept push request", p.display());
        };
        if let Some(want) = &args.request_id {
            anyhow::ensure!(id == want, "{} holds request {id}, not {want}", p.display());
        }
        return Ok(Prepared {
            push_id: id.to_owned(),
            bytes,
            resent: true,
        });
    }
    let body = request(args, key, now_ms());
    let push_id = body["requestId"].as_str().unwrap_or_default().to_owned();
    let bytes = serde_json::to_vec(&Value::Object(body))?;
    if let Some(p) = path {
        keep(p, &bytes)?;
    }
    Ok(Prepared {
        bytes,
        push_id,
        resent: false,
    })
}

/// Sends `bytes` to `/v2/pushes`, again (the same bytes) after a 503, a timeout or a lost
/// connection, up to [`ATTEMPTS`] times with a doubling pause.
async fn send(endpoint: &Endpoint, bytes: &[u8]) -> anyhow::Result<(u16, String)> {
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        let headers = [("content-type", "application/json".to_owned())];
        let r = endpoint
            .call(hyper::Method::POST, "/v2/pushes", &headers, bytes.to_vec())
            .await;
        let why = match &r {
            Err(e) => format!("{e:#}"),
            Ok((503, text)) => format!("503 {}", error_text(text)),
            Ok(_) => return r,
        };
        if attempt == ATTEMPTS {
            return r;
        }
        eprintln!(
            "push: {why}; sending the same request again in {} ms",
            pause.as_millis()
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
        attempt += 1;
    }
}

/// The receipt push `push_id` has, read with the signer's key: `None` when the relay has
/// none it lets this signer read.
async fn read_receipt(
    endpoint: &Endpoint,
    key: &PrivateKey,
    key_id: &str,
    push_id: &str,
) -> anyhow::Result<Option<String>> {
    let path = format!("/v2/pushes/{push_id}");
    let auth = sig::read_authorization(key, key_id, "GET", &path, now_ms());
    let (status, text) = endpoint
        .call(
            hyper::Method::GET,
            &path,
            &[("authorization", auth)],
            Vec::new(),
        )
        .await?;
    Ok((status == 200).then_some(text))
}

/// The error code of an error envelope.
fn error_code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_default();
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

fn undelivered(state: &str) -> bool {
    matches!(state, "rejected" | "failed" | "expired" | "rate_limited")
}

/// Signs, sends, prints; follows the events with `--wait`.
pub async fn run(args: &Args, out: &mut (dyn Write + Send)) -> anyhow::Result<Ended> {
    let key = super::keygen::load(&args.key)?;
    let path = saved_path(args)?;
    let endpoint = Endpoint::Url(args.url.clone());
    let mut prepared = prepare(args, &key, path.as_deref())?;
    if let (true, Some(p)) = (prepared.resent, &path) {
        eprintln!(
            "push: resending request {} as kept in {} (the arguments of this run are not used)",
            prepared.push_id,
            p.display()
        );
    }
    let text = loop {
        let (status, text) = send(&endpoint, &prepared.bytes).await?;
        if status == 200 || status == 201 {
            break text;
        }
        let code = error_code(&text);
        let used = status == 409 && code == "request_id_conflict";
        let stale = status == 422 && code == "stale_request" && prepared.resent;
        if used || stale {
            let push_id = &prepared.push_id;
            if let Some(receipt) = read_receipt(&endpoint, &key, &args.key_id, push_id).await? {
                eprintln!("push: request {push_id} was taken before; its receipt as it stands:");
                break receipt;
            }
            if stale {
                // The kept request never reached the relay: nothing was pushed under its
                // id, so a newly signed one with the same id is the same push.
                if let Some(p) = &path {
                    std::fs::remove_file(p)
                        .map_err(|e| anyhow::anyhow!("cannot replace {}: {e}", p.display()))?;
                }
                let again = Args {
                    request_id: Some(push_id.clone()),
                    ..args.clone()
                };
                prepared = prepare(&again, &key, path.as_deref())?;
                continue;
            }
        }
        writeln!(out, "{status} {}", error_text(&text))?;
        return Ok(Ended::Refused);
    };
    let push_id = prepared.push_id;
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

    /// A push of no target to a closed port, by `ed25519:ops`.
    fn args() -> Args {
        Args {
            url: "http://127.0.0.1:1".into(),
            key: PathBuf::new(),
            key_id: "ed25519:ops".into(),
            topic: None,
            targets: Vec::new(),
            suite: None,
            collapse_id: None,
            flap_id: None,
            priority: "passive".into(),
            event: false,
            request_id: None,
            save: None,
            wait: false,
            wait_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_request_it_signs_parses_and_verifies() {
        let key = PrivateKey::generate().unwrap();
        let args = Args {
            topic: Some("com.example.app".into()),
            targets: vec![("ab".repeat(32), "A".repeat(72))],
            suite: Some("x25519".into()),
            ..args()
        };
        let m = request(&args, &key, 1_767_225_600_000);
        let body = serde_json::to_vec(&Value::Object(m)).unwrap();
        let push = crate::signed::request::SignedPush::parse(&body, 4096).unwrap();
        sig::verify_push(&key.public_key(), &push).unwrap();
        assert_eq!(push.targets().len(), 1);
        assert_eq!(push.topic(), Some("com.example.app"));
    }

    #[test]
    fn a_named_request_is_kept_beside_the_key_and_a_bad_id_goes_nowhere() {
        let mut args = Args {
            key: PathBuf::from("/keys/ops.pem"),
            ..args()
        };
        assert_eq!(saved_path(&args).unwrap(), None, "a random id is not kept");
        let id = "0b5b2b4e-8a0c-4d7e-9f11-3c2d1e0f9a87";
        args.request_id = Some(id.into());
        assert_eq!(
            saved_path(&args).unwrap(),
            Some(PathBuf::from(format!("/keys/ops.pem.requests/{id}.json")))
        );
        for bad in [
            "../../etc/passwd",
            "0B5B2B4E-8A0C-4D7E-9F11-3C2D1E0F9A87",
            "",
        ] {
            args.request_id = Some(bad.into());
            let e = saved_path(&args).unwrap_err().to_string();
            assert!(e.contains("--request-id"), "{bad}: {e}");
        }
        args.save = Some(PathBuf::from("/tmp/x.json"));
        assert_eq!(
            saved_path(&args).unwrap(),
            Some(PathBuf::from("/tmp/x.json"))
        );
    }
}
