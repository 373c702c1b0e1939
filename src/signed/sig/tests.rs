//! Tests for `signed::sig`: signatures, keys and key files, the read `Authorization` header,
//! freshness.

use super::*;
use proptest::prelude::*;
use ring::rand::SystemRandom;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::super::error::ApiError;
use super::super::request::SignedPush;
use crate::delivery::alert::DEFAULT_MAX_CIPHERTEXT_CHARS;

fn request() -> Map<String, Value> {
    json!({
        "schemaVersion": "2",
        "requestId": "2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c",
        "topic": "com.example.cronstable",
        "targets": [
            {"device": "ABCDEF0123456789abcdef0123456789", "ciphertext": "Zm9v".repeat(17)},
            {"device": "00112233445566778899aabbccddeeff", "suite": "x25519", "ciphertext": "QUJD".repeat(20)}
        ],
        "collapseId": "93bc5d02dc2a24b5365347573b6f5115",
        "priority": "passive",
        "event": true,
        "issuedAtMs": 1767225600000u64,
        "signerKeyId": "ed25519:ops-eu-1",
    })
    .as_object()
    .unwrap()
    .clone()
}

fn signed(key: &PrivateKey, mut req: Map<String, Value>) -> SignedPush {
    sign_request(key, &mut req);
    let body = serde_json::to_vec(&Value::Object(req)).unwrap();
    SignedPush::parse(&body, DEFAULT_MAX_CIPHERTEXT_CHARS).expect("a valid request")
}

#[test]
fn sign_and_verify_a_push() {
    let key = PrivateKey::generate().unwrap();
    let push = signed(&key, request());
    assert_eq!(push.signature().len(), 86);
    assert!(!push.signature().contains('='));
    verify_push(&key.public_key(), &push).unwrap();
    // The public key survives its enrolment form.
    let enrolled = PublicKey::from_base64(&key.public_key().to_base64()).unwrap();
    assert_eq!(enrolled, key.public_key());
    verify_push(&enrolled, &push).unwrap();
    // A signature over the request with an old `signature` member still present is the same.
    let mut req = request();
    req.insert("signature".into(), json!("stale"));
    assert_eq!(request_signature(&key, &req), push.signature());
    // The member order of the request object does not matter.
    let mut reversed = Map::new();
    for (k, v) in request().into_iter().rev() {
        reversed.insert(k, v);
    }
    assert_eq!(request_signature(&key, &reversed), push.signature());
}

#[test]
fn any_flipped_bit_in_the_payload_fails() {
    let key = PrivateKey::generate().unwrap();
    let push = signed(&key, request());
    let sig = decode_signature(push.signature()).unwrap();
    let public = key.public_key();
    let mut bytes = push.signing_bytes().to_vec();
    assert!(bytes.len() > 300);
    for i in 0..bytes.len() {
        let bit = 1u8 << (i % 8);
        bytes[i] ^= bit;
        assert_eq!(
            public.verify(&bytes, &sig),
            Err(SigError::Mismatch),
            "byte {i}"
        );
        bytes[i] ^= bit;
    }
    public.verify(&bytes, &sig).unwrap();
    // And in the signature.
    for i in 0..SIGNATURE_LEN {
        let mut bad = sig;
        bad[i] ^= 1 << (i % 8);
        assert_eq!(
            public.verify(&bytes, &bad),
            Err(SigError::Mismatch),
            "sig byte {i}"
        );
    }
    // A request changed after signing no longer verifies.
    let mut req = request();
    sign_request(&key, &mut req);
    req["event"] = json!(false);
    let body = serde_json::to_vec(&Value::Object(req)).unwrap();
    let tampered = SignedPush::parse(&body, DEFAULT_MAX_CIPHERTEXT_CHARS).unwrap();
    assert_eq!(verify_push(&public, &tampered), Err(SigError::Mismatch));
}

