//! The `POST /v2/pushes` body: parsed once, strictly, into a typed [`SignedPush`] that also
//! carries the bytes its signature covers.
//!
//! # What is checked, in this order (the first failing check answers)
//!
//! Every failure is 400 `invalid_request`; [`RequestError::path`] names the member and
//! [`RequestError::message`] is the short text for the error envelope. `<i>` is a target's
//! index, `<cap>` the configured ciphertext cap.
//!
//! 0. The body size (at most [`MAX_BODY_BYTES`]) is the handler's check, made before this
//!    parse and answered 413 `too_large`.
//! 1. The body is JSON (UTF-8, one value, nothing after it but whitespace, nesting at most
//!    128 deep, no lone surrogate, no number outside the double range):
//!    `body is not valid JSON`.
//! 2. That value is an object: `body must be a JSON object`.
//! 3. No object anywhere in the body names a member twice: `duplicate member <path>`,
//!    for the first repeated name in document order (for example
//!    `duplicate member targets[0].device`).
//! 4. No top-level member outside the schema: `unknown member <name>` for the first one in
//!    document order (`expectedFrontier` gets `unknown member expectedFrontier` like any
//!    other).
//! 5. The members, in the order of `SIGNED.md`'s example. A required member that is absent
//!    answers `missing member <path>`; `null` is a value like any other, so it fails the
//!    member's type (an optional member is omitted, never `null`).
//!    - `schemaVersion`: the string `"2"`: `schemaVersion must be the string "2"`.
//!    - `requestId`: a UUID as 8-4-4-4-12 lowercase hex: `requestId must be a lowercase UUID`.
//!    - `topic` (optional): a string, `topic must be a string`; 1 to 255 characters, none of
//!      them whitespace or a control character:
//!      `topic must be 1 to 255 characters without whitespace`.
//!    - `targets`: an array of 1 to 100: `targets must be an array of 1 to 100 targets`;
//!      then each target in index order, each completely before the next:
//!      - an object: `targets[<i>] must be an object`;
//!      - no member but `device`, `suite`, `ciphertext`: `unknown member targets[<i>].<name>`
//!        (first in document order);
//!      - `device`: 16 to 512 hex characters (lowercased for use):
//!        `targets[<i>].device must be a hex APNs device token`;
//!      - `suite` (optional, default `x25519`): `targets[<i>].suite must be a string`, then
//!        1 to 16 of `[a-z0-9-]` starting with a letter or digit:
//!        `targets[<i>].suite is not a valid suite identifier`;
//!      - `ciphertext`: a non-empty string, `targets[<i>].ciphertext is required`; at most
//!        `<cap>` characters, `targets[<i>].ciphertext exceeds <cap> characters`; standard
//!        base64 with padding, length a multiple of 4 (alphabet, padding and length; not
//!        decoded) and at least 68 characters (1520 for suite `xwing`):
//!        `targets[<i>].ciphertext is not a base64 sealed box`;
//!
//!      then the devices (lowercased) are distinct: for the first device that repeats an
//!      earlier one, path `targets[<i>].device`,
//!      `targets must name distinct devices: targets[<i>].device repeats targets[<j>].device`.
//!    - `collapseId`: 32 lowercase hex: `collapseId must be 32 lowercase hex characters`.
//!    - `flapId` (optional): `flapId must be 32 lowercase hex characters`.
//!    - `priority`: `priority must be "time-sensitive" or "passive"`.
//!    - `event`: `event must be a boolean`.
//!    - `issuedAtMs`: a JSON integer (written without fraction or exponent, so `1.0`,
//!      `1e3` and `-0` are refused) from 0 to 2^53:
//!      `issuedAtMs must be an integer from 0 to 9007199254740992`.
//!    - `signerKeyId`: `ed25519:` then 1 to 64 of `[A-Za-z0-9._-]`:
//!      `signerKeyId must be "ed25519:" and 1 to 64 of [A-Za-z0-9._-]`.
//!    - `signature`: a string: `signature must be a string`. Its content is not judged
//!      here: a signature that is not 64 bytes of unpadded base64url is 401 `bad_signature`
//!      ([`super::sig::decode_signature`]), answered where the signature is verified.
//!
//! Messages name members, never values: no token, ciphertext or other sent text is
//! echoed. A member name in a message is written as is when it is 1 to 64 of
//! `[A-Za-z0-9_-]`, else as a JSON string of its first 32 characters (`…` when cut), in
//! brackets (`unknown member ["a b"]`).
//!
//! # The signed message
//!
//! RFC 8785 canonical JSON of the request object as received, with the `signature`
//! member removed ([`SignedPush::signing_bytes`]); the canonical payload hash is SHA-256
//! of those bytes ([`SignedPush::canonical_hash`]). Both are computed from the parsed JSON
//! value, never from the typed fields, so an upper-case device token or an escaped
//! character is signed exactly as the signer wrote it.
//!
//! The parse is pure (no I/O, no clock) and has no panicking path: every input either
//! yields a [`SignedPush`] or a [`RequestError`].

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

