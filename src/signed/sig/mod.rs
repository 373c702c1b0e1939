//! Ed25519 for signed pushes and signed reads (ring), key files for `sealrelay keygen`,
//! the read `Authorization: Signature` header, and the freshness window.
//!
//! - A push's `signature` is Ed25519 over [`SignedPush::signing_bytes`], sent as 64 bytes
//!   of base64url without padding; anything else is 401 `bad_signature`
//!   ([`decode_signature`], [`verify_push`]).
//! - A signer's public key is enrolled as standard base64 (with padding) of its 32 bytes
//!   ([`PublicKey::from_base64`]).
//! - A private key lives in a PKCS#8 PEM file (`-----BEGIN PRIVATE KEY-----`): `keygen`
//!   writes PKCS#8 v2 (with the public key); v1 files, as `openssl genpkey -algorithm
//!   ed25519` writes them, load too ([`PrivateKey`]).
//! - A read is signed over `<METHOD>\n<path and query>\n<ts>` and carried as
//!   `Authorization: Signature keyId="<signerKeyId>",ts="<ms>",sig="<base64url>"`
//!   ([`ReadAuthorization`], [`read_authorization`]).
//! - `issuedAtMs` and `ts` must lie in `[now - 5 min, now + 30 s]`, both ends included
//!   ([`check_fresh`]).

use std::fmt;

use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use serde_json::{Map, Value};

use super::b64;
use super::canonical;
use super::request::{self, SignedPush};

/// An Ed25519 signature's length in bytes.
pub const SIGNATURE_LEN: usize = 64;

/// An Ed25519 public key's length in bytes.
pub const PUBLIC_KEY_LEN: usize = 32;

/// How far in the past `issuedAtMs` / `ts` may be: 5 minutes.
pub const FRESH_BEFORE_MS: u64 = 5 * 60 * 1000;

/// How far in the future `issuedAtMs` / `ts` may be (clock skew): 30 seconds.
pub const FRESH_AFTER_MS: u64 = 30 * 1000;

/// 401 `bad_signature`: the signature is not 64 bytes of unpadded base64url, or it does
/// not verify. Both answer the same (`From<SigError> for ApiError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    /// Not 64 bytes of base64url without padding.
    #[error("signature is not 64 bytes of unpadded base64url")]
    Malformed,
    /// Well formed, but not a signature of this message by this key.
    #[error("signature does not verify")]
    Mismatch,
}

/// Decodes a `signature` (or a read's `sig`): exactly 86 characters of the URL-safe
/// alphabet, no `=`, canonical trailing bits, 64 bytes.
pub fn decode_signature(text: &str) -> Result<[u8; SIGNATURE_LEN], SigError> {
    // 64 bytes are 86 symbols; refuse anything longer before decoding it.
    if text.len() != 86 {
        return Err(SigError::Malformed);
    }
    let bytes = b64::decode_url_nopad(text).map_err(|_| SigError::Malformed)?;
    bytes.try_into().map_err(|_| SigError::Malformed)
}

/// Why a key was refused. The texts fit a 400 answer to `PUT /admin/v1/signers/<keyId>`
/// and a CLI error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// `publicKey` is not standard base64 with padding.
    #[error("publicKey must be standard base64 (with padding) of 32 bytes")]
    PublicKeyNotBase64,
    /// `publicKey` decodes to the wrong length.
    #[error("publicKey must be 32 bytes, not {0}")]
    PublicKeyLength(usize),
    /// `publicKey` is a point of small order, or an encoding no key generator writes. Under
    /// a small-order key a signature can be made without any private key (under `01 00..00`,
    /// `01 00..00 || 00..00` verifies for every message), and ring's verifier does not
    /// refuse such keys, so enrolment must.
    #[error("publicKey is a weak or non-canonical Ed25519 key (a point of small order, or y not below 2^255-19); generate a key with `sealrelay keygen`")]
    PublicKeyWeak,
    /// No PEM block of the right label.
    #[error("no -----BEGIN PRIVATE KEY----- block (a PKCS#8 PEM file) found")]
    PemMissing,
    /// An encrypted PKCS#8 file.
    #[error("encrypted private keys are not supported; write the key without a passphrase")]
    PemEncrypted,
    /// The block has no end line, or its body is not base64.
    #[error("the PRIVATE KEY block is not well-formed PEM")]
    PemBody,
    /// The DER is not an Ed25519 PKCS#8 key ring accepts.
    #[error("not an Ed25519 PKCS#8 private key ({0})")]
    Pkcs8(String),
    /// The system random source failed.
    #[error("could not generate a key: no system randomness")]
    Random,
}