#[test]
fn the_wrong_key_fails() {
    let key = PrivateKey::generate().unwrap();
    let other = PrivateKey::generate().unwrap();
    assert_ne!(key.public_key(), other.public_key());
    let push = signed(&key, request());
    assert_eq!(
        verify_push(&other.public_key(), &push),
        Err(SigError::Mismatch)
    );
    assert_eq!(
        verify_push(&PublicKey::from_bytes([0; 32]), &push),
        Err(SigError::Mismatch)
    );
}

#[test]
fn malformed_signatures_are_bad_signature() {
    let key = PrivateKey::generate().unwrap();
    let good = request_signature(&key, &request());
    let raw = decode_signature(&good).unwrap();
    let b64 = |bytes: &[u8]| super::super::b64::encode_url_nopad(bytes);
    let mut last_bits = good.clone().into_bytes();
    // 'A' + 1: the last symbol holds 2 data bits and 4 zero bits; set one of the zeros.
    let last = last_bits.len() - 1;
    last_bits[last] = match last_bits[last] {
        b'A' => b'B',
        b'Q' => b'R',
        b'g' => b'h',
        b'w' => b'x',
        c => panic!("unexpected last symbol {}", c as char),
    };
    let cases = [
        format!("{good}=="),                                  // padded
        b64(&raw[..63]),                                      // 63 bytes
        b64(&[&raw[..], &[0u8]].concat()),                    // 65 bytes
        super::super::b64::encode_std(&raw).replace('=', ""), // standard alphabet, maybe
        good.replace(['-', '_'], "+"),                        // standard alphabet
        String::from_utf8(last_bits).unwrap(),                // non-canonical trailing bits
        String::new(),
        format!(" {}", &good[1..]),
        format!("{}\n", &good[..85]),
        "A".repeat(100_000),
    ];
    for text in &cases {
        if text == &good {
            continue; // the std-alphabet rewrite is a no-op without '+' or '/'
        }
        assert_eq!(decode_signature(text), Err(SigError::Malformed), "{text:?}");
        let mut req = request();
        req.insert("signature".into(), json!(text));
        let body = serde_json::to_vec(&Value::Object(req)).unwrap();
        let push = SignedPush::parse(&body, DEFAULT_MAX_CIPHERTEXT_CHARS).expect("schema-valid");
        let e = verify_push(&key.public_key(), &push).unwrap_err();
        assert_eq!(e, SigError::Malformed);
        let answer = ApiError::from(e);
        assert_eq!(
            (answer.code.as_str(), answer.status.as_u16()),
            ("bad_signature", 401)
        );
    }
    let answer = ApiError::from(SigError::Mismatch);
    assert_eq!(
        (answer.code.as_str(), answer.status.as_u16()),
        ("bad_signature", 401)
    );
}

#[test]
fn public_key_enrolment_form() {
    let bytes: [u8; 32] = core::array::from_fn(|i| (i * 7 + 250) as u8);
    let text = super::super::b64::encode_std(&bytes);
    assert_eq!(text.len(), 44);
    assert_eq!(PublicKey::from_base64(&text).unwrap().as_bytes(), &bytes);
    assert_eq!(PublicKey::from_base64(&text).unwrap().to_string(), text);
    let cases = [
        (
            text.trim_end_matches('=').to_owned(),
            KeyError::PublicKeyNotBase64,
        ),
        (
            text.replace('+', "-").replace('/', "_"),
            KeyError::PublicKeyNotBase64,
        ),
        (format!(" {text}"), KeyError::PublicKeyNotBase64),
        (format!("{text}\n"), KeyError::PublicKeyNotBase64),
        ("not base64!".to_owned(), KeyError::PublicKeyNotBase64),
        (
            super::super::b64::encode_std(&bytes[..31]),
            KeyError::PublicKeyLength(31),
        ),
        (
            super::super::b64::encode_std(&[0u8; 33]),
            KeyError::PublicKeyLength(33),
        ),
        (
            super::super::b64::encode_std(&[0u8; 64]),
            KeyError::PublicKeyLength(64),
        ),
        (String::new(), KeyError::PublicKeyLength(0)),
    ];
    for (input, expected) in cases {
        if input == text {
            continue; // no '+' or '/' in this key's base64
        }
        assert_eq!(PublicKey::from_base64(&input), Err(expected), "{input:?}");
    }
    assert_eq!(
        KeyError::PublicKeyNotBase64.to_string(),
        "publicKey must be standard base64 (with padding) of 32 bytes"
    );
    assert_eq!(
        KeyError::PublicKeyLength(31).to_string(),
        "publicKey must be 32 bytes, not 31"
    );
    assert!(is_valid_key_id("ed25519:ops-eu-1"));
    assert!(!is_valid_key_id("ops-eu-1"));
}

