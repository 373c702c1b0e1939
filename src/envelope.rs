//! The inbound envelope: parsed and validated once, at the edge, into typed values.
//!
//! Everything past this module works with [`Envelope`], whose fields can only hold values
//! the v1 contract allows: a [`DeviceToken`] is always lowercase hex, a [`CollapseId`] is
//! always 32 lowercase hex characters, and so on. Validation follows the order that
//! `DESIGN.md` settles (body, `v`, `device`, `suite`, `ciphertext`, `collapseId`, `flapId`,
//! `priority`, `event`) and reports the first failing rule with a short text that names
//! the field, because daemons log at most 512 bytes of a response body and re-fit a
//! ciphertext only when the error mentions `ciphertext`.
//!
//! Parsing is pure: no I/O, no clock, no allocation beyond the owned output.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The largest request body the relay reads, in bytes (declared or actual).
pub const MAX_BODY_BYTES: usize = 8192;

/// The ciphertext cap daemons in the field fit to (see `DESIGN.md`).
pub const DEFAULT_MAX_CIPHERTEXT_CHARS: usize = 3800;

/// A sealed box carries 48 bytes of overhead (32-byte ephemeral key and 16-byte MAC); with
/// a minimal payload its base64 is at least this long.
pub const MIN_CIPHERTEXT_CHARS: usize = 68;

/// The X-Wing hybrid suite's encapsulation is far larger than X25519's.
pub const MIN_CIPHERTEXT_CHARS_XWING: usize = 1520;

/// The suite a v1 envelope means when it names none.
pub const DEFAULT_SUITE: &str = "x25519";

/// Why an envelope was refused: a short text that names the field, sent as the 400 body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvelopeError(String);

impl EnvelopeError {
    fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text sent to the client.
    pub fn message(&self) -> &str {
        &self.0
    }
}

/// An APNs device token: 16 to 512 hex characters, lowercased.
///
/// Never printed: `Display` and `Debug` show only [`DeviceToken::hash8`], so a token cannot
/// reach a log line by accident.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeviceToken(String);

impl DeviceToken {
    /// Parses a token as the envelope carries it (either case; odd lengths allowed).
    pub fn parse(raw: &str) -> Option<Self> {
        if !(16..=512).contains(&raw.len()) || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Self(raw.to_ascii_lowercase()))
    }

    /// The token itself, for the APNs request path only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the token.
    pub fn digest(&self) -> [u8; 32] {
        let d = ring::digest::digest(&ring::digest::SHA256, self.0.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        out
    }

    /// The first 8 hex characters of SHA-256 of the token: how logs name a device.
    pub fn hash8(&self) -> String {
        hex(&self.digest()[..4])
    }

    /// The first 32 hex characters of SHA-256 of the token: how stored state names a
    /// device, so a copy of the store reveals no token.
    pub fn store_key(&self) -> String {
        hex(&self.digest()[..16])
    }
}

impl fmt::Debug for DeviceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceToken({})", self.hash8())
    }
}

impl fmt::Display for DeviceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hash8())
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

fn is_id32(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Exactly 32 lowercase hex characters: the `collapseId` and `flapId` shape.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Id32(String);

impl Id32 {
    /// Parses a 32-character lowercase hex id.
    pub fn parse(raw: &str) -> Option<Self> {
        is_id32(raw).then(|| Self(raw.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 characters: how logs name an alert.
    pub fn prefix8(&self) -> &str {
        &self.0[..8]
    }
}

impl fmt::Debug for Id32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.prefix8())
    }
}

/// Names one run of an alert; the coalescing key (with the device).
pub type CollapseId = Id32;

/// The interruption level the daemon asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Breaks through scheduled summaries; APNs priority 10, with sound.
    TimeSensitive,
    /// Delivered quietly; APNs priority 5, no sound.
    Passive,
}

impl Priority {
    /// The wire name, also the APNs `interruption-level`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::TimeSensitive => "time-sensitive",
            Priority::Passive => "passive",
        }
    }
}