/// `ed25519:` then 1 to 64 of `[A-Za-z0-9._-]`: the shape of a signer key id (for the
/// `<keyId>` of the admin API's paths).
pub fn is_valid_key_id(key_id: &str) -> bool {
    request::is_signer_key_id(key_id)
}

/// An enrolled signer's Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; PUBLIC_KEY_LEN]);

impl PublicKey {
    /// Parses the enrolment form: standard base64 with padding of 32 bytes (44 characters),
    /// a canonical encoding of a point that is not of small order.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        let bytes = b64::decode_std(text).map_err(|_| KeyError::PublicKeyNotBase64)?;
        let len = bytes.len();
        let bytes: [u8; PUBLIC_KEY_LEN] = bytes
            .try_into()
            .map_err(|_| KeyError::PublicKeyLength(len))?;
        if is_weak_encoding(&bytes) {
            return Err(KeyError::PublicKeyWeak);
        }
        Ok(PublicKey(bytes))
    }

    /// From the raw 32 bytes.
    pub fn from_bytes(bytes: [u8; PUBLIC_KEY_LEN]) -> Self {
        PublicKey(bytes)
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; PUBLIC_KEY_LEN] {
        &self.0
    }

    /// The enrolment form: standard base64 with padding.
    pub fn to_base64(self) -> String {
        b64::encode_std(&self.0)
    }

    /// Checks `signature` over `message`. ring, not ed25519-dalek: `relay-bench verify`
    /// measured dalek about 10% faster with the key decoded per call (18% with it decoded
    /// once), under the 15% that would pay for a second Ed25519 implementation
    /// (BENCHMARKS.md).
    pub fn verify(&self, message: &[u8], signature: &[u8; SIGNATURE_LEN]) -> Result<(), SigError> {
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(message, signature)
            .map_err(|_| SigError::Mismatch)
    }
}

/// The y-coordinates (little-endian, sign bit clear) of the eight points of order dividing 8:
/// 0 (order 4), 1 (the identity), p - 1 (order 2) and the two of the order-8 points. Every
/// point with one of these y is of small order, whichever its sign bit.
const SMALL_ORDER_Y: [[u8; 32]; 5] = [
    [0; 32],
    {
        let mut y = [0; 32];
        y[0] = 1;
        y
    },
    {
        let mut y = [0xff; 32];
        y[0] = 0xec;
        y[31] = 0x7f;
        y
    },
    [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ],
    [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ],
];

