//! Fuzzes the signed-push parser and the signed-read header parser with arbitrary bytes:
//! neither may panic, and whatever the push parser accepts has one canonical form: its
//! signed bytes, with the signature put back, parse again to the very same bytes and hash
//! (RFC 8785 is a fixed point), whatever member order or escapes the input used.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealrelay::testing::{ReadAuthorization, SignedPush, DEFAULT_MAX_CIPHERTEXT_CHARS};
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = SignedPush::parse(data, DEFAULT_MAX_CIPHERTEXT_CHARS) {
        let mut m: Map<String, Value> =
            serde_json::from_slice(p.signing_bytes()).expect("signed bytes are JSON");
        assert!(!m.contains_key("signature"));
        m.insert("signature".into(), Value::String(p.signature().to_owned()));
        let again = SignedPush::parse(&serde_json::to_vec(&m).unwrap(), DEFAULT_MAX_CIPHERTEXT_CHARS)
            .expect("the canonical form parses");
        assert_eq!(again.signing_bytes(), p.signing_bytes());
        assert_eq!(again.canonical_hash(), p.canonical_hash());
        assert_eq!(again.request_id(), p.request_id());
    }
    let _ = ReadAuthorization::parse(Some(data));
});