fn pem_body(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    super::super::b64::decode_std(&body).unwrap()
}

#[test]
fn keygen_writes_pkcs8_v2_pem_that_loads_back() {
    let key = PrivateKey::generate().unwrap();
    let pem = key.to_pem();
    let lines: Vec<&str> = pem.lines().collect();
    assert_eq!(lines.first(), Some(&"-----BEGIN PRIVATE KEY-----"));
    assert_eq!(lines.last(), Some(&"-----END PRIVATE KEY-----"));
    assert!(pem.ends_with("-----END PRIVATE KEY-----\n"));
    for line in &lines[1..lines.len() - 1] {
        assert!(!line.is_empty() && line.len() <= 64, "{line}");
    }
    assert!(lines[1..lines.len() - 2].iter().all(|l| l.len() == 64));
    let der = pem_body(&pem);
    // SEQUENCE { INTEGER 1 (v2) ... }, 83 bytes with the public key.
    assert_eq!(der.len(), 83);
    assert_eq!(&der[2..5], &[0x02, 0x01, 0x01]);
    assert!(der.ends_with(key.public_key().as_bytes()));

    let loaded = PrivateKey::from_pem(&pem).unwrap();
    assert_eq!(loaded.public_key(), key.public_key());
    assert_eq!(loaded.to_pem(), pem);
    assert_eq!(loaded.sign(b"m"), key.sign(b"m"));
    // The v1 form: the same key, the RFC 8410 bytes, loadable.
    let v1 = key.to_pem_v1();
    let v1_der = pem_body(&v1);
    assert_eq!(v1_der.len(), 48);
    assert_eq!(
        &v1_der[..16],
        &der[..16]
            .iter()
            .enumerate()
            .map(|(i, &b)| match i {
                1 => 0x2e,
                4 => 0x00,
                _ => b,
            })
            .collect::<Vec<u8>>()[..]
    );
    assert_eq!(&v1_der[16..], &der[16..48]);
    let from_v1 = PrivateKey::from_pem(&v1).unwrap();
    assert_eq!(from_v1.public_key(), key.public_key());
    assert_eq!(from_v1.to_pem_v1(), v1);
    assert_eq!(from_v1.to_pem(), v1);
    // CRLF, leading text and indentation are fine.
    let crlf = format!("key for ops-eu-1\r\n{}", pem.replace('\n', "\r\n  "));
    assert_eq!(
        PrivateKey::from_pem(&crlf).unwrap().public_key(),
        key.public_key()
    );
}