mod error;
mod strict;

pub use error::RequestError;
use strict::{member_path, parse_strict};

use super::canonical;
use crate::delivery::alert::{
    check_ciphertext, is_id32, is_suite, Alert, CiphertextError, Id32, Priority, DEFAULT_SUITE,
};
use crate::device::DeviceToken;

/// The largest `/v2/pushes` body, in bytes (declared or actual); over it is 413
/// `too_large`, checked by the handler before [`SignedPush::parse`].
pub const MAX_BODY_BYTES: usize = 512 * 1024;

/// The one `schemaVersion` this parser reads.
pub const SCHEMA_VERSION: &str = "2";

/// At most this many targets in one request.
pub const MAX_TARGETS: usize = 100;

/// The largest `issuedAtMs` (2^53, the last integer every JSON reader holds exactly).
pub const MAX_ISSUED_AT_MS: u64 = 1 << 53;

/// At most this many characters in `topic`.
pub const MAX_TOPIC_CHARS: usize = 255;

/// The top-level members, in the order they are checked.
const MEMBERS: [&str; 11] = [
    "schemaVersion",
    "requestId",
    "topic",
    "targets",
    "collapseId",
    "flapId",
    "priority",
    "event",
    "issuedAtMs",
    "signerKeyId",
    "signature",
];

/// A target's members, in the order they are checked.
const TARGET_MEMBERS: [&str; 3] = ["device", "suite", "ciphertext"];

/// One validated target.
///
/// `Debug` shows the device only as the first 8 hex characters of SHA-256 of its token and
/// the ciphertext only by length, so a target cannot reach a log line whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    device: DeviceToken,
    suite: String,
    ciphertext: String,
}

impl Target {
    /// The first 16 hex characters of SHA-256 of the token: how a receipt names the target.
    pub fn receipt_key(&self) -> String {
        self.device.hash16()
    }

    /// The first 8 hex characters of SHA-256 of the token: how logs name the device.
    pub fn hash8(&self) -> String {
        self.device.hash8()
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("device", &self.hash8())
            .field("suite", &self.suite)
            .field("ciphertext_chars", &self.ciphertext.len())
            .finish()
    }
}

/// One validated `POST /v2/pushes` request.
///
/// Read-only: the typed fields and the signed bytes come from one parse and cannot drift
/// apart. `Debug` leaves out tokens, ciphertexts, the signed bytes (which hold both) and
/// shows ids as their first 8 characters.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedPush {
    request_id: String,
    topic: Option<String>,
    targets: Vec<Target>,
    collapse_id: Id32,
    flap_id: Option<Id32>,
    priority: Priority,
    event: bool,
    issued_at_ms: u64,
    signer_key_id: String,
    signature: String,
    signing_bytes: Vec<u8>,
    canonical_hash: String,
}

impl fmt::Debug for SignedPush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignedPush")
            .field("request_id", &self.request_id)
            .field("topic", &self.topic)
            .field("targets", &self.targets)
            .field("collapse_id", &self.collapse_id)
            .field("flap_id", &self.flap_id)
            .field("priority", &self.priority)
            .field("event", &self.event)
            .field("issued_at_ms", &self.issued_at_ms)
            .field("signer_key_id", &self.signer_key_id)
            .field("canonical_hash", &self.canonical_hash)
            .finish_non_exhaustive()
    }
}

impl SignedPush {
    /// Parses and validates one request body (see the module documentation for the order
    /// of checks and their texts). `max_ciphertext_chars` is the configured cap.
    pub fn parse(body: &[u8], max_ciphertext_chars: usize) -> Result<Self, RequestError> {
        validate(parse_strict(body)?, max_ciphertext_chars)
    }

