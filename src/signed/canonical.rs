//! RFC 8785 (JSON Canonicalization Scheme) bytes and the canonical payload hash.
//!
//! The serialization itself is `serde_json_canonicalizer`: members sorted by the UTF-16
//! code units of their names, no whitespace, strings with only the escapes RFC 8785 keeps
//! (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` in lowercase hex for the other
//! controls; `/` and everything from U+007F up written as UTF-8), and numbers written as
//! ECMAScript's `Number.prototype.toString` writes the IEEE-754 double (ryu-js).
//!
//! What the canonicalizer is handed matters as much as how it writes: it must see the
//! double the sender meant. sealrelay parses requests with serde_json built with
//! `float_roundtrip` (correctly rounded decimal-to-double, which the canonicalizer's own
//! dependency turns on as well) and *without* `arbitrary_precision` (with it, numbers
//! would reach the canonicalizer as text and `1e400` would fail there instead of at the
//! parse). Integers that fit `u64`/`i64` are kept as integers by serde_json and converted
//! to the nearest double when written, exactly as ECMAScript reads them
//! (`9007199254740993` is written `9007199254740992`); `-0` is written `0`. The request
//! schema admits one number, `issuedAtMs`, an integer of at most 2^53, so signed payloads
//! never depend on these corners, but the functions here are exact for any JSON value.

use serde_json::Value;

/// Why a value has no canonical form: NaN and the infinities are not JSON numbers.
#[derive(Debug, thiserror::Error)]
#[error("no RFC 8785 form: {0}")]
pub struct CanonicalError(String);

/// The RFC 8785 canonical bytes of `value`.
///
/// A `serde_json::Value` always has a canonical form while serde_json is built without
/// `arbitrary_precision` (a `Number` then holds a `u64`, an `i64` or a finite `f64`); this
/// panics only if that feature is switched on somewhere in the build and a number out of
/// the double range reaches it. Code that handles untrusted values outside
/// [`super::request`] (which never canonicalizes a value that could fail) should call
/// [`try_canonical_bytes`].
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    try_canonical_bytes(value).expect("a serde_json::Value always has an RFC 8785 form")
}

/// The RFC 8785 canonical bytes of `value`, or why it has none.
pub fn try_canonical_bytes(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| CanonicalError(e.to_string()))
}