#[test]
fn pem_errors_are_clear() {
    assert_eq!(PrivateKey::from_pem("").unwrap_err(), KeyError::PemMissing);
    assert_eq!(
        PrivateKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
            .unwrap_err(),
        KeyError::PemMissing
    );
    assert_eq!(
        PrivateKey::from_pem(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"
        )
        .unwrap_err(),
        KeyError::PemEncrypted
    );
    assert_eq!(
        PrivateKey::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n").unwrap_err(),
        KeyError::PemBody
    );
    assert_eq!(
        PrivateKey::from_pem("-----BEGIN PRIVATE KEY-----\nA*AA\n-----END PRIVATE KEY-----\n")
            .unwrap_err(),
        KeyError::PemBody
    );
    assert!(matches!(
        PrivateKey::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            .unwrap_err(),
        KeyError::Pkcs8(_)
    ));
    // A P-256 PKCS#8 key (not Ed25519) is refused as such.
    let p256 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &SystemRandom::new(),
    )
    .unwrap();
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        super::super::b64::encode_std(p256.as_ref())
    );
    let e = PrivateKey::from_pem(&pem).unwrap_err();
    assert!(matches!(e, KeyError::Pkcs8(_)), "{e:?}");
    assert!(e
        .to_string()
        .starts_with("not an Ed25519 PKCS#8 private key"));
}

#[test]
fn debug_never_prints_key_material() {
    let key = PrivateKey::generate().unwrap();
    let shown = format!("{key:?}");
    let der = pem_body(&key.to_pem());
    let seed = &der[16..48];
    assert!(shown.contains(&key.public_key().to_base64()), "{shown}");
    for window in [
        super::super::b64::encode_std(seed),
        crate::device::hex(seed),
        format!("{seed:?}"),
        key.to_pem().lines().nth(1).unwrap().to_owned(),
    ] {
        assert!(!shown.contains(&window[..20]), "{shown}");
    }
}

// ---- openssl interoperability (skipped when the CLI is absent) ----

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("signed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(args: &[&str], dir: &Path) -> Option<std::process::Output> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out)
}

#[test]
fn interoperates_with_openssl() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("openssl not found: skipping");
        return;
    }
    let dir = TempDir::new("openssl");
    let d = &dir.0;
    let msg = b"GET\n/v2/pushes/2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c\n1767225600000";
    std::fs::write(dir.path("msg"), msg).unwrap();

    // An openssl key (PKCS#8 v1, no public key inside) loads and signs as openssl does.
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", "k.pem"], d).unwrap();
    let pem = std::fs::read_to_string(dir.path("k.pem")).unwrap();
    let der = pem_body(&pem);
    assert_eq!(&der[2..5], &[0x02, 0x01, 0x00], "openssl writes v1");
    let key = PrivateKey::from_pem(&pem).unwrap();
    openssl(
        &[
            "pkey", "-in", "k.pem", "-pubout", "-outform", "DER", "-out", "pub.der",
        ],
        d,
    )
    .unwrap();
    let spki = std::fs::read(dir.path("pub.der")).unwrap();
    assert_eq!(&spki[spki.len() - 32..], key.public_key().as_bytes());
    openssl(
        &[
            "pkeyutl", "-sign", "-rawin", "-inkey", "k.pem", "-in", "msg", "-out", "sig",
        ],
        d,
    )
    .unwrap();
    let sig: [u8; 64] = std::fs::read(dir.path("sig")).unwrap().try_into().unwrap();
    key.public_key().verify(msg, &sig).unwrap();
    assert_eq!(key.sign(msg), sig, "Ed25519 is deterministic");
    // Re-written by us, it stays the same v1 document.
    assert_eq!(pem_body(&key.to_pem()), der);

    // Our key, written as v1, is read by openssl, which verifies our signature. (OpenSSL
    // 3.0 refuses the v2 form `to_pem` writes for a generated key: "unsupported".)
    let ours = PrivateKey::generate().unwrap();
    std::fs::write(dir.path("ours.pem"), ours.to_pem_v1()).unwrap();
    openssl(
        &["pkey", "-in", "ours.pem", "-pubout", "-out", "ours.pub.pem"],
        d,
    )
    .unwrap();
    openssl(
        &[
            "pkey",
            "-in",
            "ours.pem",
            "-pubout",
            "-outform",
            "DER",
            "-out",
            "ours.pub.der",
        ],
        d,
    )
    .unwrap();
    let spki = std::fs::read(dir.path("ours.pub.der")).unwrap();
    assert_eq!(&spki[spki.len() - 32..], ours.public_key().as_bytes());
    std::fs::write(dir.path("ours.sig"), ours.sign(msg)).unwrap();
    let out = openssl(
        &[
            "pkeyutl",
            "-verify",
            "-pubin",
            "-inkey",
            "ours.pub.pem",
            "-rawin",
            "-in",
            "msg",
            "-sigfile",
            "ours.sig",
        ],
        d,
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Signature Verified Successfully"));
}