    /// `requestId`: a lowercase UUID, also the push id.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// `topic` when the request names one (else the relay's `APNS_TOPIC` applies).
    pub fn topic(&self) -> Option<&str> {
        self.topic.as_deref()
    }

    /// The targets in request order, 1 to 100, devices distinct.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Target `i` as the alert the delivery core takes (each target follows v1's rules).
    pub fn alert(&self, i: usize) -> Alert {
        let t = &self.targets[i];
        Alert {
            device: t.device.clone(),
            suite: t.suite.clone(),
            ciphertext: t.ciphertext.clone(),
            collapse_id: self.collapse_id.clone(),
            flap_id: self.flap_id.clone(),
            priority: self.priority,
            event: self.event,
        }
    }

    /// `issuedAtMs`, milliseconds since the Unix epoch, at most 2^53.
    pub fn issued_at_ms(&self) -> u64 {
        self.issued_at_ms
    }

    /// `signerKeyId`, `ed25519:<name>`.
    pub fn signer_key_id(&self) -> &str {
        &self.signer_key_id
    }

    /// `signature` as sent, not yet decoded (see [`super::sig::decode_signature`]).
    pub fn signature(&self) -> &str {
        &self.signature
    }

    /// The RFC 8785 bytes of the request without `signature`: what the signature covers.
    /// They hold tokens and ciphertexts: never log them.
    pub fn signing_bytes(&self) -> &[u8] {
        &self.signing_bytes
    }

    /// `sha256:<64 hex>` of [`SignedPush::signing_bytes`], stored with the push and
    /// compared when a `requestId` comes again.
    pub fn canonical_hash(&self) -> &str {
        &self.canonical_hash
    }
}

// ---------------------------------------------------------------------------------------
// Steps 4-5: the schema.

fn invalid(path: &str, rule: &str) -> RequestError {
    RequestError::new(path, format!("{path} {rule}"))
}

fn first_unknown(
    object: &Map<String, Value>,
    known: &[&str],
    parent: &str,
) -> Result<(), RequestError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(name) => {
            let path = member_path(parent, name);
            Err(RequestError::new(
                path.clone(),
                format!("unknown member {path}"),
            ))
        }
        None => Ok(()),
    }
}

fn required<'v>(
    object: &'v Map<String, Value>,
    name: &str,
    parent: &str,
) -> Result<&'v Value, RequestError> {
    object.get(name).ok_or_else(|| {
        let path = member_path(parent, name);
        RequestError::new(path.clone(), format!("missing member {path}"))
    })
}