/// Whether `key` encodes a point of small order, or its y is not reduced below
/// p = 2^255 - 19 (an encoding no generator writes; y = p and y = p + 1 are small-order
/// points in disguise).
fn is_weak_encoding(key: &[u8; PUBLIC_KEY_LEN]) -> bool {
    let mut y = *key;
    y[31] &= 0x7f;
    // y >= p: the top 31 bytes are all ones (bits 8..254) and the low byte is at least 0xed.
    let non_canonical = y[1..31].iter().all(|&b| b == 0xff) && y[31] == 0x7f && y[0] >= 0xed;
    non_canonical || SMALL_ORDER_Y.contains(&y)
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

/// Verifies a parsed push under its signer's enrolled key: the signature's form, then the
/// signature itself, both 401 `bad_signature` when they fail. This is the acceptance
/// table's third check; call it after the signer lookup (403), so an unknown signer with
/// a malformed signature answers 403.
pub fn verify_push(key: &PublicKey, push: &SignedPush) -> Result<(), SigError> {
    let signature = decode_signature(push.signature())?;
    key.verify(push.signing_bytes(), &signature)
}

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

/// A signer's Ed25519 private key, with the PKCS#8 document it came from.
///
/// `Debug` shows the public key only. The PKCS#8 bytes it holds are overwritten when it is
/// dropped, as are the copies [`PrivateKey::from_pem`] and [`PrivateKey::to_pem_v1`] make
/// on the way; a best effort: ring's key pair and the caller's PEM text are beyond reach.
pub struct PrivateKey {
    pair: Ed25519KeyPair,
    pkcs8: Vec<u8>,
    /// Where in `pkcs8` the 32-byte seed is: found, and checked to give the same key pair,
    /// when the document is loaded, so the v1 form written from it is this key.
    seed: std::ops::Range<usize>,
}

impl PrivateKey {
    /// A new key from the system's randomness, as PKCS#8 v2.
    pub fn generate() -> Result<Self, KeyError> {
        let doc =
            Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).map_err(|_| KeyError::Random)?;
        Self::from_pkcs8_der(doc.as_ref())
    }

    /// From PKCS#8 DER, v2 (with the public key, which must match) or v1.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, KeyError> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map_err(|e| KeyError::Pkcs8(e.to_string()))?;
        let no_seed = || KeyError::Pkcs8("no 32-byte seed this reader can find".to_owned());
        let seed = ed25519_seed(der).ok_or_else(no_seed)?;
        let same = Ed25519KeyPair::from_seed_unchecked(seed)
            .is_ok_and(|p| p.public_key().as_ref() == pair.public_key().as_ref());
        if !same {
            return Err(no_seed());
        }
        let start = seed.as_ptr() as usize - der.as_ptr() as usize;
        Ok(PrivateKey {
            pair,
            pkcs8: der.to_vec(),
            seed: start..start + seed.len(),
        })
    }

    /// From a PEM file's text: the first `-----BEGIN PRIVATE KEY-----` block (text before
    /// it is ignored, as RFC 7468 allows), its base64 body over any number of lines.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let Some(start) = text.find(PEM_BEGIN) else {
            return Err(if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
                KeyError::PemEncrypted
            } else {
                KeyError::PemMissing
            });
        };
        let rest = &text[start + PEM_BEGIN.len()..];
        let end = rest.find(PEM_END).ok_or(KeyError::PemBody)?;
        let body: String = rest[..end]
            .chars()
            .filter(|c| !matches!(c, ' ' | '\t' | '\r' | '\n'))
            .collect();
        let decoded = b64::decode_std(&body);
        wipe(&mut body.into_bytes());
        let mut der = decoded.map_err(|_| KeyError::PemBody)?;
        let key = Self::from_pkcs8_der(&der);
        wipe(&mut der);
        key
    }

    /// The PKCS#8 document as loaded or generated (v2 from [`PrivateKey::generate`]) as
    /// PEM: `-----BEGIN PRIVATE KEY-----`, base64 in lines of 64 characters,
    /// `-----END PRIVATE KEY-----`, each line ending in `\n`. Write it with mode 0600.
    ///
    /// OpenSSL 3.0 and pyca/cryptography do not read PKCS#8 v2 Ed25519 keys (they answer
    /// "unsupported" and "extra data"); for a file those tools must read, write
    /// [`PrivateKey::to_pem_v1`].
    pub fn to_pem(&self) -> String {
        pem(&self.pkcs8)
    }

    /// The key as PKCS#8 v1 PEM (RFC 8410's form: the 32-byte seed, no public key), the
    /// form `openssl genpkey -algorithm ed25519` writes and every tool reads.
    pub fn to_pem_v1(&self) -> String {
        let mut der = Vec::with_capacity(PKCS8_V1_PREFIX.len() + 32);
        der.extend_from_slice(&PKCS8_V1_PREFIX);
        der.extend_from_slice(&self.pkcs8[self.seed.clone()]);
        let text = pem(&der);
        wipe(&mut der);
        text
    }

    /// The public key, for enrolment.
    pub fn public_key(&self) -> PublicKey {
        let mut bytes = [0u8; PUBLIC_KEY_LEN];
        bytes.copy_from_slice(self.pair.public_key().as_ref());
        PublicKey(bytes)
    }

    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; SIGNATURE_LEN] {
        let mut out = [0u8; SIGNATURE_LEN];
        out.copy_from_slice(self.pair.sign(message).as_ref());
        out
    }
}

/// PKCS#8 v1 for Ed25519 up to the seed: SEQUENCE (46) { INTEGER 0, SEQUENCE { OID
/// 1.3.101.112 }, OCTET STRING (34) { OCTET STRING (32) seed } }.
const PKCS8_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// One DER element at the start of `der`: its tag, its content and what follows it.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81 => {
            let (&l, rest) = rest.split_first()?;
            (usize::from(l), rest)
        }
        0x82 => {
            let l = rest.get(..2)?;
            (usize::from(l[0]) << 8 | usize::from(l[1]), &rest[2..])
        }
        _ => return None,
    };
    let content = rest.get(..len)?;
    Some((tag, content, &rest[len..]))
}

