//! A signer's private key: PKCS#8 PEM files (v2 written, v1 read too), and signing.

use std::fmt;

use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{Map, Value};

use super::super::b64;
use super::super::canonical;
use super::keys::*;

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