/// A UUID in lowercase 8-4-4-4-12 form: the `requestId` rule.
pub fn is_request_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => matches!(c, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// The `topic` rule: 1 to 255 characters, none whitespace or a control character. The
/// admin API should hold a signer's topic list to the same rule.
pub fn is_valid_topic(s: &str) -> bool {
    is_topic(s)
}

fn is_topic(s: &str) -> bool {
    let n = s.chars().count();
    (1..=MAX_TOPIC_CHARS).contains(&n) && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `ed25519:` then 1 to 64 of `[A-Za-z0-9._-]` (also the read `Authorization` `keyId`).
pub(crate) fn is_signer_key_id(s: &str) -> bool {
    match s.strip_prefix("ed25519:") {
        Some(name) => {
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        None => false,
    }
}

fn target(value: &Value, index: usize, cap: usize) -> Result<Target, RequestError> {
    let path = format!("targets[{index}]");
    let Value::Object(object) = value else {
        return Err(invalid(&path, "must be an object"));
    };
    first_unknown(object, &TARGET_MEMBERS, &path)?;

    let device_path = format!("{path}.device");
    let device = match required(object, "device", &path)? {
        Value::String(s) => DeviceToken::parse(s),
        _ => None,
    }
    .ok_or_else(|| invalid(&device_path, "must be a hex APNs device token"))?;

    let suite_path = format!("{path}.suite");
    let suite = match object.get("suite") {
        None => DEFAULT_SUITE.to_owned(),
        Some(Value::String(s)) if is_suite(s) => s.clone(),
        Some(Value::String(_)) => {
            return Err(invalid(&suite_path, "is not a valid suite identifier"))
        }
        Some(_) => return Err(invalid(&suite_path, "must be a string")),
    };

    let ct_path = format!("{path}.ciphertext");
    let ciphertext = match required(object, "ciphertext", &path)? {
        Value::String(s) if !s.is_empty() => s,
        _ => return Err(invalid(&ct_path, "is required")),
    };
    match check_ciphertext(ciphertext, &suite, cap) {
        Ok(()) => {}
        Err(CiphertextError::TooLong) => {
            return Err(invalid(&ct_path, &format!("exceeds {cap} characters")))
        }
        Err(CiphertextError::NotSealedBox) => {
            return Err(invalid(&ct_path, "is not a base64 sealed box"))
        }
    }

    Ok(Target {
        device,
        suite,
        ciphertext: ciphertext.clone(),
    })
}

fn validate(mut object: Map<String, Value>, cap: usize) -> Result<SignedPush, RequestError> {
    first_unknown(&object, &MEMBERS, "")?;

    match required(&object, "schemaVersion", "")? {
        Value::String(s) if s == SCHEMA_VERSION => {}
        _ => return Err(invalid("schemaVersion", "must be the string \"2\"")),
    }

    let request_id = match required(&object, "requestId", "")? {
        Value::String(s) if is_request_id(s) => s.clone(),
        _ => return Err(invalid("requestId", "must be a lowercase UUID")),
    };

    let topic = match object.get("topic") {
        None => None,
        Some(Value::String(s)) if is_topic(s) => Some(s.clone()),
        Some(Value::String(_)) => {
            return Err(invalid(
                "topic",
                "must be 1 to 255 characters without whitespace",
            ))
        }
        Some(_) => return Err(invalid("topic", "must be a string")),
    };

    let targets = match required(&object, "targets", "")? {
        Value::Array(items) if (1..=MAX_TARGETS).contains(&items.len()) => items
            .iter()
            .enumerate()
            .map(|(i, item)| target(item, i, cap))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(invalid("targets", "must be an array of 1 to 100 targets")),
    };
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        if let Some(j) = seen.insert(t.device.expose(), i) {
            return Err(RequestError::new(
                format!("targets[{i}].device"),
                format!("targets must name distinct devices: targets[{i}].device repeats targets[{j}].device"),
            ));
        }
    }

    let collapse_id = match required(&object, "collapseId", "")? {
        Value::String(s) => Id32::parse(s),
        _ => None,
    }
    .ok_or_else(|| invalid("collapseId", "must be 32 lowercase hex characters"))?;

    let flap_id = match object.get("flapId") {
        None => None,
        Some(Value::String(s)) if is_id32(s) => Id32::parse(s),
        Some(_) => return Err(invalid("flapId", "must be 32 lowercase hex characters")),
    };

    let priority = match required(&object, "priority", "")? {
        Value::String(s) => Priority::parse(s),
        _ => None,
    }
    .ok_or_else(|| invalid("priority", "must be \"time-sensitive\" or \"passive\""))?;

    let event = match required(&object, "event", "")? {
        Value::Bool(b) => *b,
        _ => return Err(invalid("event", "must be a boolean")),
    };

    let issued_at_ms = match required(&object, "issuedAtMs", "")?.as_u64() {
        Some(n) if n <= MAX_ISSUED_AT_MS => n,
        _ => {
            return Err(invalid(
                "issuedAtMs",
                "must be an integer from 0 to 9007199254740992",
            ))
        }
    };

    let signer_key_id = match required(&object, "signerKeyId", "")? {
        Value::String(s) if is_signer_key_id(s) => s.clone(),
        _ => {
            return Err(invalid(
                "signerKeyId",
                "must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]",
            ))
        }
    };

    required(&object, "signature", "")?;
    let signature = match object.shift_remove("signature") {
        Some(Value::String(s)) => s,
        _ => return Err(invalid("signature", "must be a string")),
    };

    // Every remaining member is a string, a boolean, an integer of at most 2^53, or an
    // array of objects of strings, so this cannot fail; the error arm is for form.
    let signing_bytes = canonical::try_canonical_bytes(&Value::Object(object))
        .map_err(|_| RequestError::body("body is not valid JSON"))?;
    let canonical_hash = canonical::payload_hash(&signing_bytes);

    Ok(SignedPush {
        request_id,
        topic,
        targets,
        collapse_id,
        flap_id,
        priority,
        event,
        issued_at_ms,
        signer_key_id,
        signature,
        signing_bytes,
        canonical_hash,
    })
}

#[cfg(test)]
mod tests;
