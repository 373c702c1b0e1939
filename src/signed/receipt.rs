//! A receipt as the API shows it (SIGNED.md, "Processing and receipts"), from the store's
//! record: targets by hash, every event with its sequence, the push `pending` while any
//! target is `accepted` or `queued`, else `settled`; and what a target's delivery outcome
//! records in it ([`state_of`]).

pub mod lifecycle;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::delivery::Outcome;
use crate::push::{Verdict, VerdictClass};
use lifecycle::{Event, Receipt, State};

/// Why a target failed, as its receipt shows it: `{"apnsStatus":s,"reason":r}`, from
/// bounded values only (the service's documented reason names or `other`, or the relay's
/// own reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The service's HTTP status, when the failure was the service's answer and the
    /// receipt shows it.
    #[serde(rename = "apnsStatus", skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The bounded reason.
    pub reason: &'static str,
}

impl Failure {
    /// A failure of the relay's own (no service answer).
    pub fn relay(reason: &'static str) -> Self {
        Self {
            status: None,
            reason,
        }
    }
}

/// The extra members of a target in its receipt.
#[derive(Debug, Default, Serialize)]
struct Detail {
    #[serde(rename = "retryAfterS", skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<Failure>,
}

impl Detail {
    /// The members as the store keeps them: the object's JSON without its braces (empty
    /// when there are none).
    fn members(&self) -> String {
        let object = serde_json::to_string(self).unwrap_or_default();
        object
            .strip_prefix('{')
            .and_then(|m| m.strip_suffix('}'))
            .unwrap_or_default()
            .to_owned()
    }
}

/// The stored detail of a target that failed for `failure`.
pub fn failure_detail(failure: Failure) -> String {
    Detail {
        failure: Some(failure),
        ..Detail::default()
    }
    .members()
}

/// How a service's verdict fails a target.
fn failed(v: Verdict) -> (State, Failure) {
    let reason = v.reason.label();
    match v.class {
        VerdictClass::TokenDead => (
            State::Rejected,
            Failure {
                status: None,
                reason,
            },
        ),
        // The status the reference shows for a refused credential is 403, whatever the
        // status of the answer was.
        VerdictClass::Misconfigured => (
            State::Failed,
            Failure {
                status: Some(403),
                reason,
            },
        ),
        VerdictClass::Retryable if v.status == 0 => {
            (State::Failed, Failure::relay("apns_unreachable"))
        }
        _ => (
            State::Failed,
            Failure {
                status: Some(v.status),
                reason,
            },
        ),
    }
}

/// What a signed push's receipt records for a target whose first outcome this is: its
/// state and the extra JSON members (`retryAfterS`, `failure`).
pub fn state_of(outcome: &Outcome) -> (State, String) {
    let (state, detail) = match *outcome {
        Outcome::Forwarded => (State::Delivered, Detail::default()),
        Outcome::DryRun => (State::DryRun, Detail::default()),
        Outcome::Coalesced => (State::Coalesced, Detail::default()),
        Outcome::Suppressed => (State::Suppressed, Detail::default()),
        Outcome::Queued => (State::Queued, Detail::default()),
        Outcome::RateLimited { retry_after_s } => (
            State::RateLimited,
            Detail {
                retry_after_s: Some(retry_after_s),
                ..Detail::default()
            },
        ),
        Outcome::Remembered(reason) => (
            State::Rejected,
            failure(Failure::relay(crate::push::apns::reason::spelling(reason))),
        ),
        Outcome::Failed(v) => {
            let (state, f) = failed(v);
            (state, failure(f))
        }
        Outcome::NotConfigured => (State::Failed, failure(Failure::relay("not_configured"))),
        Outcome::StoreUnavailable => (State::Failed, failure(Failure::relay("store_unavailable"))),
    };
    (state, detail.members())
}

fn failure(f: Failure) -> Detail {
    Detail {
        failure: Some(f),
        ..Detail::default()
    }
}

/// One event's JSON: `{"sequence":n,"event":...,"timestampMs":...,"target":...,"state":...}`.
pub fn event(e: &Event) -> Value {
    let mut v = json!({
        "sequence": e.sequence,
        "event": e.kind.as_str(),
        "timestampMs": e.at_ms,
    });
    if let Some((t, s)) = &e.target {
        v["target"] = Value::from(t.as_str());
        v["state"] = Value::from(s.as_str());
    }
    v
}

