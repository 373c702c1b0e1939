//! Fuzzes the envelope parser with arbitrary bytes: it must never panic, whatever it accepts
//! must satisfy the contract (lowercase hex device, padded base64 within the cap, 32-hex
//! collapse id), and it must agree with serde_json's own reading of the body: refused as
//! "body is not valid JSON" exactly when `serde_json::Value` cannot read the body, "body must
//! be a JSON object" exactly when it reads something else, and when accepted, every field
//! equal to the value's (the last one for a repeated key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealrelay::testing::DEFAULT_MAX_CIPHERTEXT_CHARS;
use sealrelay::v1::envelope::parse;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data, DEFAULT_MAX_CIPHERTEXT_CHARS);
    let read: Result<Value, _> = serde_json::from_slice(data);
    let value: Option<serde_json::Map<String, Value>> = match &read {
        Ok(Value::Object(m)) => Some(m.clone()),
        _ => None,
    };
    match (&parsed, &value) {
        (Err(e), None) if read.is_err() => assert_eq!(e.message(), "body is not valid JSON"),
        (Err(e), None) => assert_eq!(e.message(), "body must be a JSON object"),
        (Err(e), Some(_)) => assert!(
            e.message() != "body is not valid JSON" && e.message() != "body must be a JSON object"
        ),
        (Ok(_), None) => panic!("accepted a body serde_json cannot read as an object"),
        (Ok(e), Some(m)) => {
            let d = e.device.expose();
            assert!((16..=512).contains(&d.len()));
            assert!(d.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            assert_eq!(Some(d.to_string()), m["device"].as_str().map(str::to_ascii_lowercase));
            assert_eq!(m["v"].as_f64(), Some(1.0));
            assert!(e.ciphertext.len() <= DEFAULT_MAX_CIPHERTEXT_CHARS);
            assert_eq!(e.ciphertext.len() % 4, 0);
            assert_eq!(Some(e.ciphertext.as_str()), m["ciphertext"].as_str());
            assert_eq!(Some(e.collapse_id.as_str()), m["collapseId"].as_str());
            assert_eq!(e.collapse_id.as_str().len(), 32);
            assert_eq!(Some(e.priority.as_str()), m["priority"].as_str());
            assert_eq!(Some(e.event), m["event"].as_bool());
            match m.get("suite") {
                None => assert_eq!(e.suite, "x25519"),
                Some(s) => assert_eq!(Some(e.suite.as_str()), s.as_str()),
            }
            match m.get("flapId") {
                None | Some(Value::Null) => assert!(e.flap_id.is_none()),
                Some(f) => assert_eq!(e.flap_id.as_ref().map(|f| f.as_str()), f.as_str()),
            }
            let _ = sealrelay::testing::alert_body(e, "t", "b");
        }
    }
});