/// The 32-byte seed of an Ed25519 PKCS#8 document (v1 or v2).
fn ed25519_seed(der: &[u8]) -> Option<&[u8]> {
    let (0x30, body, _) = der_element(der)? else {
        return None;
    };
    let (0x02, _version, rest) = der_element(body)? else {
        return None;
    };
    let (0x30, _algorithm, rest) = der_element(rest)? else {
        return None;
    };
    let (0x04, private_key, _) = der_element(rest)? else {
        return None;
    };
    let (0x04, seed, _) = der_element(private_key)? else {
        return None;
    };
    (seed.len() == 32).then_some(seed)
}

fn pem(der: &[u8]) -> String {
    let body = b64::encode_std(der);
    let mut out = String::with_capacity(body.len() + body.len() / 64 + 64);
    out.push_str(PEM_BEGIN);
    out.push('\n');
    for line in body.as_bytes().chunks(64) {
        // Base64 is ASCII, so every chunk is a whole string.
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(PEM_END);
    out.push('\n');
    out
}

/// Overwrites `bytes` with zeros; `black_box` keeps the compiler from dropping the write
/// as dead (best effort, without `unsafe`).
fn wipe(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(&bytes);
}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        wipe(&mut self.pkcs8);
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateKey")
            .field("public_key", &self.public_key())
            .finish_non_exhaustive()
    }
}

/// The `signature` for a request object: Ed25519 over the RFC 8785 bytes of `request`
/// without its `signature` member (present or not), as base64url without padding.
pub fn request_signature(key: &PrivateKey, request: &Map<String, Value>) -> String {
    let mut unsigned = request.clone();
    unsigned.shift_remove("signature");
    let bytes = canonical::canonical_bytes(&Value::Object(unsigned));
    b64::encode_url_nopad(&key.sign(&bytes))
}

/// Sets (or replaces) `request["signature"]`.
pub fn sign_request(key: &PrivateKey, request: &mut Map<String, Value>) {
    let signature = request_signature(key, request);
    request.insert("signature".to_owned(), Value::String(signature));
}

// ---------------------------------------------------------------------------------------
// Signed reads.

/// 401 `unauthorized`: the read's `Authorization` header is missing or malformed. Checked
/// before anything else on a read, so an unsigned read of a push that does not exist is
/// 401 too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("missing Authorization header")]
    Missing,
    /// An `Authorization` header this parser does not read; the text says why.
    #[error("malformed Authorization header: {0}")]
    Malformed(&'static str),
}

/// A parsed `Authorization: Signature keyId="…",ts="…",sig="…"` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAuthorization {
    key_id: String,
    ts_ms: u64,
    sig: String,
}

/// The bytes a read signature covers: `<METHOD>\n<path and query>\n<ts>`, `ts` in decimal
/// without leading zeros.
pub fn read_signing_message(method: &str, path_and_query: &str, ts_ms: u64) -> Vec<u8> {
    format!("{method}\n{path_and_query}\n{ts_ms}").into_bytes()
}

