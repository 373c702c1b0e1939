//! Signatures and public keys: their forms, a signer's enrolled key, and a push's signature
//! verified under it.

use std::fmt;

use ring::signature::{UnparsedPublicKey, ED25519};

use super::super::b64;
use super::super::request::{self, SignedPush};

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
pub struct PublicKey(pub(super) [u8; PUBLIC_KEY_LEN]);

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
