//! The v1 envelope: one request body, parsed and validated once, at the edge, into an
//! [`Alert`].
//!
//! Validation follows the order `DESIGN.md` settles (body, `v`, `device`, `suite`,
//! `ciphertext`, `collapseId`, `flapId`, `priority`, `event`) and reports the first failing
//! rule with the hosted reference relay's exact text ([`messages`]), because daemon
//! operators read those bodies in their logs (daemons log at most 512 bytes of a response
//! body) and daemons re-fit a ciphertext to 3000 characters only when the error mentions
//! `ciphertext`. Unknown fields are ignored, so v1 tolerates additive evolution.
//!
//! Parsing is pure: no I/O, no clock, no allocation beyond the owned output.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::delivery::alert::{
    check_ciphertext, is_id32, is_suite, CiphertextError, Id32, Priority,
};
pub use crate::delivery::alert::{Alert, DEFAULT_MAX_CIPHERTEXT_CHARS, DEFAULT_SUITE};
use crate::device::DeviceToken;

/// The largest request body the relay reads, in bytes (declared or actual).
pub const MAX_BODY_BYTES: usize = 8192;

/// The reference relay's error texts, one per rule.
pub mod messages {
    /// The body is not JSON at all.
    pub const NOT_JSON: &str = "body is not valid JSON";
    /// JSON, but not an object.
    pub const NOT_OBJECT: &str = "body must be a JSON object";
    /// `v` is not the number 1.
    pub const VERSION: &str = "unsupported protocol version (expected v: 1)";
    /// `device` is not 16 to 512 hex characters.
    pub const DEVICE: &str = "device must be a hex APNs device token";
    /// `suite` present and not a string (`null` included).
    pub const SUITE_TYPE: &str = "suite must be a string";
    /// `suite` a string that breaks the rule.
    pub const SUITE: &str = "suite is not a valid suite identifier";
    /// `ciphertext` missing, not a string, or empty.
    pub const CIPHERTEXT_REQUIRED: &str = "ciphertext is required";
    /// `ciphertext` not padded standard base64, or under the suite's floor.
    pub const CIPHERTEXT: &str = "ciphertext is not a base64 sealed box";
    /// `collapseId` is not 32 lowercase hex characters.
    pub const COLLAPSE_ID: &str = "collapseId must be 32 lowercase hex characters";
    /// `flapId` present, not null, and not 32 lowercase hex characters (not in the reference).
    pub const FLAP_ID: &str = "flapId must be 32 lowercase hex characters";
    /// `priority` is neither value.
    pub const PRIORITY: &str = "priority must be \"time-sensitive\" or \"passive\"";
    /// `event` is not a boolean.
    pub const EVENT: &str = "event must be a boolean";

    /// `ciphertext` over the configured cap (names `ciphertext`, so daemons re-fit).
    pub fn too_long(cap: usize) -> String {
        format!("ciphertext exceeds {cap} characters")
    }
}

/// Why an envelope was refused: a short text that names the field, sent as the 400 body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvelopeError(Cow<'static, str>);

impl EnvelopeError {
    fn new(text: &'static str) -> Self {
        Self(Cow::Borrowed(text))
    }

    /// The text sent to the client.
    pub fn message(&self) -> &str {
        &self.0
    }
}

/// The `device` field's exact text, as sent (a region's home is chosen by it); `None` when the
/// body has no string `device` at the top level.
pub fn device_text(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Device<'a> {
        #[serde(borrow)]
        device: std::borrow::Cow<'a, str>,
    }
    serde_json::from_slice::<Device<'_>>(body)
        .ok()
        .map(|d| d.device.into_owned())
}

