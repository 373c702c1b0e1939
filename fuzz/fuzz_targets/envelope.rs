//! Fuzzes the envelope parser with arbitrary bytes: it must never panic, and whatever it
//! accepts must satisfy the contract (lowercase hex device, padded base64 within the cap,
//! 32-hex collapse id).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealrelay::envelope::{parse, DEFAULT_MAX_CIPHERTEXT_CHARS};

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = parse(data, DEFAULT_MAX_CIPHERTEXT_CHARS) {
        let d = e.device.expose();
        assert!((16..=512).contains(&d.len()));
        assert!(d.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(e.ciphertext.len() <= DEFAULT_MAX_CIPHERTEXT_CHARS);
        assert_eq!(e.ciphertext.len() % 4, 0);
        assert_eq!(e.collapse_id.as_str().len(), 32);
        let _ = sealrelay::apns::payload::build(&e, "t", "b");
    }
});