// ---- the read Authorization header ----

fn header(key_id: &str, ts: &str, sig: &str) -> String {
    format!("Signature keyId=\"{key_id}\",ts=\"{ts}\",sig=\"{sig}\"")
}

fn parse_str(value: &str) -> Result<ReadAuthorization, AuthError> {
    ReadAuthorization::parse(Some(value.as_bytes()))
}

#[test]
fn signed_read_round_trip() {
    let key = PrivateKey::generate().unwrap();
    let path = "/v2/pushes/2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c/events?after=3";
    let value = read_authorization(&key, "ed25519:ops-eu-1", "GET", path, 1767225600000);
    assert!(value.starts_with("Signature keyId=\"ed25519:ops-eu-1\",ts=\"1767225600000\",sig=\""));
    let auth = parse_str(&value).unwrap();
    assert_eq!(auth.key_id(), "ed25519:ops-eu-1");
    assert_eq!(auth.ts_ms(), 1767225600000);
    assert_eq!(auth.sig.len(), 86);
    auth.verify(&key.public_key(), "GET", path).unwrap();
    assert_eq!(
        read_signing_message("GET", path, 1767225600000),
        format!("GET\n{path}\n1767225600000").into_bytes()
    );
    // Another method, path, query or time: a bad signature.
    let bad = SigError::Mismatch;
    assert_eq!(auth.verify(&key.public_key(), "POST", path), Err(bad));
    assert_eq!(
        auth.verify(
            &key.public_key(),
            "GET",
            "/v2/pushes/2f0c3a8e-0d5b-4f7e-9c1a-6b2d8e4f1a3c/events"
        ),
        Err(bad)
    );
    assert_eq!(
        auth.verify(
            &key.public_key(),
            "GET",
            &path.replace("after=3", "after=2")
        ),
        Err(bad)
    );
    let other_ts = value.replace("1767225600000", "1767225600001");
    assert_eq!(
        parse_str(&other_ts)
            .unwrap()
            .verify(&key.public_key(), "GET", path),
        Err(bad)
    );
    assert_eq!(
        auth.verify(&PrivateKey::generate().unwrap().public_key(), "GET", path),
        Err(bad)
    );
    // A sig that is not 64 bytes of base64url parses, then fails the signature check.
    let short = parse_str(&header("ed25519:a", "1", "AAAA")).unwrap();
    assert_eq!(
        short.verify(&key.public_key(), "GET", path),
        Err(SigError::Malformed)
    );
    // Parameters in any order, spaces around commas.
    let sig = auth.sig.clone();
    for v in [
        format!("Signature sig=\"{sig}\",ts=\"1767225600000\",keyId=\"ed25519:ops-eu-1\""),
        format!("Signature ts=\"1767225600000\", sig=\"{sig}\" ,\tkeyId=\"ed25519:ops-eu-1\""),
        format!("  Signature   keyId=\"ed25519:ops-eu-1\",ts=\"1767225600000\",sig=\"{sig}\"  "),
    ] {
        assert_eq!(parse_str(&v).unwrap(), auth, "{v}");
    }
}

