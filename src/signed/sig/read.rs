//! Signed reads: the `Authorization: Signature` header, its message and its checks.

use super::super::b64;
use super::super::request;
use super::keys::*;
use super::private::*;

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
    pub(super) sig: String,
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
