//! A receipt as the API shows it (SIGNED.md, "Processing and receipts"), from the store's
//! record: targets by hash, every event with its sequence, the push `pending` while any
//! target is `accepted` or `queued`, else `settled`.

use serde_json::{json, Map, Value};

use crate::store::receipts::{Event, Receipt};

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
        "signerKeyId": r.signer,
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
    use super::*;
    use crate::store::receipts::{begin, update, Begun, State, Update};

    #[test]
    fn renders_the_contracts_shape() {
        let Begun::New(mut r) = begin(
            None,
            "2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c",
            "sha256:ab",
            "ed25519:ops",
            "com.example",
            &["0123456789abcdef".to_owned(), "fedcba9876543210".to_owned()],
            100,
        ) else {
            panic!()
        };
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