/// The header value for a signed read (`sealrelay admin`/`push --wait` use it).
pub fn read_authorization(
    key: &PrivateKey,
    key_id: &str,
    method: &str,
    path_and_query: &str,
    ts_ms: u64,
) -> String {
    let sig = key.sign(&read_signing_message(method, path_and_query, ts_ms));
    format!(
        "Signature keyId=\"{key_id}\",ts=\"{ts_ms}\",sig=\"{}\"",
        b64::encode_url_nopad(&sig)
    )
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|&b| !is_ows(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

/// A quoted value's allowed bytes: visible ASCII but `"` and `\` (no escapes, no spaces).
fn is_qdtext(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\'
}

fn parse_ts(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let canonical = !b.is_empty()
        && b.len() <= 16
        && b.iter().all(u8::is_ascii_digit)
        && (b[0] != b'0' || b.len() == 1);
    if !canonical {
        return None;
    }
    text.parse::<u64>()
        .ok()
        .filter(|&n| n <= request::MAX_ISSUED_AT_MS)
}

impl ReadAuthorization {
    /// Parses the header value (`None` when the request has no `Authorization` header; a
    /// request with more than one should be passed as malformed by the caller).
    ///
    /// The grammar, strictly: the scheme `Signature` (exact case), one or more spaces,
    /// then `name="value"` parameters separated by commas (spaces or tabs allowed around a
    /// comma, none around `=`), exactly the three names `keyId`, `ts` and `sig` (exact
    /// case) in any order, each exactly once. Values are quoted, without escapes or
    /// spaces; `keyId` has the signer key id shape, `ts` is decimal milliseconds (no sign,
    /// no leading zero, at most 2^53), `sig` is non-empty (its decoding is part of the
    /// signature check, 401 `bad_signature`). Leading and trailing spaces are ignored.
    pub fn parse(value: Option<&[u8]>) -> Result<Self, AuthError> {
        use AuthError::Malformed;
        let value = trim_ows(value.ok_or(AuthError::Missing)?);
        let rest = value
            .strip_prefix(b"Signature")
            .ok_or(Malformed("the scheme must be Signature"))?;
        if rest.is_empty() {
            return Err(Malformed("keyId, ts and sig are required"));
        }
        if rest[0] != b' ' {
            return Err(Malformed("the scheme must be Signature"));
        }
        let mut rest = trim_ows(rest);

        let (mut key_id, mut ts, mut sig) = (None, None, None);
        loop {
            let eq = rest
                .iter()
                .position(|&b| b == b'=')
                .ok_or(Malformed("parameters must be name=\"value\""))?;
            let slot = match &rest[..eq] {
                b"keyId" => &mut key_id,
                b"ts" => &mut ts,
                b"sig" => &mut sig,
                _ => return Err(Malformed("only keyId, ts and sig are allowed")),
            };
            let after = &rest[eq + 1..];
            let quoted = after
                .strip_prefix(b"\"")
                .ok_or(Malformed("parameter values must be quoted"))?;
            let close = quoted
                .iter()
                .position(|&b| !is_qdtext(b))
                .ok_or(Malformed("a quoted value is not closed"))?;
            if quoted[close] != b'"' {
                return Err(Malformed(
                    "a quoted value holds a space, a backslash or a byte outside visible ASCII",
                ));
            }
            if slot.is_some() {
                return Err(Malformed("a parameter appears twice"));
            }
            // qdtext is ASCII, so this is valid UTF-8.
            *slot = Some(String::from_utf8_lossy(&quoted[..close]).into_owned());
            rest = trim_ows(&quoted[close + 1..]);
            if rest.is_empty() {
                break;
            }
            rest = trim_ows(
                rest.strip_prefix(b",")
                    .ok_or(Malformed("parameters must be separated by commas"))?,
            );
            if rest.is_empty() {
                return Err(Malformed("a trailing comma"));
            }
        }

        let (Some(key_id), Some(ts), Some(sig)) = (key_id, ts, sig) else {
            return Err(Malformed("keyId, ts and sig are required"));
        };
        if !request::is_signer_key_id(&key_id) {
            return Err(Malformed("keyId is not a signer key id"));
        }
        let ts_ms = parse_ts(&ts).ok_or(Malformed("ts must be decimal milliseconds"))?;
        if sig.is_empty() {
            return Err(Malformed("sig is empty"));
        }
        Ok(ReadAuthorization { key_id, ts_ms, sig })
    }

    /// `keyId`: the signer to look up (unknown or revoked: 403).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// `ts`, milliseconds since the Unix epoch: check with [`check_fresh`] (422).
    pub fn ts_ms(&self) -> u64 {
        self.ts_ms
    }

    /// Checks `sig` over `<method>\n<path_and_query>\n<ts>` under the signer's key: 401
    /// `bad_signature` when it is not 64 bytes of base64url or does not verify.
    /// `path_and_query` is the request target as received (`/v2/pushes/<id>/events?after=3`).
    pub fn verify(
        &self,
        key: &PublicKey,
        method: &str,
        path_and_query: &str,
    ) -> Result<(), SigError> {
        let sig = decode_signature(&self.sig)?;
        key.verify(
            &read_signing_message(method, path_and_query, self.ts_ms),
            &sig,
        )
    }
}

/// 422 `stale_request`: `issuedAtMs` or `ts` is outside the freshness window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StaleError {
    /// More than 5 minutes before the relay's clock.
    #[error("the request was issued more than 5 minutes ago")]
    TooOld,
    /// More than 30 seconds after the relay's clock.
    #[error("the request was issued more than 30 seconds in the future")]
    TooNew,
}

/// Fresh when `now_ms - 300000 <= issued_ms <= now_ms + 30000` (both bounds included,
/// saturating at 0 and at `u64::MAX`).
pub fn check_fresh(issued_ms: u64, now_ms: u64) -> Result<(), StaleError> {
    if issued_ms < now_ms.saturating_sub(FRESH_BEFORE_MS) {
        Err(StaleError::TooOld)
    } else if issued_ms > now_ms.saturating_add(FRESH_AFTER_MS) {
        Err(StaleError::TooNew)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