/// The receipt's JSON.
pub fn render(r: &Receipt) -> Value {
    let mut targets = Map::new();
    for t in &r.targets {
        let mut o = json!({"state": t.state.as_str(), "updatedAtMs": t.updated_ms});
        if !t.detail.is_empty() {
            // The detail is JSON members the relay wrote from bounded values.
            if let Ok(Value::Object(extra)) = serde_json::from_str(&format!("{{{}}}", t.detail)) {
                if let Value::Object(m) = &mut o {
                    m.extend(extra);
                }
            }
        }
        targets.insert(t.key.clone(), o);
    }
    json!({
        "schemaVersion": "2",
        "pushId": r.push_id,
        "canonicalHash": r.hash,
        "signerKeyId": key_id_of(&r.signer),
        "topic": r.topic,
        "state": if r.settled { "settled" } else { "pending" },
        "createdAtMs": r.created_ms,
        "updatedAtMs": r.updated_ms,
        "targets": targets,
        "events": r.events.iter().map(event).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::lifecycle::{fresh, update, Update};
    use super::*;
    use crate::push::Reason;

    fn apns(status: u16, reason: &str) -> Outcome {
        Outcome::of(crate::push::apns::reason::classify(
            status,
            Some(crate::push::apns::reason::tests::parse(reason)),
        ))
    }

    #[test]
    fn receipt_states_carry_only_bounded_details() {
        assert_eq!(state_of(&Outcome::Forwarded).0, State::Delivered);
        assert_eq!(state_of(&Outcome::DryRun).0, State::DryRun);
        assert_eq!(
            state_of(&Outcome::RateLimited { retry_after_s: 7 }),
            (State::RateLimited, r#""retryAfterS":7"#.to_owned())
        );
        let (s, d) = state_of(&apns(500, "<script>x"));
        assert_eq!(s, State::Failed);
        assert_eq!(d, r#""failure":{"apnsStatus":500,"reason":"other"}"#);
        let (s, d) = state_of(&apns(410, "Unregistered"));
        assert_eq!(
            (s, d.as_str()),
            (State::Rejected, r#""failure":{"reason":"Unregistered"}"#)
        );
        assert_eq!(
            state_of(&Outcome::NotConfigured).1,
            r#""failure":{"reason":"not_configured"}"#
        );
        assert_eq!(
            state_of(&apns(400, "BadTopic")).1,
            r#""failure":{"apnsStatus":403,"reason":"BadTopic"}"#
        );
        assert_eq!(
            state_of(&apns(429, "TooManyRequests")).1,
            r#""failure":{"apnsStatus":429,"reason":"TooManyRequests"}"#
        );
        assert_eq!(
            state_of(&Outcome::Remembered(crate::policy::DeadReason::Expired)),
            (
                State::Rejected,
                r#""failure":{"reason":"ExpiredToken"}"#.to_owned()
            )
        );
        assert_eq!(
            state_of(&Outcome::Failed(crate::push::Verdict {
                class: VerdictClass::TokenDead,
                status: 410,
                reason: Reason::NONE,
            }))
            .1,
            r#""failure":{"reason":"none"}"#
        );
        // Every detail is valid JSON inside an object.
        for o in [
            Outcome::Failed(crate::push::Verdict::UNREACHABLE),
            Outcome::StoreUnavailable,
            Outcome::Queued,
        ] {
            let (_, d) = state_of(&o);
            let obj = format!(
                "{{\"state\":\"x\"{}{d}}}",
                if d.is_empty() { "" } else { "," }
            );
            serde_json::from_str::<serde_json::Value>(&obj).unwrap();
        }
        assert_eq!(
            state_of(&Outcome::Failed(crate::push::Verdict::UNREACHABLE)).1,
            r#""failure":{"reason":"apns_unreachable"}"#
        );
    }

    #[test]
    fn renders_the_contracts_shape() {
        let mut r = fresh(
            "2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c",
            "sha256:ab",
            "ed25519:ops",
            "com.example",
            &["0123456789abcdef".to_owned(), "fedcba9876543210".to_owned()],
            100,
        );
        update(
            &mut r,
            &[
                Update {
                    target: "0123456789abcdef".into(),
                    state: State::Delivered,
                    detail: String::new(),
                },
                Update {
                    target: "fedcba9876543210".into(),
                    state: State::RateLimited,
                    detail: r#""retryAfterS":3"#.into(),
                },
            ],
            150,
        );
        let v = render(&r);
        assert_eq!(v["schemaVersion"], "2");
        assert_eq!(v["state"], "settled");
        assert_eq!(v["targets"]["0123456789abcdef"]["state"], "delivered");
        assert_eq!(v["targets"]["fedcba9876543210"]["retryAfterS"], 3);
        assert_eq!(
            v["events"][0],
            json!({"sequence":1,"event":"accepted","timestampMs":100})
        );
        assert_eq!(v["events"][3]["event"], "settled");
        assert_eq!(v["events"][1]["target"], "0123456789abcdef");
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec![
                "schemaVersion",
                "pushId",
                "canonicalHash",
                "signerKeyId",
                "topic",
                "state",
                "createdAtMs",
                "updatedAtMs",
                "targets",
                "events"
            ]
        );
    }
}

/// The signer as a receipt records it: the key id and, after `#`, the first 16 hex of the
/// SHA-256 of the public key the push was verified under (key ids never hold `#`). A key id
/// enrolled again with another key is another signer to the receipts made before.
pub(crate) fn recorded_signer(key_id: &str, key: &super::sig::PublicKey) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    format!("{key_id}#{}", &crate::device::hex(d.as_ref())[..16])
}

/// The key id of a recorded signer.
pub(crate) fn key_id_of(recorded: &str) -> &str {
    recorded.split_once('#').map_or(recorded, |(id, _)| id)
}

/// Whether the receipt's recorded signer is `by`. A receipt written before keys were
/// recorded holds the key id alone, and is matched by key id.
pub(crate) fn same_signer(recorded: &str, by: &str) -> bool {
    recorded == by || (!recorded.contains('#') && recorded == key_id_of(by))
}

#[cfg(test)]
mod signer_tests {
    use super::*;

    #[test]
    fn a_signer_is_its_key_id_and_its_key() {
        use super::super::sig::PrivateKey;
        let k1 = PrivateKey::generate().unwrap().public_key();
        let k2 = PrivateKey::generate().unwrap().public_key();
        let a = recorded_signer("ed25519:ops", &k1);
        let b = recorded_signer("ed25519:ops", &k2);
        assert_ne!(a, b);
        assert_eq!(key_id_of(&a), "ed25519:ops");
        assert!(same_signer(&a, &a));
        assert!(!same_signer(&a, &b), "the same id under another key");
        assert!(!same_signer(&recorded_signer("ed25519:dev", &k1), &a));
        assert!(
            same_signer("ed25519:ops", &b),
            "a receipt from before keys were recorded"
        );
        assert!(!same_signer("ed25519:dev", &b));
    }
}