/// Parses and validates one request body.
///
/// `max_ciphertext_chars` is the configured cap (`RELAY_MAX_CIPHERTEXT_CHARS`).
///
/// The body is read in one pass into the handful of fields the envelope uses, borrowing
/// strings from the body where JSON escapes allow; no tree of the whole document is built.
/// Every value is still parsed in full, unknown fields included, so a body is refused as
/// "not a JSON object" exactly when `serde_json::Value` would refuse it; a field that
/// appears twice takes its last value.
pub fn parse(body: &[u8], max_ciphertext_chars: usize) -> Result<Alert, EnvelopeError> {
    let fields = std::str::from_utf8(body)
        .ok()
        .and_then(|text| serde_json::from_str::<Fields<'_>>(text).ok());
    match fields {
        Some(f) => validate(&f, max_ciphertext_chars),
        None => Err(unreadable(body)),
    }
}

/// Why a body could not be read as an object: JSON of another kind, or not JSON (read the
/// way `serde_json::Value` reads, lone surrogates refused). Only on the error path, so the
/// second reading costs nothing on good requests.
fn unreadable(body: &[u8]) -> EnvelopeError {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(_) => EnvelopeError::new(messages::NOT_OBJECT),
        Err(_) => EnvelopeError::new(messages::NOT_JSON),
    }
}

/// One JSON value as the envelope rules see it, borrowed from the body when unescaped.
#[derive(Debug, PartialEq)]
enum Raw<'a> {
    Null,
    Bool(bool),
    Num(f64),
    Str(Cow<'a, str>),
    /// An array or an object (parsed in full, contents dropped).
    Nested,
}

impl<'a> Raw<'a> {
    fn as_str(&self) -> Option<&str> {
        match self {
            Raw::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Raw<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Raw<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Raw<'de>, E> {
                Ok(Raw::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Raw<'de>, E> {
                Ok(Raw::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Raw<'de>, E> {
                Ok(Raw::Bool(b))
            }
            // As `serde_json::Value::as_f64` reads any number.
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Raw<'de>, E> {
                Ok(Raw::Num(n as f64))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Raw<'de>, E> {
                Ok(Raw::Num(n as f64))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Raw<'de>, E> {
                Ok(Raw::Num(n))
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Raw<'de>, E> {
                Ok(Raw::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Raw<'de>, E> {
                Ok(Raw::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Raw<'de>, E> {
                Ok(Raw::Str(Cow::Owned(s)))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Raw<'de>, A::Error> {
                while seq.next_element::<Raw<'de>>()?.is_some() {}
                Ok(Raw::Nested)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Raw<'de>, A::Error> {
                while map.next_entry::<Raw<'de>, Raw<'de>>()?.is_some() {}
                Ok(Raw::Nested)
            }
        }
        d.deserialize_any(V)
    }
}

/// The top-level fields the envelope reads; `None` when absent.
#[derive(Default)]
struct Fields<'a> {
    v: Option<Raw<'a>>,
    device: Option<Raw<'a>>,
    suite: Option<Raw<'a>>,
    ciphertext: Option<Raw<'a>>,
    collapse_id: Option<Raw<'a>>,
    flap_id: Option<Raw<'a>>,
    priority: Option<Raw<'a>>,
    event: Option<Raw<'a>>,
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut f = Fields::default();
                while let Some(key) = map.next_key::<Raw<'de>>()? {
                    let value: Raw<'de> = map.next_value()?;
                    let slot = match key.as_str() {
                        Some("v") => &mut f.v,
                        Some("device") => &mut f.device,
                        Some("suite") => &mut f.suite,
                        Some("ciphertext") => &mut f.ciphertext,
                        Some("collapseId") => &mut f.collapse_id,
                        Some("flapId") => &mut f.flap_id,
                        Some("priority") => &mut f.priority,
                        Some("event") => &mut f.event,
                        _ => continue,
                    };
                    *slot = Some(value);
                }
                Ok(f)
            }
        }
        d.deserialize_map(V)
    }
}

fn str_of<'f>(raw: &'f Option<Raw<'_>>) -> Option<&'f str> {
    raw.as_ref().and_then(Raw::as_str)
}