/// One validated v1 envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// Where the notification goes.
    pub device: DeviceToken,
    /// The sealing suite, forwarded to the app (`x25519` unless the daemon says otherwise).
    pub suite: String,
    /// The sealed alert, standard base64, never decoded or logged by the relay.
    pub ciphertext: String,
    /// One run of one alert.
    pub collapse_id: CollapseId,
    /// The alert's source across runs, when the daemon sends one.
    pub flap_id: Option<Id32>,
    /// Interruption level.
    pub priority: Priority,
    /// Whether this is a daemon event (routing metadata only).
    pub event: bool,
}

impl Envelope {
    /// The key flap suppression counts forwards under: the `flapId` when the envelope has
    /// one, else its `collapseId`.
    pub fn flap_key(&self) -> &str {
        self.flap_id
            .as_ref()
            .map_or(self.collapse_id.as_str(), Id32::as_str)
    }
}

/// Bytes of the standard base64 alphabet (without `=`).
const BASE64_STD: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
        i += 1;
    }
    t
};

fn is_base64_std_padded(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() % 4 != 0 {
        return false;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return false;
    }
    b[..b.len() - pad]
        .iter()
        .fold(true, |ok, &c| ok & BASE64_STD[c as usize])
}

fn is_suite(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=16).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
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
pub fn parse(body: &[u8], max_ciphertext_chars: usize) -> Result<Envelope, EnvelopeError> {
    let not_object = || EnvelopeError::new("body is not a JSON object");
    let text = std::str::from_utf8(body).map_err(|_| not_object())?;
    let fields: Fields<'_> = serde_json::from_str(text).map_err(|_| not_object())?;
    validate(&fields, max_ciphertext_chars)
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

fn validate(f: &Fields<'_>, max_chars: usize) -> Result<Envelope, EnvelopeError> {
    if !matches!(f.v, Some(Raw::Num(n)) if n == 1.0) {
        return Err(EnvelopeError::new("v must be 1"));
    }

    let device = str_of(&f.device)
        .and_then(DeviceToken::parse)
        .ok_or_else(|| EnvelopeError::new("device must be 16 to 512 hex characters"))?;

    let suite = match &f.suite {
        None | Some(Raw::Null) => DEFAULT_SUITE,
        Some(Raw::Str(s)) if is_suite(s) => s.as_ref(),
        Some(_) => {
            return Err(EnvelopeError::new(
                "suite must be 1 to 16 of [a-z0-9-] starting with a letter or digit",
            ))
        }
    };

    let ciphertext = match str_of(&f.ciphertext) {
        Some(c) if !c.is_empty() => c,
        _ => {
            return Err(EnvelopeError::new(
                "ciphertext must be a non-empty base64 string",
            ))
        }
    };
    if ciphertext.len() > max_chars {
        return Err(EnvelopeError::new(format!(
            "ciphertext exceeds {max_chars} characters"
        )));
    }
    if !is_base64_std_padded(ciphertext) {
        return Err(EnvelopeError::new(
            "ciphertext must be standard base64 with padding",
        ));
    }
    let min = if suite == "xwing" {
        MIN_CIPHERTEXT_CHARS_XWING
    } else {
        MIN_CIPHERTEXT_CHARS
    };
    if ciphertext.len() < min {
        return Err(EnvelopeError::new(format!(
            "ciphertext is shorter than {min} characters"
        )));
    }

    let collapse_id = str_of(&f.collapse_id)
        .and_then(Id32::parse)
        .ok_or_else(|| EnvelopeError::new("collapseId must be 32 lowercase hex characters"))?;

    let flap_id = match &f.flap_id {
        None | Some(Raw::Null) => None,
        Some(Raw::Str(s)) if is_id32(s) => Some(Id32(s.as_ref().to_owned())),
        Some(_) => {
            return Err(EnvelopeError::new(
                "flapId must be 32 lowercase hex characters",
            ))
        }
    };

    let priority = match str_of(&f.priority) {
        Some("time-sensitive") => Priority::TimeSensitive,
        Some("passive") => Priority::Passive,
        _ => {
            return Err(EnvelopeError::new(
                "priority must be time-sensitive or passive",
            ))
        }
    };

    let event = match f.event {
        Some(Raw::Bool(b)) => b,
        _ => return Err(EnvelopeError::new("event must be a boolean")),
    };

    Ok(Envelope {
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
        ) -> Result<Envelope, EnvelopeError> {
            let value: Value = serde_json::from_slice(body)
                .map_err(|_| EnvelopeError::new("body is not a JSON object"))?;
            let Value::Object(map) = value else {
                return Err(EnvelopeError::new("body is not a JSON object"));
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
        assert_eq!(err(b"not json"), "body is not a JSON object");
        assert_eq!(err(b"[1,2]"), "body is not a JSON object");
        assert_eq!(err(b"\"s\""), "body is not a JSON object");
        assert_eq!(err(b""), "body is not a JSON object");
    }

    #[test]
    fn v_must_be_the_number_one() {
        assert!(parse(&with("v", json!(1.0)), CAP).is_ok());
        for bad in [json!(2), json!("1"), json!(true), json!(null), json!(0.5)] {
            assert_eq!(err(&with("v", bad)), "v must be 1");
        }
        assert_eq!(err(&without("v")), "v must be 1");
    }

    #[test]
    fn device_bounds_and_alphabet() {
        let msg = "device must be 16 to 512 hex characters";
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
        let e = parse(&with("suite", json!(null)), CAP).unwrap();
        assert_eq!(e.suite, "x25519");
        assert_eq!(
            parse(&with("suite", json!("9-a")), CAP).unwrap().suite,
            "9-a"
        );
        for bad in ["", "-x", "X25519", "a".repeat(17).as_str(), "a_b"] {
            assert!(
                err(&with("suite", json!(bad))).starts_with("suite "),
                "{bad}"
            );
        }
        assert!(err(&with("suite", json!(1))).starts_with("suite "));
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
            "ciphertext is shorter than 68 characters"
        );
        for bad in [
            format!("{}A", "A".repeat(68)),
            format!("{}-", "A".repeat(71)),
            format!("{}===", "A".repeat(69)),
            format!("{}=A", "A".repeat(70)),
        ] {
            assert_eq!(
                err(&with("ciphertext", json!(bad))),
                "ciphertext must be standard base64 with padding"
            );
        }
        assert!(parse(
            &with("ciphertext", json!(format!("{}==", "A".repeat(70)))),
            CAP
        )
        .is_ok());
        for bad in [json!(""), json!(null), json!(5)] {
            assert!(err(&with("ciphertext", bad)).starts_with("ciphertext "));
        }
        assert!(err(&without("ciphertext")).starts_with("ciphertext "));
    }

    #[test]
    fn xwing_needs_a_longer_ciphertext() {
        let mut v = good();
        v["suite"] = json!("xwing");
        v["ciphertext"] = json!("A".repeat(1516));
        assert_eq!(
            err(&serde_json::to_vec(&v).unwrap()),
            "ciphertext is shorter than 1520 characters"
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
        let pmsg = "priority must be time-sensitive or passive";
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
        assert_eq!(err(&serde_json::to_vec(&v).unwrap()), "v must be 1");
        let mut v = good();
        v["collapseId"] = json!("bad");
        v["priority"] = json!("bad");
        assert!(err(&serde_json::to_vec(&v).unwrap()).starts_with("collapseId"));
        assert!(parse(&with("somethingNew", json!({"x": [1, 2]})), CAP).is_ok());
    }

    #[test]
    fn tokens_never_print() {
        let t = DeviceToken::parse("abcdef0123456789abcdef0123456789").unwrap();
        assert_eq!(format!("{t}").len(), 8);
        assert!(!format!("{t:?}").contains("abcdef0123"));
        assert_eq!(t.store_key().len(), 32);
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