#[test]
fn authorization_header_cases() {
    let sig = "A".repeat(86);
    let ok = header("ed25519:k", "1767225600000", &sig);
    assert!(parse_str(&ok).is_ok());
    assert_eq!(ReadAuthorization::parse(None), Err(AuthError::Missing));
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "the scheme must be Signature"),
        ("   ".into(), "the scheme must be Signature"),
        (format!("Bearer {sig}"), "the scheme must be Signature"),
        (
            ok.replacen("Signature", "signature", 1),
            "the scheme must be Signature",
        ),
        (
            ok.replacen("Signature", "SIGNATURE", 1),
            "the scheme must be Signature",
        ),
        (
            ok.replacen("Signature ", "Signature", 1),
            "the scheme must be Signature",
        ),
        (
            ok.replacen("Signature ", "Signature\t", 1),
            "the scheme must be Signature",
        ),
        (
            ok.replacen("Signature ", "Signatures ", 1),
            "the scheme must be Signature",
        ),
        ("Signature".into(), "keyId, ts and sig are required"),
        ("Signature ".into(), "keyId, ts and sig are required"),
        // missing parameters
        (
            format!("Signature ts=\"1\",sig=\"{sig}\""),
            "keyId, ts and sig are required",
        ),
        (
            format!("Signature keyId=\"ed25519:k\",sig=\"{sig}\""),
            "keyId, ts and sig are required",
        ),
        (
            "Signature keyId=\"ed25519:k\",ts=\"1\"".into(),
            "keyId, ts and sig are required",
        ),
        // duplicates
        (
            format!("{ok},ts=\"1767225600000\""),
            "a parameter appears twice",
        ),
        (
            format!("{ok},keyId=\"ed25519:k\""),
            "a parameter appears twice",
        ),
        (format!("{ok},sig=\"{sig}\""), "a parameter appears twice"),
        // unquoted, badly quoted
        (
            format!("Signature keyId=ed25519:k,ts=\"1\",sig=\"{sig}\""),
            "parameter values must be quoted",
        ),
        (
            format!("Signature keyId=\"ed25519:k\",ts=1,sig=\"{sig}\""),
            "parameter values must be quoted",
        ),
        (
            format!("Signature keyId='ed25519:k',ts=\"1\",sig=\"{sig}\""),
            "parameter values must be quoted",
        ),
        (
            format!("Signature keyId=\"ed25519:k\",ts=\"1\",sig=\"{sig}"),
            "a quoted value is not closed",
        ),
        (
            format!("Signature keyId=\"ed25519:k\",ts=\"1\",sig=\"{sig}\\\"\""),
            "a quoted value holds a space, a backslash or a byte outside visible ASCII",
        ),
        (
            format!("Signature keyId=\"ed25519: k\",ts=\"1\",sig=\"{sig}\""),
            "a quoted value holds a space, a backslash or a byte outside visible ASCII",
        ),
        (
            format!("Signature keyId=\"ed25519:k\u{e9}\",ts=\"1\",sig=\"{sig}\""),
            "a quoted value holds a space, a backslash or a byte outside visible ASCII",
        ),
        (
            format!("Signature keyId =\"ed25519:k\",ts=\"1\",sig=\"{sig}\""),
            "only keyId, ts and sig are allowed",
        ),
        (
            format!("Signature keyId= \"ed25519:k\",ts=\"1\",sig=\"{sig}\""),
            "parameter values must be quoted",
        ),
        // extra or differently spelled parameters
        (
            format!("{ok},alg=\"ed25519\""),
            "only keyId, ts and sig are allowed",
        ),
        (
            ok.replacen("keyId", "keyid", 1),
            "only keyId, ts and sig are allowed",
        ),
        (
            ok.replacen("keyId", "KeyId", 1),
            "only keyId, ts and sig are allowed",
        ),
        (
            ok.replacen("sig=", "signature=", 1),
            "only keyId, ts and sig are allowed",
        ),
        (
            format!("Signature {sig}"),
            "parameters must be name=\"value\"",
        ),
        // separators
        (
            ok.replace(",", ";"),
            "parameters must be separated by commas",
        ),
        (
            ok.replace(",", " "),
            "parameters must be separated by commas",
        ),
        (format!("{ok},"), "a trailing comma"),
        (format!("{ok} , "), "a trailing comma"),
        (
            ok.replacen(",", ",,", 1),
            "only keyId, ts and sig are allowed",
        ),
        // values
        (header("ops", "1", &sig), "keyId is not a signer key id"),
        (header("", "1", &sig), "keyId is not a signer key id"),
        (
            header("ed25519:", "1", &sig),
            "keyId is not a signer key id",
        ),
        (
            header("ed25519:k", "abc", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "-1", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "+1", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "1.5", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "1e3", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "0x10", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "01767225600000", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "9007199254740993", &sig),
            "ts must be decimal milliseconds",
        ),
        (
            header("ed25519:k", "99999999999999999999", &sig),
            "ts must be decimal milliseconds",
        ),
        (header("ed25519:k", "1", ""), "sig is empty"),
    ];
    for (value, reason) in &cases {
        let e = parse_str(value).unwrap_err();
        assert_eq!(e, AuthError::Malformed(reason), "{value:?}");
        // As the read handler answers it.
        let answer = ApiError::unauthorized(e.to_string());
        assert_eq!(
            (answer.code.as_str(), answer.status.as_u16()),
            ("unauthorized", 401)
        );
    }
    assert_eq!(
        ReadAuthorization::parse(Some(
            b"Signature keyId=\"ed25519:k\xff\",ts=\"1\",sig=\"x\""
        )),
        Err(AuthError::Malformed(
            "a quoted value holds a space, a backslash or a byte outside visible ASCII"
        ))
    );
    // The edges that parse.
    assert_eq!(
        parse_str(&header("ed25519:k", "0", "x")).unwrap().ts_ms(),
        0
    );
    assert_eq!(
        parse_str(&header("ed25519:k", "9007199254740992", "x"))
            .unwrap()
            .ts_ms(),
        1 << 53
    );
    assert_eq!(
        AuthError::Missing.to_string(),
        "missing Authorization header"
    );
}