fn validate(f: &Fields<'_>, max_chars: usize) -> Result<Alert, EnvelopeError> {
    use messages as m;
    if !matches!(f.v, Some(Raw::Num(n)) if n == 1.0) {
        return Err(EnvelopeError::new(m::VERSION));
    }

    let device = str_of(&f.device)
        .and_then(DeviceToken::parse)
        .ok_or_else(|| EnvelopeError::new(m::DEVICE))?;

    let suite = match &f.suite {
        None => DEFAULT_SUITE,
        Some(Raw::Str(s)) if is_suite(s) => s.as_ref(),
        Some(Raw::Str(_)) => return Err(EnvelopeError::new(m::SUITE)),
        Some(_) => return Err(EnvelopeError::new(m::SUITE_TYPE)),
    };

    let ciphertext = match str_of(&f.ciphertext) {
        Some(c) if !c.is_empty() => c,
        _ => return Err(EnvelopeError::new(m::CIPHERTEXT_REQUIRED)),
    };
    match check_ciphertext(ciphertext, suite, max_chars) {
        Ok(()) => {}
        Err(CiphertextError::TooLong) => {
            return Err(EnvelopeError(Cow::Owned(m::too_long(max_chars))))
        }
        Err(CiphertextError::NotSealedBox) => return Err(EnvelopeError::new(m::CIPHERTEXT)),
    }

    let collapse_id = str_of(&f.collapse_id)
        .and_then(Id32::parse)
        .ok_or_else(|| EnvelopeError::new(m::COLLAPSE_ID))?;

    let flap_id = match &f.flap_id {
        None | Some(Raw::Null) => None,
        Some(Raw::Str(s)) if is_id32(s) => Id32::parse(s),
        Some(_) => return Err(EnvelopeError::new(m::FLAP_ID)),
    };

    let priority = str_of(&f.priority)
        .and_then(Priority::parse)
        .ok_or_else(|| EnvelopeError::new(m::PRIORITY))?;

    let event = match f.event {
        Some(Raw::Bool(b)) => b,
        _ => return Err(EnvelopeError::new(m::EVENT)),
    };

    Ok(Alert {
        device,
        suite: suite.to_owned(),
        ciphertext: ciphertext.to_owned(),
        collapse_id,
        flap_id,
        priority,
        event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const CAP: usize = DEFAULT_MAX_CIPHERTEXT_CHARS;

    /// The reading the single-pass parser replaced, kept as the reference it must agree
    /// with: the whole body into a `serde_json::Value`, then the same rules on its fields.
    mod reference {
        use super::super::*;
        use serde_json::Value;

        fn raw(v: &Value) -> Raw<'_> {
            match v {
                Value::Null => Raw::Null,
                Value::Bool(b) => Raw::Bool(*b),
                Value::Number(n) => Raw::Num(n.as_f64().unwrap_or(f64::NAN)),
                Value::String(s) => Raw::Str(Cow::Borrowed(s)),
                Value::Array(_) | Value::Object(_) => Raw::Nested,
            }
        }

        pub(super) fn parse_via_value(
            body: &[u8],
            max_ciphertext_chars: usize,
        ) -> Result<Alert, EnvelopeError> {
            let value: Value =
                serde_json::from_slice(body).map_err(|_| EnvelopeError::new(messages::NOT_JSON))?;
            let Value::Object(map) = value else {
                return Err(EnvelopeError::new(messages::NOT_OBJECT));
            };
            let field = |name: &str| map.get(name).map(raw);
            let fields = Fields {
                v: field("v"),
                device: field("device"),
                suite: field("suite"),
                ciphertext: field("ciphertext"),
                collapse_id: field("collapseId"),
                flap_id: field("flapId"),
                priority: field("priority"),
                event: field("event"),
            };
            validate(&fields, max_ciphertext_chars)
        }
    }

    fn good() -> Value {
        json!({
            "v": 1,
            "device": "ABCDEF0123456789abcdef0123456789",
            "suite": "x25519",
            "ciphertext": "A".repeat(68),
            "collapseId": "93bc5d02dc2a24b5365347573b6f5115",
            "flapId": "0123456789abcdef0123456789abcdef",
            "priority": "time-sensitive",
            "event": false,
        })
    }

    fn with(field: &str, value: Value) -> Vec<u8> {
        let mut v = good();
        v[field] = value;
        serde_json::to_vec(&v).unwrap()
    }

    fn without(field: &str) -> Vec<u8> {
        let mut v = good();
        v.as_object_mut().unwrap().remove(field);
        serde_json::to_vec(&v).unwrap()
    }

    fn err(body: &[u8]) -> String {
        parse(body, CAP).unwrap_err().message().to_owned()
    }

    #[test]
    fn accepts_a_good_envelope_and_lowercases_the_device() {
        let e = parse(&serde_json::to_vec(&good()).unwrap(), CAP).unwrap();
        assert_eq!(e.device.expose(), "abcdef0123456789abcdef0123456789");
        assert_eq!(e.suite, "x25519");
        assert_eq!(e.priority, Priority::TimeSensitive);
        assert!(!e.event);
        assert_eq!(e.flap_key(), "0123456789abcdef0123456789abcdef");
    }

    #[test]
    fn body_must_be_a_json_object() {
        assert_eq!(err(b"not json"), "body is not valid JSON");
        assert_eq!(err(b""), "body is not valid JSON");
        assert_eq!(err(b"{\"v\":1,"), "body is not valid JSON");
        assert_eq!(err(b"{\"v\":\"\\ud800\"}"), "body is not valid JSON");
        assert_eq!(err(b"\xff\xfe"), "body is not valid JSON");
        assert_eq!(err(b"[1,2]"), "body must be a JSON object");
        assert_eq!(err(b"\"s\""), "body must be a JSON object");
        assert_eq!(err(b"null"), "body must be a JSON object");
        assert_eq!(err(b" 42 "), "body must be a JSON object");
    }

    #[test]
    fn v_must_be_the_number_one() {
        assert!(parse(&with("v", json!(1.0)), CAP).is_ok());
        for bad in [json!(2), json!("1"), json!(true), json!(null), json!(0.5)] {
            assert_eq!(
                err(&with("v", bad)),
                "unsupported protocol version (expected v: 1)"
            );
        }
        assert_eq!(
            err(&without("v")),
            "unsupported protocol version (expected v: 1)"
        );
    }

    #[test]
    fn device_bounds_and_alphabet() {
        let msg = "device must be a hex APNs device token";
        assert!(parse(&with("device", json!("a".repeat(16))), CAP).is_ok());
        assert!(parse(&with("device", json!("a".repeat(512))), CAP).is_ok());
        assert!(
            parse(&with("device", json!("a".repeat(17))), CAP).is_ok(),
            "odd length"
        );
        assert_eq!(err(&with("device", json!("a".repeat(15)))), msg);
        assert_eq!(err(&with("device", json!("a".repeat(513)))), msg);
        assert_eq!(
            err(&with("device", json!(format!("{}g", "a".repeat(20))))),
            msg
        );
        assert_eq!(err(&with("device", json!(12345))), msg);
        assert_eq!(err(&without("device")), msg);
    }

    #[test]
    fn suite_is_optional_and_shaped() {
        let e = parse(&without("suite"), CAP).unwrap();
        assert_eq!(e.suite, "x25519");
        // null is not absent: the reference refuses it.
        assert_eq!(err(&with("suite", json!(null))), "suite must be a string");
        assert_eq!(err(&with("suite", json!(1))), "suite must be a string");
        assert_eq!(
            err(&with("suite", json!(["x25519"]))),
            "suite must be a string"
        );
        assert_eq!(
            parse(&with("suite", json!("9-a")), CAP).unwrap().suite,
            "9-a"
        );
        for bad in ["", "-x", "X25519", "a".repeat(17).as_str(), "a_b"] {
            assert_eq!(
                err(&with("suite", json!(bad))),
                "suite is not a valid suite identifier",
                "{bad}"
            );
        }
    }

    #[test]
    fn ciphertext_rules_each_name_the_field() {
        assert!(parse(&with("ciphertext", json!("A".repeat(CAP))), CAP).is_ok());
        assert_eq!(
            err(&with("ciphertext", json!("A".repeat(CAP + 4)))),
            "ciphertext exceeds 3800 characters"
        );
        // Over the cap is reported before any other ciphertext rule.
        assert_eq!(
            err(&with("ciphertext", json!("!".repeat(CAP + 1)))),
            "ciphertext exceeds 3800 characters"
        );
        assert_eq!(
            err(&with("ciphertext", json!("A".repeat(64)))),
            "ciphertext is not a base64 sealed box"
        );
        for bad in crate::delivery::alert::tests::not_base64() {
            assert_eq!(
                err(&with("ciphertext", json!(bad))),
                "ciphertext is not a base64 sealed box"
            );
        }
        assert!(parse(
            &with("ciphertext", json!(format!("{}==", "A".repeat(70)))),
            CAP
        )
        .is_ok());
        for bad in [json!(""), json!(null), json!(5), json!(["A"])] {
            assert_eq!(err(&with("ciphertext", bad)), "ciphertext is required");
        }
        assert_eq!(err(&without("ciphertext")), "ciphertext is required");
    }

    #[test]
    fn xwing_needs_a_longer_ciphertext() {
        let mut v = good();
        v["suite"] = json!("xwing");
        v["ciphertext"] = json!("A".repeat(1516));
        assert_eq!(
            err(&serde_json::to_vec(&v).unwrap()),
            "ciphertext is not a base64 sealed box"
        );
        v["ciphertext"] = json!("A".repeat(1520));
        assert!(parse(&serde_json::to_vec(&v).unwrap(), CAP).is_ok());
    }

    #[test]
    fn collapse_and_flap_ids() {
        let cmsg = "collapseId must be 32 lowercase hex characters";
        assert_eq!(err(&with("collapseId", json!("A".repeat(32)))), cmsg);
        assert_eq!(err(&with("collapseId", json!("a".repeat(31)))), cmsg);
        assert_eq!(err(&without("collapseId")), cmsg);
        let fmsg = "flapId must be 32 lowercase hex characters";
        assert_eq!(err(&with("flapId", json!("a".repeat(33)))), fmsg);
        assert_eq!(err(&with("flapId", json!(1))), fmsg);
        let e = parse(&with("flapId", json!(null)), CAP).unwrap();
        assert_eq!(e.flap_key(), "93bc5d02dc2a24b5365347573b6f5115");
        let e = parse(&without("flapId"), CAP).unwrap();
        assert!(e.flap_id.is_none());
    }

    #[test]
    fn priority_and_event() {
        assert_eq!(
            parse(&with("priority", json!("passive")), CAP)
                .unwrap()
                .priority,
            Priority::Passive
        );
        let pmsg = r#"priority must be "time-sensitive" or "passive""#;
        assert_eq!(err(&with("priority", json!("active"))), pmsg);
        assert_eq!(err(&without("priority")), pmsg);
        assert_eq!(
            err(&with("event", json!("true"))),
            "event must be a boolean"
        );
        assert_eq!(err(&without("event")), "event must be a boolean");
        assert!(parse(&with("event", json!(true)), CAP).unwrap().event);
    }

    #[test]
    fn first_failing_rule_wins_and_unknown_fields_are_ignored() {
        let mut v = good();
        v["v"] = json!(2);
        v["device"] = json!("xx");
        assert_eq!(
            err(&serde_json::to_vec(&v).unwrap()),
            "unsupported protocol version (expected v: 1)"
        );
        let mut v = good();
        v["collapseId"] = json!("bad");
        v["priority"] = json!("bad");
        assert!(err(&serde_json::to_vec(&v).unwrap()).starts_with("collapseId"));
        assert!(parse(&with("somethingNew", json!({"x": [1, 2]})), CAP).is_ok());
    }

    /// Every text of DESIGN.md's table, byte for byte, and the cap's text names
    /// `ciphertext` (daemons re-fit to 3000 characters only then).
    #[test]
    fn every_reference_text_is_answered_exactly() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{".to_vec(), "body is not valid JSON"),
            (b"[]".to_vec(), "body must be a JSON object"),
            (
                with("v", json!(2)),
                "unsupported protocol version (expected v: 1)",
            ),
            (
                with("device", json!("nothex")),
                "device must be a hex APNs device token",
            ),
            (with("suite", json!(null)), "suite must be a string"),
            (
                with("suite", json!("Bad")),
                "suite is not a valid suite identifier",
            ),
            (without("ciphertext"), "ciphertext is required"),
            (
                with("ciphertext", json!("A".repeat(3804))),
                "ciphertext exceeds 3800 characters",
            ),
            (
                with("ciphertext", json!("@".repeat(68))),
                "ciphertext is not a base64 sealed box",
            ),
            (
                with("collapseId", json!(1)),
                "collapseId must be 32 lowercase hex characters",
            ),
            (
                with("flapId", json!("x")),
                "flapId must be 32 lowercase hex characters",
            ),
            (
                with("priority", json!(null)),
                r#"priority must be "time-sensitive" or "passive""#,
            ),
            (with("event", json!(0)), "event must be a boolean"),
        ];
        for (body, text) in cases {
            assert_eq!(err(&body), text, "{}", String::from_utf8_lossy(&body));
        }
        assert!(parse(&with("ciphertext", json!("A".repeat(3000))), 3000).is_ok());
        assert_eq!(
            parse(&with("ciphertext", json!("A".repeat(3004))), 3000)
                .unwrap_err()
                .message(),
            "ciphertext exceeds 3000 characters"
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn same(body: &[u8]) -> Result<(), TestCaseError> {
            let new = parse(body, CAP);
            let old = reference::parse_via_value(body, CAP);
            match (&new, &old) {
                (Ok(a), Ok(b)) => {
                    prop_assert_eq!(a.device.expose(), b.device.expose());
                    prop_assert_eq!(&a.suite, &b.suite);
                    prop_assert_eq!(&a.ciphertext, &b.ciphertext);
                    prop_assert_eq!(a.collapse_id.as_str(), b.collapse_id.as_str());
                    prop_assert_eq!(
                        a.flap_id.as_ref().map(Id32::as_str),
                        b.flap_id.as_ref().map(Id32::as_str)
                    );
                    prop_assert_eq!(a.priority, b.priority);
                    prop_assert_eq!(a.event, b.event);
                }
                (Err(a), Err(b)) => prop_assert_eq!(a.message(), b.message()),
                _ => prop_assert!(
                    false,
                    "parsers disagree on {:?}: {:?} vs {:?}",
                    String::from_utf8_lossy(body),
                    new.as_ref().map(|e| e.ciphertext.len()),
                    old.as_ref().map(|e| e.ciphertext.len())
                ),
            }
            Ok(())
        }

        /// JSON text for one value, including forms a generator of `Value`s never writes:
        /// escapes, odd number spellings, lone surrogates, raw control characters.
        fn json_value() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                Just("1".to_owned()),
                Just("1.0".to_owned()),
                Just("1e0".to_owned()),
                Just("10e-1".to_owned()),
                Just("-0".to_owned()),
                Just("1.0000000000000001".to_owned()),
                Just("1e400".to_owned()),
                Just("01".to_owned()),
                Just("null".to_owned()),
                Just("true".to_owned()),
                Just("false".to_owned()),
                any::<i64>().prop_map(|n| n.to_string()),
                Just("\"time-sensitive\"".to_owned()),
                Just("\"passive\"".to_owned()),
                Just("\"x25519\"".to_owned()),
                Just("\"xwing\"".to_owned()),
                Just("[\"x25519\"]".to_owned()),
                Just("\"\\u0070assive\"".to_owned()),
                Just("\"\\ud800\"".to_owned()),
                Just("\"\\ud83d\\ude00\"".to_owned()),
                Just("\"a\u{1}b\"".to_owned()),
                Just("\"\\x\"".to_owned()),
                Just(format!("\"{}\"", "a".repeat(32))),
                Just(format!("\"{}\"", "AbC0".repeat(20))),
                Just(format!("\"{}==\"", "A".repeat(70))),
                Just(format!("\"{}\\/\"", "A".repeat(71))),
                "\"[ -~]{0,40}\"".prop_filter("no bare quote or backslash", |s| {
                    !s[1..s.len() - 1].contains(['"', '\\'])
                }),
            ];
            leaf.prop_recursive(3, 16, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4)
                        .prop_map(|v| format!("[{}]", v.join(","))),
                    proptest::collection::vec(inner, 0..3).prop_map(|v| {
                        let parts: Vec<String> = v
                            .iter()
                            .enumerate()
                            .map(|(i, x)| format!("\"k{i}\":{x}"))
                            .collect();
                        format!("{{{}}}", parts.join(","))
                    }),
                ]
            })
        }

        fn json_key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("v"),
                Just("device"),
                Just("suite"),
                Just("ciphertext"),
                Just("collapseId"),
                Just("flapId"),
                Just("priority"),
                Just("event"),
                Just("\\u0076"),
                Just("devic\\u0065"),
                Just("other"),
                Just("V"),
            ]
            .prop_map(|k| format!("\"{k}\""))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Objects of arbitrary fields (duplicates, escaped keys, nested values).
            #[test]
            fn agrees_with_the_value_parser_on_arbitrary_objects(
                fields in proptest::collection::vec((json_key(), json_value()), 0..12),
                ws in "[ \t\n]{0,2}",
                tail in prop_oneof![Just(""), Just(" "), Just(","), Just("}"), Just("x")],
            ) {
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}{ws}:{ws}{v}")).collect();
                let body = format!("{ws}{{{}}}{tail}", parts.join(","));
                same(body.as_bytes())?;
            }

            /// A valid envelope with extra fields, then one byte changed, dropped or added.
            #[test]
            fn agrees_with_the_value_parser_on_mutated_envelopes(
                extra in proptest::collection::vec((json_key(), json_value()), 0..3),
                at in any::<prop::sample::Index>(),
                op in 0u8..4,
                byte in any::<u8>(),
            ) {
                let mut v = good();
                let mut body = serde_json::to_string(&v.take()).unwrap();
                body.pop();
                for (k, x) in &extra {
                    body.push_str(&format!(",{k}:{x}"));
                }
                body.push('}');
                let mut bytes = body.into_bytes();
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] = byte,
                    1 => { bytes.remove(i); }
                    2 => bytes.insert(i, byte),
                    _ => {}
                }
                same(&bytes)?;
            }
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600)) {
                let _ = parse(&body, CAP);
            }

            #[test]
            fn arbitrary_json_never_panics(
                v in prop_oneof![Just(json!(1)), Just(json!(1.0)), any::<i64>().prop_map(|n| json!(n)), Just(json!(null))],
                device in "[0-9a-fA-FxZ]{0,40}",
                suite in proptest::option::of("[a-zA-Z0-9_-]{0,20}"),
                ct in "[A-Za-z0-9+/=]{0,120}",
                cid in "[0-9a-fA-F]{30,34}",
                prio in "(time-sensitive|passive|other)",
                event in any::<Option<bool>>(),
            ) {
                let mut m = json!({"v": v, "device": device, "ciphertext": ct, "collapseId": cid, "priority": prio});
                if let Some(s) = suite { m["suite"] = json!(s); }
                if let Some(e) = event { m["event"] = json!(e); }
                match parse(&serde_json::to_vec(&m).unwrap(), CAP) {
                    Ok(e) => {
                        prop_assert!(e.device.expose().bytes().all(|b| !b.is_ascii_uppercase()));
                        prop_assert!(e.ciphertext.len() % 4 == 0);
                    }
                    Err(e) => prop_assert!(e.message().len() < 120),
                }
            }
        }
    }
}
