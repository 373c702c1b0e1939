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

use std::fmt;

use serde_json::{Map, Value};

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
        .all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
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
pub fn parse(body: &[u8], max_ciphertext_chars: usize) -> Result<Envelope, EnvelopeError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| EnvelopeError::new("body is not a JSON object"))?;
    let Value::Object(map) = value else {
        return Err(EnvelopeError::new("body is not a JSON object"));
    };
    from_map(&map, max_ciphertext_chars)
}

fn string_field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    map.get(name).and_then(Value::as_str)
}

fn from_map(map: &Map<String, Value>, max_chars: usize) -> Result<Envelope, EnvelopeError> {
    if map.get("v").and_then(Value::as_f64) != Some(1.0) {
        return Err(EnvelopeError::new("v must be 1"));
    }

    let device = string_field(map, "device")
        .and_then(DeviceToken::parse)
        .ok_or_else(|| EnvelopeError::new("device must be 16 to 512 hex characters"))?;

    let suite = match map.get("suite") {
        None | Some(Value::Null) => DEFAULT_SUITE.to_owned(),
        Some(Value::String(s)) if is_suite(s) => s.clone(),
        Some(_) => {
            return Err(EnvelopeError::new(
                "suite must be 1 to 16 of [a-z0-9-] starting with a letter or digit",
            ))
        }
    };

    let ciphertext = match string_field(map, "ciphertext") {
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

    let collapse_id = string_field(map, "collapseId")
        .and_then(Id32::parse)
        .ok_or_else(|| EnvelopeError::new("collapseId must be 32 lowercase hex characters"))?;

    let flap_id = match map.get("flapId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if is_id32(s) => Some(Id32(s.clone())),
        Some(_) => {
            return Err(EnvelopeError::new(
                "flapId must be 32 lowercase hex characters",
            ))
        }
    };

    let priority = match string_field(map, "priority") {
        Some("time-sensitive") => Priority::TimeSensitive,
        Some("passive") => Priority::Passive,
        _ => {
            return Err(EnvelopeError::new(
                "priority must be time-sensitive or passive",
            ))
        }
    };

    let event = map
        .get("event")
        .and_then(Value::as_bool)
        .ok_or_else(|| EnvelopeError::new("event must be a boolean"))?;

    Ok(Envelope {
        device,
        suite,
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
    use serde_json::json;

    const CAP: usize = DEFAULT_MAX_CIPHERTEXT_CHARS;

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