#[test]
fn freshness_window_bounds_are_inclusive() {
    let now = 1_767_225_600_000u64;
    assert_eq!(check_fresh(now, now), Ok(()));
    assert_eq!(check_fresh(now - 300_000, now), Ok(()));
    assert_eq!(check_fresh(now - 300_001, now), Err(StaleError::TooOld));
    assert_eq!(check_fresh(now + 30_000, now), Ok(()));
    assert_eq!(check_fresh(now + 30_001, now), Err(StaleError::TooNew));
    assert_eq!(check_fresh(0, now), Err(StaleError::TooOld));
    // Near the ends of the clock: no overflow.
    assert_eq!(check_fresh(0, 1_000), Ok(()));
    assert_eq!(check_fresh(u64::MAX, u64::MAX), Ok(()));
    assert_eq!(check_fresh(u64::MAX, u64::MAX - 30_000), Ok(()));
    assert_eq!(check_fresh(u64::MAX, 0), Err(StaleError::TooNew));
    // Either end answers as the handlers answer it.
    let answer = ApiError::stale("ts");
    assert_eq!(
        (answer.code.as_str(), answer.status.as_u16()),
        ("stale_request", 422)
    );
    // The whole window, in seconds (`RELAY_RECEIPT_TTL_S` must be longer).
    assert_eq!((FRESH_BEFORE_MS + FRESH_AFTER_MS) / 1000, 330);
}