/// `sha256:` and the 64 lowercase hex digits of SHA-256 of `bytes`: how a canonical
/// payload hash is written in receipts and compared for a reused `requestId`.
pub fn payload_hash(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    out.push_str(&crate::device::hex(digest.as_ref()));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// An IEEE-754 double as RFC 8785 (ECMAScript) writes it; NaN and ±Infinity are errors.
    pub fn number_to_string(n: f64) -> Result<String, CanonicalError> {
        if !n.is_finite() {
            return Err(CanonicalError(format!("{n} is not a JSON number")));
        }
        serde_json_canonicalizer::to_string(&n).map_err(|e| CanonicalError(e.to_string()))
    }

    fn canon_text(json_text: &str) -> String {
        let v: Value = serde_json::from_str(json_text).expect("test input is JSON");
        String::from_utf8(canonical_bytes(&v)).expect("canonical bytes are UTF-8")
    }

    /// RFC 8785 Appendix B: IEEE-754 bit patterns and the text ECMAScript writes for each.
    const APPENDIX_B: &[(u64, Option<&str>)] = &[
        (0x0000000000000000, Some("0")),
        (0x8000000000000000, Some("0")), // minus zero
        (0x0000000000000001, Some("5e-324")),
        (0x8000000000000001, Some("-5e-324")),
        (0x7fefffffffffffff, Some("1.7976931348623157e+308")),
        (0xffefffffffffffff, Some("-1.7976931348623157e+308")),
        (0x4340000000000000, Some("9007199254740992")),
        (0xc340000000000000, Some("-9007199254740992")),
        (0x4430000000000000, Some("295147905179352830000")),
        (0x7fffffffffffffff, None), // NaN
        (0x7ff0000000000000, None), // Infinity
        (0x44b52d02c7e14af5, Some("9.999999999999997e+22")),
        (0x44b52d02c7e14af6, Some("1e+23")),
        (0x44b52d02c7e14af7, Some("1.0000000000000001e+23")),
        (0x444b1ae4d6e2ef4e, Some("999999999999999700000")),
        (0x444b1ae4d6e2ef4f, Some("999999999999999900000")),
        (0x444b1ae4d6e2ef50, Some("1e+21")),
        (0x3eb0c6f7a0b5ed8c, Some("9.999999999999997e-7")),
        (0x3eb0c6f7a0b5ed8d, Some("0.000001")),
        (0x41b3de4355555553, Some("333333333.3333332")),
        (0x41b3de4355555554, Some("333333333.33333325")),
        (0x41b3de4355555555, Some("333333333.3333333")),
        (0x41b3de4355555556, Some("333333333.3333334")),
        (0x41b3de4355555557, Some("333333333.33333343")),
        (0xbecbf647612f3696, Some("-0.0000033333333333333333")),
        (0x43143ff3c1cb0959, Some("1424953923781206.2")),
    ];

    #[test]
    fn rfc8785_appendix_b_numbers() {
        for &(bits, expected) in APPENDIX_B {
            let n = f64::from_bits(bits);
            match expected {
                Some(text) => {
                    assert_eq!(number_to_string(n).unwrap(), text, "{bits:016x}");
                    // The same through a Value, as a request carries it.
                    let v = json!([n]);
                    assert_eq!(canonical_bytes(&v), format!("[{text}]").as_bytes());
                    // And the expected text reads back as the same double (-0 aside).
                    let back: f64 = text.parse().unwrap();
                    assert_eq!(back.to_bits(), if bits == 1 << 63 { 0 } else { bits });
                }
                None => assert!(number_to_string(n).is_err(), "{bits:016x}"),
            }
        }
        assert!(number_to_string(f64::NEG_INFINITY).is_err());
        assert!(number_to_string(-f64::NAN).is_err());
        assert!(try_canonical_bytes(&json!(1)).is_ok());
    }

    /// 2283 doubles (random bit patterns, integers, short decimals, both sides of the
    /// exponent-notation switches, subnormals) with the text node's `String(d)` gives.
    #[test]
    fn agrees_with_ecmascript_on_generated_numbers() {
        let data = include_str!("testdata/es6_numbers.txt");
        let mut n = 0;
        for line in data.lines().filter(|l| !l.starts_with('#')) {
            let (hex_bits, expected) = line.split_once(' ').expect("hex and text");
            let bits = u64::from_str_radix(hex_bits, 16).expect("hex");
            let d = f64::from_bits(bits);
            assert_eq!(number_to_string(d).unwrap(), expected, "{hex_bits}");
            // ECMAScript's text, read by serde_json, is the same double again.
            let v: Value = serde_json::from_str(expected).unwrap();
            assert_eq!(
                v.as_f64().map(f64::to_bits),
                Some(if d == 0.0 { 0 } else { bits })
            );
            n += 1;
        }
        assert!(n > 2000, "{n}");
    }

    #[test]
    fn decimal_texts_read_as_the_double_they_denote() {
        // Text in a request → serde_json (float_roundtrip) → canonical text.
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0e10", "0"),
            ("1e21", "1e+21"),
            ("1E21", "1e+21"),
            ("1e+21", "1e+21"),
            ("1000000000000000000000", "1e+21"),
            ("100000000000000000000", "100000000000000000000"),
            ("999999999999999999999", "1e+21"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("5e-324", "5e-324"),
            ("4.9406564584124654e-324", "5e-324"),
            ("2.4703282292062328e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740992"),
            ("18446744073709551615", "18446744073709552000"),
            ("18446744073709551616", "18446744073709552000"),
            ("-9223372036854775808", "-9223372036854776000"),
            ("333333333.33333329", "333333333.3333333"),
            ("333333333.3333332", "333333333.3333332"),
            ("1424953923781206.25", "1424953923781206.2"),
            ("9.999999999999997e22", "9.999999999999997e+22"),
            ("1e23", "1e+23"),
            ("1.0000000000000001e23", "1.0000000000000001e+23"),
            ("999999999999999700000", "999999999999999700000"),
            ("-0.0000033333333333333333", "-0.0000033333333333333333"),
            ("2.2250738585072011e-308", "2.225073858507201e-308"),
            ("2.2250738585072012e-308", "2.2250738585072014e-308"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("1E30", "1e+30"),
            ("0.000000000000000000000000001", "1e-27"),
            ("1767225600000", "1767225600000"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                canon_text(&format!("[{input}]")),
                format!("[{expected}]"),
                "{input}"
            );
        }
        // Out of the double range: serde_json refuses it (an ECMAScript reader would make
        // it Infinity, which RFC 8785 refuses too). This also proves arbitrary_precision
        // is off in this build: with it the text would parse.
        assert!(serde_json::from_str::<Value>("[1e400]").is_err());
        assert!(serde_json::from_str::<Value>("[-1e400]").is_err());
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(canon_text(input), expected);
        // The RFC gives the UTF-8 of that output in hex (section 3.2.4).
        let hex_dump = "7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72
            75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a
            5b 33 33 33 33 33 33 33 33 33 2e 33 33 33 33 33 33 33 2c 31
            65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 2c 31 65 2d 32 37
            5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30
            30 66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d";
        let bytes: Vec<u8> = hex_dump
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        assert_eq!(canon_text(input).as_bytes(), bytes.as_slice());
    }

    #[test]
    fn rfc8785_section_3_2_3_sorting() {
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        // UTF-16 order: U+1F600 (D83D DE00) sorts before U+FB33, unlike code-point order.
        let expected = concat!(
            "{\"\\r\":\"Carriage Return\",",
            "\"1\":\"One\",",
            "\"\u{80}\":\"Control\",",
            "\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",",
            "\"\u{20ac}\":\"Euro Sign\",",
            "\"\u{1f600}\":\"Emoji: Grinning Face\",",
            "\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
        assert_eq!(canon_text(input), expected);
    }

    #[test]
    fn strings_keep_only_the_rfc_escapes() {
        let input = r#"["\u0000\u0007\b\t\n\u000b\f\r\u001f \u007f\u2028\u2029\/\"\\"]"#;
        let expected =
            "[\"\\u0000\\u0007\\b\\t\\n\\u000b\\f\\r\\u001f \u{7f}\u{2028}\u{2029}/\\\"\\\\\"]";
        assert_eq!(canon_text(input), expected);
        // Nested objects sort too, arrays keep their order, no whitespace anywhere.
        assert_eq!(
            canon_text(r#" { "b" : [ 3 , { "z" : 1 , "a" : 2 } ] , "a" : { } } "#),
            r#"{"a":{},"b":[3,{"a":2,"z":1}]}"#
        );
        // Lone surrogates are not JSON text a signer could mean: refused at the parse.
        assert!(serde_json::from_str::<Value>(r#"["\ud800"]"#).is_err());
        assert!(serde_json::from_str::<Value>(r#"["\ude00\ud83d"]"#).is_err());
    }

    #[test]
    fn payload_hash_form() {
        // SHA-256 of the empty string.
        assert_eq!(
            payload_hash(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let h = payload_hash(br#"{"a":1}"#);
        assert_eq!(h.len(), 71);
        assert!(h[7..]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    }

    // ---- property tests ----

    /// Arbitrary JSON values: every number kind, strings across the planes, nesting.
    pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
        let num = prop_oneof![
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            (-1.0e6f64..1.0e6).prop_map(Value::from),
            (0u64..=(1 << 53)).prop_map(Value::from),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            num,
            any::<String>().prop_map(Value::String),
            "[a-c\\\\\"/\u{7f}-\u{a0}\u{fb33}\u{1f600}\u{e000}\u{0}-\u{1f}]{0,6}"
                .prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(
                    (
                        prop_oneof![
                            any::<String>(),
                            "[a-c\u{80}\u{fb33}\u{1f600}\r1]{0,3}".prop_map(String::from)
                        ],
                        inner
                    ),
                    0..6
                )
                .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// A tiny deterministic generator for the writer's choices.
    pub(crate) struct Choices(u64);

    impl Choices {
        pub(crate) fn new(seed: u64) -> Self {
            Choices(seed | 1)
        }
        pub(crate) fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Writes `s` as a JSON string, each character spelled in one of its equivalent ways.
    pub(crate) fn write_string(s: &str, out: &mut String, c: &mut Choices) {
        out.push('"');
        for ch in s.chars() {
            let must_escape = ch == '"' || ch == '\\' || (ch as u32) < 0x20;
            let short = match ch {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                _ => None,
            };
            match (c.below(3), short) {
                (0, _) if !must_escape => out.push(ch),
                (1, Some(esc)) => out.push_str(esc),
                _ => {
                    let mut units = [0u16; 2];
                    for u in ch.encode_utf16(&mut units) {
                        if c.below(2) == 0 {
                            out.push_str(&format!("\\u{u:04x}"));
                        } else {
                            out.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                }
            }
        }
        out.push('"');
    }

    fn ws(out: &mut String, c: &mut Choices) {
        const WS: [&str; 5] = ["", "", " ", "\n\t", "\r\n  "];
        out.push_str(WS[c.below(WS.len())]);
    }

    /// Writes `v` as JSON text with members shuffled, strings spelled with random
    /// equivalent escapes, numbers in random equivalent notations and random whitespace.
    pub(crate) fn write_scrambled(v: &Value, out: &mut String, c: &mut Choices) {
        ws(out, c);
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    out.push_str(&u.to_string());
                } else if let Some(i) = n.as_i64() {
                    out.push_str(&i.to_string());
                } else {
                    let f = n.as_f64().unwrap_or_default();
                    // Rust's shortest round-trip digits, in plain or exponent notation.
                    match c.below(3) {
                        0 => out.push_str(&format!("{f}")),
                        1 => out.push_str(&format!("{f:e}")),
                        _ => out.push_str(&format!("{f:E}")),
                    }
                }
            }
            Value::String(s) => write_string(s, out, c),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_scrambled(item, out, c);
                }
                ws(out, c);
                out.push(']');
            }
            Value::Object(map) => {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                for i in (1..members.len()).rev() {
                    members.swap(i, c.below(i + 1));
                }
                out.push('{');
                for (n, &(k, val)) in members.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    ws(out, c);
                    write_string(k, out, c);
                    ws(out, c);
                    out.push(':');
                    write_scrambled(val, out, c);
                }
                ws(out, c);
                out.push('}');
            }
        }
        ws(out, c);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn stable_under_reordering_escapes_and_number_spelling(v in arb_value(), seed in any::<u64>()) {
            let reference = canonical_bytes(&v);
            let mut text = String::new();
            write_scrambled(&v, &mut text, &mut Choices::new(seed));
            let reparsed: Value = serde_json::from_str(&text).expect("the writer writes JSON");
            prop_assert_eq!(canonical_bytes(&reparsed), reference);
        }

        #[test]
        fn idempotent(v in arb_value()) {
            let once = canonical_bytes(&v);
            let reparsed: Value = serde_json::from_slice(&once).expect("canonical bytes are JSON");
            prop_assert_eq!(canonical_bytes(&reparsed), once);
        }

        #[test]
        fn every_finite_double_round_trips(bits in any::<u64>()) {
            let f = f64::from_bits(bits);
            if let Ok(text) = number_to_string(f) {
                let back: f64 = text.parse().expect("canonical numbers parse");
                prop_assert!(back == f, "{} -> {}", f, text);
                // And through serde_json, as a request would carry it.
                let v: Value = serde_json::from_str(&text).expect("canonical numbers are JSON");
                prop_assert_eq!(v.as_f64(), Some(if f == 0.0 { 0.0 } else { f }));
            } else {
                prop_assert!(!f.is_finite());
            }
        }
    }
}
