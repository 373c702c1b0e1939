//! Tests for `signed::request`: one case per rule and message, the order of checks, and
//! property tests (no panics, stable re-validation, order- and whitespace-blind hashes).

use super::*;
use crate_canonical::tests::{arb_value, write_scrambled, Choices};
use proptest::prelude::*;
use serde_json::json;

use super::super::canonical as crate_canonical;
use super::super::error::ApiError;

impl RequestError {
    /// The member the error is about (`targets[3].ciphertext`), empty for the body itself.
    pub(super) fn path(&self) -> &str {
        &self.path
    }
}

const CAP: usize = crate::delivery::alert::DEFAULT_MAX_CIPHERTEXT_CHARS;
const DEVICE: &str = "ABCDEF0123456789abcdef0123456789";
const DEVICE2: &str = "00112233445566778899aabbccddeeff";

fn ct(n: usize) -> String {
    "A".repeat(n)
}

fn good() -> Value {
    json!({
        "schemaVersion": "2",
        "requestId": "2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c",
        "topic": "com.example.cronstable",
        "targets": [{"device": DEVICE, "suite": "x25519", "ciphertext": ct(68)}],
        "collapseId": "93bc5d02dc2a24b5365347573b6f5115",
        "flapId": "0123456789abcdef0123456789abcdef",
        "priority": "time-sensitive",
        "event": false,
        "issuedAtMs": 1767225600000u64,
        "signerKeyId": "ed25519:ops-eu-1",
        "signature": "A".repeat(86),
    })
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// `good()` with the member at a JSON pointer set (created if absent).
fn with(pointer: &str, value: Value) -> Value {
    let mut v = good();
    let (parent, name) = pointer.rsplit_once('/').unwrap();
    let target = v.pointer_mut(parent).unwrap();
    match target {
        Value::Object(m) => {
            m.insert(name.to_owned(), value);
        }
        Value::Array(a) => a[name.parse::<usize>().unwrap()] = value,
        _ => panic!("bad pointer"),
    }
    v
}

/// `good()` without the member at a JSON pointer.
fn without(pointer: &str) -> Value {
    let mut v = good();
    let (parent, name) = pointer.rsplit_once('/').unwrap();
    v.pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .shift_remove(name);
    v
}

fn parse(body: &[u8]) -> Result<SignedPush, RequestError> {
    SignedPush::parse(body, CAP)
}

fn err_of(body: &[u8]) -> (String, String) {
    let e = parse(body).expect_err("expected a refusal");
    (e.path().to_owned(), e.message().to_owned())
}

#[track_caller]
fn refused(body: &[u8], path: &str, message: &str) {
    let (p, m) = err_of(body);
    assert_eq!((p.as_str(), m.as_str()), (path, message));
}

#[track_caller]
fn accepted(body: &[u8]) -> SignedPush {
    match parse(body) {
        Ok(p) => p,
        Err(e) => panic!("refused: {} ({})", e.message(), e.path()),
    }
}

#[test]
fn accepts_the_contract_example() {
    let p = accepted(&bytes(&good()));
    assert_eq!(p.request_id(), "2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c");
    assert_eq!(p.topic(), Some("com.example.cronstable"));
    assert_eq!(p.targets().len(), 1);
    // As the delivery core receives it.
    let a = p.alert(0);
    assert_eq!(a.device.expose(), DEVICE.to_ascii_lowercase());
    assert_eq!(a.suite, "x25519");
    assert_eq!(a.ciphertext, ct(68));
    assert_eq!(a.collapse_id.as_str(), "93bc5d02dc2a24b5365347573b6f5115");
    assert_eq!(
        a.flap_id.as_ref().map(Id32::as_str),
        Some("0123456789abcdef0123456789abcdef")
    );
    assert_eq!(a.flap_key(), "0123456789abcdef0123456789abcdef");
    assert_eq!(a.priority, Priority::TimeSensitive);
    assert_eq!(a.priority.as_str(), "time-sensitive");
    assert!(!a.event);
    assert_eq!(p.issued_at_ms(), 1767225600000);
    assert_eq!(p.signer_key_id(), "ed25519:ops-eu-1");
    assert_eq!(p.signature(), "A".repeat(86));
    assert_eq!(MAX_BODY_BYTES, 524_288);
}

#[test]
fn optional_members_may_be_omitted() {
    let mut v = without("/topic");
    v.as_object_mut().unwrap().shift_remove("flapId");
    v["targets"][0]
        .as_object_mut()
        .unwrap()
        .shift_remove("suite");
    v["priority"] = json!("passive");
    v["event"] = json!(true);
    let p = accepted(&bytes(&v));
    assert_eq!(p.topic(), None);
    let a = p.alert(0);
    assert_eq!(a.flap_id, None);
    assert_eq!(a.flap_key(), a.collapse_id.as_str());
    assert_eq!(a.suite, DEFAULT_SUITE);
    assert_eq!(a.priority, Priority::Passive);
    assert!(a.event);
}

#[test]
fn signing_bytes_are_the_canonical_request_without_signature() {
    let v = good();
    let p = accepted(&bytes(&v));
    let mut unsigned = v.as_object().unwrap().clone();
    unsigned.shift_remove("signature");
    let expected = crate_canonical::canonical_bytes(&Value::Object(unsigned));
    assert_eq!(p.signing_bytes(), expected.as_slice());
    assert_eq!(p.canonical_hash(), crate_canonical::payload_hash(&expected));
    let text = std::str::from_utf8(p.signing_bytes()).unwrap();
    assert!(text
        .starts_with(r#"{"collapseId":"93bc5d02dc2a24b5365347573b6f5115","event":false,"flapId""#));
    assert!(!text.contains("signature"));
    // Signed as sent: the upper-case token, not the lowercased typed one.
    assert!(text.contains(DEVICE));
    // The signature is not part of the hash.
    let other = accepted(&bytes(&with("/signature", json!("B".repeat(86)))));
    assert_eq!(other.canonical_hash(), p.canonical_hash());
    // Anything else is.
    let other = accepted(&bytes(&with("/event", json!(true))));
    assert_ne!(other.canonical_hash(), p.canonical_hash());
    // Escapes in the body do not change the hash: "\u0041" is "A".
    let raw = String::from_utf8(bytes(&v)).unwrap().replacen(
        "ed25519:ops-eu-1",
        "ed25519:ops\\u002deu\\u002d1",
        1,
    );
    assert_eq!(
        accepted(raw.as_bytes()).canonical_hash(),
        p.canonical_hash()
    );
}

#[test]
fn debug_never_prints_tokens_or_ciphertexts() {
    let mut v = good();
    v["targets"][0]["ciphertext"] = json!(format!("{}QUJD", "Zm9v".repeat(17)));
    let p = accepted(&bytes(&v));
    let shown = format!("{p:?} {:?}", p.targets());
    assert!(!shown
        .to_ascii_lowercase()
        .contains(&DEVICE.to_ascii_lowercase()));
    assert!(!shown.contains("Zm9vZm9v"));
    assert!(!shown.contains("93bc5d02dc2a24b5365347573b6f5115"));
    assert!(shown.contains(&p.targets()[0].hash8()));
    assert_eq!(p.targets()[0].receipt_key().len(), 16);
    assert!(p.targets()[0]
        .receipt_key()
        .starts_with(&p.targets()[0].hash8()));
}

/// A row of the rule table: its name, the body, and the path and message the parser gives.
struct Case<'a> {
    name: String,
    body: Vec<u8>,
    path: &'a str,
    message: String,
}

/// A row as written in the table: the body, the path, the message.
type Row<'a> = (Vec<u8>, &'a str, String);

/// One case per rule: the body, the path, the message; a failure names its case.
#[test]
fn every_rule_and_its_message() {
    let long_name = "n".repeat(70);
    let hex513 = "a".repeat(513);
    let groups: Vec<(&str, Vec<Row>)> = vec![
        // 1. JSON
        (
            "JSON",
            vec![
                (b"".to_vec(), "", "body is not valid JSON".into()),
                (b"{".to_vec(), "", "body is not valid JSON".into()),
                (b"{} {}".to_vec(), "", "body is not valid JSON".into()),
                (
                    b"\xef\xbb\xbf{}".to_vec(),
                    "",
                    "body is not valid JSON".into(),
                ),
                (
                    b"{\"a\":\"\xff\"}".to_vec(),
                    "",
                    "body is not valid JSON".into(),
                ),
                (
                    br#"{"a":"\ud800"}"#.to_vec(),
                    "",
                    "body is not valid JSON".into(),
                ),
                (
                    br#"{"issuedAtMs":1e400}"#.to_vec(),
                    "",
                    "body is not valid JSON".into(),
                ),
                (
                    format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200)).into_bytes(),
                    "",
                    "body is not valid JSON".into(),
                ),
            ],
        ),
        // object
        (
            "object",
            vec![
                (b"[]".to_vec(), "", "body must be a JSON object".into()),
                (b"null".to_vec(), "", "body must be a JSON object".into()),
                (b"\"x\"".to_vec(), "", "body must be a JSON object".into()),
                (b" 2 ".to_vec(), "", "body must be a JSON object".into()),
            ],
        ),
        // duplicates
        (
            "duplicates",
            vec![
                (
                    br#"{"requestId":"a","requestId":"b"}"#.to_vec(),
                    "requestId",
                    "duplicate member requestId".into(),
                ),
                (
                    br#"{"targets":[{"device":"a","device":"b"}]}"#.to_vec(),
                    "targets[0].device",
                    "duplicate member targets[0].device".into(),
                ),
            ],
        ),
        // unknown members
        (
            "unknown members",
            vec![
                (
                    bytes(&with("/expectedFrontier", json!({}))),
                    "expectedFrontier",
                    "unknown member expectedFrontier".into(),
                ),
                (bytes(&with("/v", json!(1))), "v", "unknown member v".into()),
                (
                    bytes(&with("/a b", json!(1))),
                    "[\"a b\"]",
                    "unknown member [\"a b\"]".into(),
                ),
                (
                    bytes(&with(&format!("/{long_name}"), json!(1))),
                    "[\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn…\"]",
                    "unknown member [\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn…\"]".into(),
                ),
            ],
        ),
        // schemaVersion
        (
            "schemaVersion",
            vec![
                (
                    bytes(&without("/schemaVersion")),
                    "schemaVersion",
                    "missing member schemaVersion".into(),
                ),
                (
                    bytes(&with("/schemaVersion", json!(2))),
                    "schemaVersion",
                    "schemaVersion must be the string \"2\"".into(),
                ),
                (
                    bytes(&with("/schemaVersion", json!("1"))),
                    "schemaVersion",
                    "schemaVersion must be the string \"2\"".into(),
                ),
                (
                    bytes(&with("/schemaVersion", json!(null))),
                    "schemaVersion",
                    "schemaVersion must be the string \"2\"".into(),
                ),
            ],
        ),
        // requestId
        (
            "requestId",
            vec![
                (
                    bytes(&without("/requestId")),
                    "requestId",
                    "missing member requestId".into(),
                ),
                (
                    bytes(&with(
                        "/requestId",
                        json!("2F0C3A8E-0D5B-4F7E-9C1A-6B2D8E4F1A3C"),
                    )),
                    "requestId",
                    "requestId must be a lowercase UUID".into(),
                ),
                (
                    bytes(&with(
                        "/requestId",
                        json!("2f0c3a8e0d5b4f7e9c1a6b2d8e4f1a3c"),
                    )),
                    "requestId",
                    "requestId must be a lowercase UUID".into(),
                ),
                (
                    bytes(&with(
                        "/requestId",
                        json!("{2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c}"),
                    )),
                    "requestId",
                    "requestId must be a lowercase UUID".into(),
                ),
                (
                    bytes(&with(
                        "/requestId",
                        json!("2f0c3a8e-0d5b-4f7e-9c1a6-b2d8e4f1a3c"),
                    )),
                    "requestId",
                    "requestId must be a lowercase UUID".into(),
                ),
                (
                    bytes(&with("/requestId", json!(7))),
                    "requestId",
                    "requestId must be a lowercase UUID".into(),
                ),
            ],
        ),
        // topic
        (
            "topic",
            vec![
                (
                    bytes(&with("/topic", json!(null))),
                    "topic",
                    "topic must be a string".into(),
                ),
                (
                    bytes(&with("/topic", json!(["a"]))),
                    "topic",
                    "topic must be a string".into(),
                ),
                (
                    bytes(&with("/topic", json!(""))),
                    "topic",
                    "topic must be 1 to 255 characters without whitespace".into(),
                ),
                (
                    bytes(&with("/topic", json!("com.example app"))),
                    "topic",
                    "topic must be 1 to 255 characters without whitespace".into(),
                ),
                (
                    bytes(&with("/topic", json!("com.example\u{a0}app"))),
                    "topic",
                    "topic must be 1 to 255 characters without whitespace".into(),
                ),
                (
                    bytes(&with("/topic", json!("com.example\u{0}"))),
                    "topic",
                    "topic must be 1 to 255 characters without whitespace".into(),
                ),
                (
                    bytes(&with("/topic", json!("é".repeat(256)))),
                    "topic",
                    "topic must be 1 to 255 characters without whitespace".into(),
                ),
            ],
        ),
        // targets
        (
            "targets",
            vec![
        (
            bytes(&without("/targets")),
            "targets",
            "missing member targets".into(),
        ),
        (
            bytes(&with("/targets", json!({}))),
            "targets",
            "targets must be an array of 1 to 100 targets".into(),
        ),
        (
            bytes(&with("/targets", json!([]))),
            "targets",
            "targets must be an array of 1 to 100 targets".into(),
        ),
        (
            bytes(&with("/targets", json!(null))),
            "targets",
            "targets must be an array of 1 to 100 targets".into(),
        ),
        (
            bytes(&with(
                "/targets",
                Value::Array(
                    (0..101)
                        .map(|i| json!({"device": format!("{i:032x}"), "ciphertext": ct(68)}))
                        .collect(),
                ),
            )),
            "targets",
            "targets must be an array of 1 to 100 targets".into(),
        ),
        (
            bytes(&with("/targets/0", json!(5))),
            "targets[0]",
            "targets[0] must be an object".into(),
        ),
        (
            bytes(&with("/targets/0", json!(null))),
            "targets[0]",
            "targets[0] must be an object".into(),
        ),
        (
            bytes(&with("/targets/0/extra", json!(1))),
            "targets[0].extra",
            "unknown member targets[0].extra".into(),
        ),
        (
            bytes(&with("/targets/0/flapId", json!(1))),
            "targets[0].flapId",
            "unknown member targets[0].flapId".into(),
        ),
        ],
        ),
        // device
        (
            "device",
            vec![
                (
                    bytes(&without("/targets/0/device")),
                    "targets[0].device",
                    "missing member targets[0].device".into(),
                ),
                (
                    bytes(&with("/targets/0/device", json!("0123456789abcde"))),
                    "targets[0].device",
                    "targets[0].device must be a hex APNs device token".into(),
                ),
                (
                    bytes(&with("/targets/0/device", json!(hex513))),
                    "targets[0].device",
                    "targets[0].device must be a hex APNs device token".into(),
                ),
                (
                    bytes(&with("/targets/0/device", json!("0123456789abcdeg"))),
                    "targets[0].device",
                    "targets[0].device must be a hex APNs device token".into(),
                ),
                (
                    bytes(&with("/targets/0/device", json!("0123456789abcde "))),
                    "targets[0].device",
                    "targets[0].device must be a hex APNs device token".into(),
                ),
                (
                    bytes(&with("/targets/0/device", json!(12345678901234567u64))),
                    "targets[0].device",
                    "targets[0].device must be a hex APNs device token".into(),
                ),
                (
                    bytes(&with("/targets/0/device", json!(null))),
                    "targets[0].device",
                    "targets[0].device must be a hex APNs device token".into(),
                ),
            ],
        ),
        // suite
        (
            "suite",
            vec![
                (
                    bytes(&with("/targets/0/suite", json!(null))),
                    "targets[0].suite",
                    "targets[0].suite must be a string".into(),
                ),
                (
                    bytes(&with("/targets/0/suite", json!(1))),
                    "targets[0].suite",
                    "targets[0].suite must be a string".into(),
                ),
                (
                    bytes(&with("/targets/0/suite", json!(""))),
                    "targets[0].suite",
                    "targets[0].suite is not a valid suite identifier".into(),
                ),
                (
                    bytes(&with("/targets/0/suite", json!("-x"))),
                    "targets[0].suite",
                    "targets[0].suite is not a valid suite identifier".into(),
                ),
                (
                    bytes(&with("/targets/0/suite", json!("X25519"))),
                    "targets[0].suite",
                    "targets[0].suite is not a valid suite identifier".into(),
                ),
                (
                    bytes(&with("/targets/0/suite", json!("a".repeat(17)))),
                    "targets[0].suite",
                    "targets[0].suite is not a valid suite identifier".into(),
                ),
                (
                    bytes(&with("/targets/0/suite", json!("x_25519"))),
                    "targets[0].suite",
                    "targets[0].suite is not a valid suite identifier".into(),
                ),
            ],
        ),
        // ciphertext
        (
            "ciphertext",
            vec![
                (
                    bytes(&without("/targets/0/ciphertext")),
                    "targets[0].ciphertext",
                    "missing member targets[0].ciphertext".into(),
                ),
                (
                    bytes(&with("/targets/0/ciphertext", json!(""))),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is required".into(),
                ),
                (
                    bytes(&with("/targets/0/ciphertext", json!(null))),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is required".into(),
                ),
                (
                    bytes(&with("/targets/0/ciphertext", json!(5))),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is required".into(),
                ),
                (
                    bytes(&with("/targets/0/ciphertext", json!(ct(3804)))),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext exceeds 3800 characters".into(),
                ),
                (
                    bytes(&with("/targets/0/ciphertext", json!(ct(64)))),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is not a base64 sealed box".into(),
                ),
                (
                    bytes(&with("/targets/0/ciphertext", json!(ct(70)))),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is not a base64 sealed box".into(),
                ),
                (
                    bytes(&with(
                        "/targets/0/ciphertext",
                        json!(format!("{}-_==", ct(68))),
                    )),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is not a base64 sealed box".into(),
                ),
                (
                    bytes(&with(
                        "/targets/0/ciphertext",
                        json!(format!("{}A===", ct(68))),
                    )),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is not a base64 sealed box".into(),
                ),
                (
                    bytes(&with(
                        "/targets/0/ciphertext",
                        json!(format!("{} AAA", ct(68))),
                    )),
                    "targets[0].ciphertext",
                    "targets[0].ciphertext is not a base64 sealed box".into(),
                ),
            ],
        ),
        // distinct devices (case-insensitively)
        (
            "distinct devices (case-insensitively)",
            vec![(
                bytes(&with(
                    "/targets",
                    json!([
                        {"device": DEVICE2, "ciphertext": ct(68)},
                        {"device": DEVICE, "ciphertext": ct(68)},
                        {"device": DEVICE.to_ascii_lowercase(), "ciphertext": ct(72)},
                    ]),
                )),
                "targets[2].device",
                "targets must name distinct devices: targets[2].device repeats targets[1].device"
                    .into(),
            )],
        ),
        // collapseId
        (
            "collapseId",
            vec![
                (
                    bytes(&without("/collapseId")),
                    "collapseId",
                    "missing member collapseId".into(),
                ),
                (
                    bytes(&with(
                        "/collapseId",
                        json!("93BC5D02DC2A24B5365347573B6F5115"),
                    )),
                    "collapseId",
                    "collapseId must be 32 lowercase hex characters".into(),
                ),
                (
                    bytes(&with(
                        "/collapseId",
                        json!("93bc5d02dc2a24b5365347573b6f511"),
                    )),
                    "collapseId",
                    "collapseId must be 32 lowercase hex characters".into(),
                ),
                (
                    bytes(&with("/collapseId", json!(null))),
                    "collapseId",
                    "collapseId must be 32 lowercase hex characters".into(),
                ),
            ],
        ),
        // flapId
        (
            "flapId",
            vec![
                (
                    bytes(&with("/flapId", json!(null))),
                    "flapId",
                    "flapId must be 32 lowercase hex characters".into(),
                ),
                (
                    bytes(&with("/flapId", json!("0123456789ABCDEF0123456789ABCDEF"))),
                    "flapId",
                    "flapId must be 32 lowercase hex characters".into(),
                ),
                (
                    bytes(&with("/flapId", json!(""))),
                    "flapId",
                    "flapId must be 32 lowercase hex characters".into(),
                ),
            ],
        ),
        // priority
        (
            "priority",
            vec![
                (
                    bytes(&without("/priority")),
                    "priority",
                    "missing member priority".into(),
                ),
                (
                    bytes(&with("/priority", json!("high"))),
                    "priority",
                    "priority must be \"time-sensitive\" or \"passive\"".into(),
                ),
                (
                    bytes(&with("/priority", json!("Passive"))),
                    "priority",
                    "priority must be \"time-sensitive\" or \"passive\"".into(),
                ),
                (
                    bytes(&with("/priority", json!(10))),
                    "priority",
                    "priority must be \"time-sensitive\" or \"passive\"".into(),
                ),
            ],
        ),
        // event
        (
            "event",
            vec![
                (
                    bytes(&without("/event")),
                    "event",
                    "missing member event".into(),
                ),
                (
                    bytes(&with("/event", json!("false"))),
                    "event",
                    "event must be a boolean".into(),
                ),
                (
                    bytes(&with("/event", json!(0))),
                    "event",
                    "event must be a boolean".into(),
                ),
                (
                    bytes(&with("/event", json!(null))),
                    "event",
                    "event must be a boolean".into(),
                ),
            ],
        ),
        // issuedAtMs
        (
            "issuedAtMs",
            vec![
                (
                    bytes(&without("/issuedAtMs")),
                    "issuedAtMs",
                    "missing member issuedAtMs".into(),
                ),
                (
                    bytes(&with("/issuedAtMs", json!(-1))),
                    "issuedAtMs",
                    "issuedAtMs must be an integer from 0 to 9007199254740992".into(),
                ),
                (
                    bytes(&with("/issuedAtMs", json!(1.5))),
                    "issuedAtMs",
                    "issuedAtMs must be an integer from 0 to 9007199254740992".into(),
                ),
                (
                    bytes(&with("/issuedAtMs", json!("1767225600000"))),
                    "issuedAtMs",
                    "issuedAtMs must be an integer from 0 to 9007199254740992".into(),
                ),
                (
                    bytes(&with("/issuedAtMs", json!((1u64 << 53) + 1))),
                    "issuedAtMs",
                    "issuedAtMs must be an integer from 0 to 9007199254740992".into(),
                ),
                (
                    bytes(&with("/issuedAtMs", json!(null))),
                    "issuedAtMs",
                    "issuedAtMs must be an integer from 0 to 9007199254740992".into(),
                ),
            ],
        ),
        // signerKeyId
        (
            "signerKeyId",
            vec![
                (
                    bytes(&without("/signerKeyId")),
                    "signerKeyId",
                    "missing member signerKeyId".into(),
                ),
                (
                    bytes(&with("/signerKeyId", json!("ed25519:"))),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
                (
                    bytes(&with(
                        "/signerKeyId",
                        json!(format!("ed25519:{}", "a".repeat(65))),
                    )),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
                (
                    bytes(&with("/signerKeyId", json!("ops-eu-1"))),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
                (
                    bytes(&with("/signerKeyId", json!("Ed25519:ops"))),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
                (
                    bytes(&with("/signerKeyId", json!("ed25519:ops/eu"))),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
                (
                    bytes(&with("/signerKeyId", json!("ed25519:ops eu"))),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
                (
                    bytes(&with("/signerKeyId", json!(1))),
                    "signerKeyId",
                    "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]".into(),
                ),
            ],
        ),
        // signature (its content is the signature check's business)
        (
            "signature",
            vec![
                (
                    bytes(&without("/signature")),
                    "signature",
                    "missing member signature".into(),
                ),
                (
                    bytes(&with("/signature", json!(null))),
                    "signature",
                    "signature must be a string".into(),
                ),
                (
                    bytes(&with("/signature", json!([1]))),
                    "signature",
                    "signature must be a string".into(),
                ),
            ],
        ),
    ];
    // One named row per case: its rule's group and its place in it.
    let cases: Vec<Case> = groups
        .into_iter()
        .flat_map(|(group, rows)| {
            rows.into_iter()
                .enumerate()
                .map(move |(i, (body, path, message))| Case {
                    name: format!("{group} #{}", i + 1),
                    body,
                    path,
                    message,
                })
        })
        .collect();
    for c in &cases {
        let (p, m) = err_of(&c.body);
        assert_eq!(
            (p.as_str(), m.as_str()),
            (c.path, c.message.as_str()),
            "case {}, body: {}",
            c.name,
            String::from_utf8_lossy(&c.body[..c.body.len().min(200)])
        );
        let e = parse(&c.body).unwrap_err();
        // As the push handler answers it.
        let answer = ApiError::invalid(e.message());
        assert_eq!(
            (answer.code.as_str(), answer.status.as_u16()),
            ("invalid_request", 400),
            "case {}",
            c.name
        );
        assert!(e.message().contains(e.path()), "case {}", c.name);
        assert!(e.message().len() <= 200, "case {}: {}", c.name, e.message());
    }
    assert!(cases.len() > 100, "{}", cases.len());
}

#[test]
fn the_edges_of_each_rule_are_accepted() {
    let ok = [
        with("/topic", json!("t")),
        with("/topic", json!("é".repeat(255))),
        with("/targets/0/device", json!("0123456789ABCDEF")),
        with("/targets/0/device", json!("a".repeat(512))),
        with("/targets/0/device", json!("0123456789abcdef0")), // odd length
        with("/targets/0/suite", json!("a")),
        with("/targets/0/suite", json!("0-")),
        with("/targets/0/suite", json!("a".repeat(16))),
        with("/targets/0/ciphertext", json!(ct(3800))),
        with("/targets/0/ciphertext", json!(format!("{}+/==", ct(64)))),
        with("/targets/0/ciphertext", json!(format!("{}AAA=", ct(64)))),
        with(
            "/targets/0",
            json!({"device": DEVICE, "suite": "xwing", "ciphertext": ct(1520)}),
        ),
        with(
            "/targets",
            Value::Array(
                (0..100)
                    .map(|i| json!({"device": format!("{i:032x}"), "ciphertext": ct(68)}))
                    .collect(),
            ),
        ),
        with("/issuedAtMs", json!(0)),
        with("/issuedAtMs", json!(1u64 << 53)),
        with("/signerKeyId", json!(format!("ed25519:{}", "a".repeat(64)))),
        with("/signerKeyId", json!("ed25519:A.b_c-9")),
        with("/signature", json!("")),
        with("/signature", json!("not even base64")),
    ];
    for v in ok {
        accepted(&bytes(&v));
    }
    // The cap is the caller's.
    let body = bytes(&with("/targets/0/ciphertext", json!(ct(3004))));
    assert_eq!(
        SignedPush::parse(&body, 3000).unwrap_err().message(),
        "targets[0].ciphertext exceeds 3000 characters"
    );
    assert!(SignedPush::parse(&body, 3800).is_ok());
    // The suite's floor.
    let xwing_short = with(
        "/targets/0",
        json!({"device": DEVICE, "suite": "xwing", "ciphertext": ct(1516)}),
    );
    refused(
        &bytes(&xwing_short),
        "targets[0].ciphertext",
        "targets[0].ciphertext is not a base64 sealed box",
    );
}

#[test]
fn issued_at_ms_must_be_written_as_an_integer() {
    let base = String::from_utf8(bytes(&good())).unwrap();
    for spelling in [
        "1767225600000.0",
        "1.7672256e12",
        "17672256E5",
        "-0",
        "1767225600000.5",
        "-0.0",
    ] {
        let body = base.replace("1767225600000", spelling);
        refused(
            body.as_bytes(),
            "issuedAtMs",
            "issuedAtMs must be an integer from 0 to 9007199254740992",
        );
    }
    let body = base.replace("1767225600000", "9007199254740993");
    refused(
        body.as_bytes(),
        "issuedAtMs",
        "issuedAtMs must be an integer from 0 to 9007199254740992",
    );
    let body = base.replace("1767225600000", "18446744073709551616");
    refused(
        body.as_bytes(),
        "issuedAtMs",
        "issuedAtMs must be an integer from 0 to 9007199254740992",
    );
}

// ---- order: two failing checks at once ----

#[test]
fn order_of_checks() {
    let mut v;

    // Not JSON beats a duplicate found earlier in the text.
    refused(br#"{"a":1,"a":2,"#, "", "body is not valid JSON");
    // Not an object beats a duplicate inside.
    refused(br#"[{"a":1,"a":2}]"#, "", "body must be a JSON object");
    // A duplicate beats an unknown member, wherever it is; the first one found wins.
    refused(
        br#"{"zzz":1,"schemaVersion":"2","schemaVersion":"2"}"#,
        "schemaVersion",
        "duplicate member schemaVersion",
    );
    refused(
        br#"{"x":{"a":1,"a":2},"b":1,"b":1}"#,
        "x.a",
        "duplicate member x.a",
    );
    refused(
        br#"{"x":[0,{"a b":1,"a b":2}]}"#,
        "x[1][\"a b\"]",
        "duplicate member x[1][\"a b\"]",
    );
    // Unknown members come before every member rule, even one earlier in the document.
    let body = format!(
        "{{\"schemaVersion\":1,{}, \"later\":true}}",
        &String::from_utf8(bytes(&without("/schemaVersion"))).unwrap()[1..].trim_end_matches('}')
    );
    refused(body.as_bytes(), "later", "unknown member later");
    // Of two unknown members, the first in document order.
    let mut m = good().as_object().unwrap().clone();
    m.insert("zeta".into(), json!(1));
    m.insert("alpha".into(), json!(1));
    refused(&bytes(&Value::Object(m)), "zeta", "unknown member zeta");
    // An empty object: the first member of the order is missing.
    refused(b"{}", "schemaVersion", "missing member schemaVersion");
    // Then the members in SIGNED.md's order.
    v = with("/schemaVersion", json!(2));
    v["requestId"] = json!("x");
    refused(
        &bytes(&v),
        "schemaVersion",
        "schemaVersion must be the string \"2\"",
    );
    v = with("/requestId", json!("x"));
    v.as_object_mut().unwrap().shift_remove("targets");
    refused(
        &bytes(&v),
        "requestId",
        "requestId must be a lowercase UUID",
    );
    v = with("/topic", json!(""));
    v["targets"] = json!([]);
    refused(
        &bytes(&v),
        "topic",
        "topic must be 1 to 255 characters without whitespace",
    );
    v = with("/targets", json!([]));
    v["collapseId"] = json!("x");
    refused(
        &bytes(&v),
        "targets",
        "targets must be an array of 1 to 100 targets",
    );
    v = with("/collapseId", json!("x"));
    v["flapId"] = json!("x");
    refused(
        &bytes(&v),
        "collapseId",
        "collapseId must be 32 lowercase hex characters",
    );
    v = with("/flapId", json!("x"));
    v["priority"] = json!("x");
    refused(
        &bytes(&v),
        "flapId",
        "flapId must be 32 lowercase hex characters",
    );
    v = with("/priority", json!("x"));
    v["event"] = json!("x");
    refused(
        &bytes(&v),
        "priority",
        "priority must be \"time-sensitive\" or \"passive\"",
    );
    v = with("/event", json!("x"));
    v["issuedAtMs"] = json!("x");
    refused(&bytes(&v), "event", "event must be a boolean");
    v = with("/issuedAtMs", json!("x"));
    v["signerKeyId"] = json!("x");
    refused(
        &bytes(&v),
        "issuedAtMs",
        "issuedAtMs must be an integer from 0 to 9007199254740992",
    );
    v = with("/signerKeyId", json!("x"));
    v["signature"] = json!(1);
    refused(
        &bytes(&v),
        "signerKeyId",
        "signerKeyId must be \"ed25519:\" and 1 to 64 of [A-Za-z0-9._-]",
    );
    // The document's member order does not matter, only the check order.
    let mut m = Map::new();
    for (k, val) in good().as_object().unwrap().iter().rev() {
        m.insert(k.clone(), val.clone());
    }
    m["signature"] = json!(1);
    m["schemaVersion"] = json!(3);
    refused(
        &bytes(&Value::Object(m)),
        "schemaVersion",
        "schemaVersion must be the string \"2\"",
    );

    // Inside targets: index order, each target whole before the next.
    v = with(
        "/targets",
        json!([
            {"device": DEVICE, "ciphertext": "short"},
            {"device": "zz", "ciphertext": ct(68)},
        ]),
    );
    refused(
        &bytes(&v),
        "targets[0].ciphertext",
        "targets[0].ciphertext is not a base64 sealed box",
    );
    // Within a target: unknown members, device, suite, ciphertext.
    v = with(
        "/targets/0",
        json!({"ciphertext": "", "suite": 1, "device": "zz", "x": 1}),
    );
    refused(&bytes(&v), "targets[0].x", "unknown member targets[0].x");
    v = with(
        "/targets/0",
        json!({"ciphertext": "", "suite": 1, "device": "zz"}),
    );
    refused(
        &bytes(&v),
        "targets[0].device",
        "targets[0].device must be a hex APNs device token",
    );
    v = with(
        "/targets/0",
        json!({"ciphertext": "", "suite": 1, "device": DEVICE}),
    );
    refused(
        &bytes(&v),
        "targets[0].suite",
        "targets[0].suite must be a string",
    );
    v = with(
        "/targets/0",
        json!({"ciphertext": ct(4000), "suite": "xwing", "device": DEVICE}),
    );
    refused(
        &bytes(&v),
        "targets[0].ciphertext",
        "targets[0].ciphertext exceeds 3800 characters",
    );
    // Over the cap is reported before the alphabet (v1 daemons re-fit on it).
    v = with("/targets/0/ciphertext", json!("!".repeat(3801)));
    refused(
        &bytes(&v),
        "targets[0].ciphertext",
        "targets[0].ciphertext exceeds 3800 characters",
    );
    // Distinctness after every target's own rules.
    v = with(
        "/targets",
        json!([
            {"device": DEVICE, "ciphertext": ct(68)},
            {"device": DEVICE, "ciphertext": ct(68)},
            {"device": DEVICE2, "ciphertext": "bad"},
        ]),
    );
    refused(
        &bytes(&v),
        "targets[2].ciphertext",
        "targets[2].ciphertext is not a base64 sealed box",
    );
    // And before the members after targets.
    v = with(
        "/targets",
        json!([{"device": DEVICE, "ciphertext": ct(68)}, {"device": DEVICE, "ciphertext": ct(68)}]),
    );
    v["collapseId"] = json!(1);
    refused(
        &bytes(&v),
        "targets[1].device",
        "targets must name distinct devices: targets[1].device repeats targets[0].device",
    );
}

// ---- property tests ----

fn hex_string(len: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('0'),
            Just('7'),
            Just('a'),
            Just('f'),
            Just('A'),
            Just('F'),
            Just('c')
        ],
        len,
    )
    .prop_map(|c| c.into_iter().collect())
}

fn lower_hex(len: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u8>(), len / 2).prop_map(|b| crate::device::hex(&b))
}

fn arb_target(index: usize) -> impl Strategy<Value = Value> {
    (
        hex_string(14..=40),
        prop_oneof![
            Just(None),
            Just(Some("x25519")),
            Just(Some("xwing")),
            Just(Some("v2-test"))
        ],
        proptest::collection::vec(any::<u8>(), 51..200),
    )
        .prop_map(move |(device, suite, mut ct)| {
            // A distinct two-digit prefix per index keeps devices distinct.
            let device = format!("{index:02x}{device}");
            if suite == Some("xwing") {
                ct.resize(1200, 7);
            }
            let mut t = Map::new();
            t.insert("device".into(), json!(device));
            if let Some(s) = suite {
                t.insert("suite".into(), json!(s));
            }
            t.insert(
                "ciphertext".into(),
                json!(super::super::b64::encode_std(&ct)),
            );
            Value::Object(t)
        })
}

/// Valid requests of every optional shape.
fn arb_request() -> impl Strategy<Value = Value> {
    let targets = (1usize..5).prop_flat_map(|n| (0..n).map(arb_target).collect::<Vec<_>>());
    (
        lower_hex(32),
        proptest::option::of("[a-z][a-z0-9.-]{0,30}"),
        targets,
        lower_hex(32),
        proptest::option::of(lower_hex(32)),
        any::<bool>(),
        any::<bool>(),
        0u64..=(1 << 53),
        "[A-Za-z0-9._-]{1,64}",
        "[A-Za-z0-9_-]{0,90}",
    )
        .prop_map(
            |(id, topic, targets, collapse, flap, passive, event, issued, key, sig)| {
                let uuid = format!(
                    "{}-{}-{}-{}-{}",
                    &id[..8],
                    &id[8..12],
                    &id[12..16],
                    &id[16..20],
                    &id[20..]
                );
                let mut m = Map::new();
                m.insert("schemaVersion".into(), json!("2"));
                m.insert("requestId".into(), json!(uuid));
                if let Some(t) = topic {
                    m.insert("topic".into(), json!(t));
                }
                m.insert("targets".into(), Value::Array(targets));
                m.insert("collapseId".into(), json!(collapse));
                if let Some(f) = flap {
                    m.insert("flapId".into(), json!(f));
                }
                m.insert(
                    "priority".into(),
                    json!(if passive { "passive" } else { "time-sensitive" }),
                );
                m.insert("event".into(), json!(event));
                m.insert("issuedAtMs".into(), json!(issued));
                m.insert("signerKeyId".into(), json!(format!("ed25519:{key}")));
                m.insert("signature".into(), json!(sig));
                Value::Object(m)
            },
        )
}

/// Every member path of a request, for mutations.
fn pointers(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (k, val) in v.as_object().unwrap() {
        out.push(format!("/{k}"));
        if let Value::Array(items) = val {
            for (i, item) in items.iter().enumerate() {
                out.push(format!("/{k}/{i}"));
                if let Value::Object(t) = item {
                    for tk in t.keys() {
                        out.push(format!("/{k}/{i}/{tk}"));
                    }
                }
            }
        }
    }
    out
}

fn check_error_invariants(e: &RequestError) -> Result<(), TestCaseError> {
    prop_assert!(!e.message().is_empty());
    prop_assert!(e.message().contains(e.path()));
    prop_assert!(e.message().len() <= 200);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Err(e) = parse(&body) {
            check_error_invariants(&e)?;
        }
    }

    #[test]
    fn arbitrary_json_never_panics(v in arb_value(), seed in any::<u64>()) {
        let mut text = String::new();
        write_scrambled(&v, &mut text, &mut Choices::new(seed));
        if let Err(e) = parse(text.as_bytes()) {
            check_error_invariants(&e)?;
        }
    }

    #[test]
    fn objects_with_schema_names_and_arbitrary_values_never_panic(
        members in proptest::collection::vec(
            (prop_oneof![
                proptest::sample::select(MEMBERS.to_vec()).prop_map(String::from),
                "[a-z]{1,3}",
            ], arb_value()),
            0..14,
        ),
    ) {
        let v = Value::Object(members.into_iter().collect());
        if let Err(e) = parse(&bytes(&v)) {
            check_error_invariants(&e)?;
        }
    }

    #[test]
    fn valid_requests_are_accepted_and_revalidate_identically(v in arb_request(), seed in any::<u64>()) {
        let first = parse(&bytes(&v));
        prop_assert!(first.is_ok(), "{:?}", first.err());
        let first = first.unwrap();
        // Compact, pretty, and scrambled (members shuffled, escapes, whitespace): the same
        // typed request and the same canonical hash.
        let pretty = serde_json::to_vec_pretty(&v).unwrap();
        let mut scrambled = String::new();
        write_scrambled(&v, &mut scrambled, &mut Choices::new(seed));
        for body in [pretty, scrambled.into_bytes()] {
            let again = parse(&body).expect("still valid");
            prop_assert_eq!(&again, &first);
        }
        // The canonical bytes plus the signature are a valid request too, equal again.
        let mut canon: Value = serde_json::from_slice(first.signing_bytes()).unwrap();
        canon["signature"] = json!(first.signature());
        prop_assert_eq!(&parse(&bytes(&canon)).expect("still valid"), &first);
        prop_assert_eq!(first.canonical_hash(), crate_canonical::payload_hash(first.signing_bytes()));
        // The typed view agrees with the JSON.
        prop_assert_eq!(first.targets().len(), v["targets"].as_array().unwrap().len());
        for (i, raw) in v["targets"].as_array().unwrap().iter().enumerate() {
            let a = first.alert(i);
            prop_assert_eq!(a.device.expose(), raw["device"].as_str().unwrap().to_ascii_lowercase());
            prop_assert_eq!(a.ciphertext.as_str(), raw["ciphertext"].as_str().unwrap());
        }
    }

    #[test]
    fn mutated_requests_never_panic_and_answer_deterministically(
        v in arb_request(),
        pick in any::<prop::sample::Index>(),
        action in 0u8..3,
        replacement in arb_value(),
    ) {
        let ptrs = pointers(&v);
        let ptr = pick.get(&ptrs);
        let mut m = v.clone();
        let (parent, name) = ptr.rsplit_once('/').unwrap();
        let parent = m.pointer_mut(parent).unwrap();
        match (action, parent) {
            (0, Value::Object(o)) => { o.shift_remove(name); }
            (1, Value::Object(o)) => { o.insert(format!("{name}X"), replacement); }
            (_, Value::Object(o)) => { o.insert(name.to_owned(), replacement); }
            (_, Value::Array(a)) => { a[name.parse::<usize>().unwrap()] = replacement; }
            _ => {}
        }
        let body = bytes(&m);
        let one = parse(&body);
        let two = parse(&body);
        prop_assert_eq!(&one, &two);
        if let Err(e) = &one {
            check_error_invariants(e)?;
        }
    }
}