proptest! {
    #[test]
    fn header_parser_never_panics(value in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = ReadAuthorization::parse(Some(&value));
    }

    #[test]
    fn header_parser_never_panics_on_near_misses(
        value in r#"Signature( |,|=|"|keyId|ts|sig|ed25519:[a-z]{0,3}|[0-9]{0,17}|[A-Za-z0-9_-]{0,4}|\\|\t){0,14}"#,
    ) {
        if let Ok(auth) = ReadAuthorization::parse(Some(value.as_bytes())) {
            // Whatever parses has the three parameters with their shapes.
            prop_assert!(is_valid_key_id(auth.key_id()));
            prop_assert!(auth.ts_ms() <= 1 << 53);
            prop_assert!(!auth.sig.is_empty());
        }
    }

    #[test]
    fn fresh_exactly_inside_the_window(now in 0u64..(1 << 53), delta in -400_000i64..100_000) {
        let issued = now as i64 + delta;
        prop_assume!(issued >= 0);
        let fresh = check_fresh(issued as u64, now).is_ok();
        prop_assert_eq!(fresh, (-300_000..=30_000).contains(&delta));
    }
}

/// The eight points of order dividing 8, canonically encoded (computed from the curve
/// equation: `L * P` for random points `P`, where `L` is the prime group order).
const TORSION: [&str; 8] = [
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
];

fn hex32(text: &str) -> [u8; 32] {
    core::array::from_fn(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
}

#[test]
fn small_order_keys_forge_signatures_under_ring() {
    // Why enrolment must refuse them: under each small-order key A, a signature R || 0 with
    // R a small-order point verifies for a share of all messages, no private key involved
    // ([0]B = R + [k]A holds whenever [k]A = -R). Under the identity it is every message.
    let identity = PublicKey::from_bytes(hex32(TORSION[2]));
    let mut forged = [0u8; 64];
    forged[0] = 1;
    for message in [&b"any"[..], b"push", b""] {
        assert_eq!(identity.verify(message, &forged), Ok(()));
    }
    for key in TORSION {
        let key = PublicKey::from_bytes(hex32(key));
        let forgeries = (0u32..64)
            .filter(|m| {
                TORSION.iter().any(|r| {
                    let mut sig = [0u8; 64];
                    sig[..32].copy_from_slice(&hex32(r));
                    key.verify(&m.to_be_bytes(), &sig).is_ok()
                })
            })
            .count();
        assert!(forgeries > 0, "{key:?} admitted no forgery in 64 messages");
    }
}

#[test]
fn enrolment_refuses_weak_and_non_canonical_keys() {
    let b64 = |bytes: &[u8; 32]| super::super::b64::encode_std(bytes);
    let mut cases: Vec<(String, [u8; 32])> = TORSION
        .iter()
        .map(|t| (format!("small order {t}"), hex32(t)))
        .collect();
    // The same y with the sign bit flipped: the negated point, or (x = 0) a non-canonical
    // encoding of the same one.
    for t in TORSION {
        let mut flipped = hex32(t);
        flipped[31] ^= 0x80;
        cases.push((format!("small order, sign flipped {t}"), flipped));
    }
    // y from p = 2^255 - 19 to 2^255 - 1, with either sign bit: not reduced.
    for low in 0xed..=0xff_u8 {
        for sign in [0, 0x80] {
            let mut y = [0xff; 32];
            y[0] = low;
            y[31] = 0x7f | sign;
            cases.push((format!("y = p + {}, sign {sign:#x}", low - 0xed), y));
        }
    }
    for (name, bytes) in &cases {
        assert_eq!(
            PublicKey::from_base64(&b64(bytes)),
            Err(KeyError::PublicKeyWeak),
            "{name}"
        );
    }
    // p - 2 (the largest canonical y that is not p - 1) and real keys pass.
    let mut below = [0xff; 32];
    below[0] = 0xeb;
    below[31] = 0x7f;
    assert!(PublicKey::from_base64(&b64(&below)).is_ok());
    for _ in 0..200 {
        let key = PrivateKey::generate().unwrap().public_key();
        assert_eq!(PublicKey::from_base64(&key.to_base64()), Ok(key));
    }
    assert!(KeyError::PublicKeyWeak
        .to_string()
        .contains("sealrelay keygen"));
}
