//! The provider token: an ES256 JWT signed with the relay's APNs auth key.
//!
//! Apple rejects tokens older than an hour and throttles refreshes more often than every
//! 20 minutes (`TooManyProviderTokenUpdates`), so one token is reused for
//! [`REFRESH_AFTER_S`] (45 minutes) and replaced early only when APNs answers
//! `ExpiredProviderToken` for that very token.

use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

/// How long one token is reused.
pub const REFRESH_AFTER_S: u64 = 45 * 60;

/// Why a signing key was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    iat: u64,
}

/// The private scalar of an EC key given as PEM (PKCS#8, as Apple's `.p8` files are, or
/// SEC1 `EC PRIVATE KEY`): the key material itself, the same however the PEM was wrapped or
/// encoded, so every replica derives the same queue key from it.
pub fn key_scalar(pem: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
    let ec_private_key = match PrivateKeyDer::from_pem_slice(pem.as_bytes()).ok()? {
        PrivateKeyDer::Pkcs8(der) => {
            // PrivateKeyInfo ::= SEQUENCE { version, algorithm, privateKey OCTET STRING, .. }
            let mut info = der::Reader::new(der::Reader::new(der.secret_pkcs8_der()).take(0x30)?);
            info.take(0x02)?;
            info.take(0x30)?;
            info.take(0x04)?.to_vec()
        }
        PrivateKeyDer::Sec1(der) => der.secret_sec1_der().to_vec(),
        _ => return None,
    };
    // ECPrivateKey ::= SEQUENCE { version INTEGER (1), privateKey OCTET STRING, .. }
    let mut key = der::Reader::new(der::Reader::new(&ec_private_key).take(0x30)?);
    key.take(0x02)?;
    let scalar = key.take(0x04)?;
    (!scalar.is_empty()).then(|| scalar.to_vec())
}

/// Just enough DER to walk to a key's private scalar.
mod der {
    /// Reads tag-length-value items from a byte string.
    pub(super) struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        pub(super) fn new(b: &'a [u8]) -> Self {
            Self(b)
        }

        /// The value of the next item, which must have tag `tag`.
        pub(super) fn take(&mut self, tag: u8) -> Option<&'a [u8]> {
            let (&t, rest) = self.0.split_first()?;
            if t != tag {
                return None;
            }
            let (&first, mut rest) = rest.split_first()?;
            let len = if first < 0x80 {
                first as usize
            } else {
                let n = (first & 0x7f) as usize;
                if n == 0 || n > 4 || rest.len() < n {
                    return None;
                }
                let len = rest[..n]
                    .iter()
                    .fold(0usize, |acc, &b| acc << 8 | b as usize);
                rest = &rest[n..];
                len
            };
            if rest.len() < len {
                return None;
            }
            let (value, tail) = rest.split_at(len);
            self.0 = tail;
            Some(value)
        }
    }
}

/// Checks that `pem` is a usable ES256 key by signing once.
pub fn check_key(pem: &str) -> Result<(), KeyError> {
    let key = EncodingKey::from_ec_pem(pem.as_bytes())
        .map_err(|_| KeyError("not an EC private key in PEM".into()))?;
    sign(&key, "CHECK00000", "CHECK00000", 0).map(|_| ())
}

fn sign(key: &EncodingKey, key_id: &str, team_id: &str, iat: u64) -> Result<String, KeyError> {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key_id.to_owned());
    jsonwebtoken::encode(&header, &Claims { iss: team_id, iat }, key)
        .map_err(|_| KeyError("the key cannot sign ES256 (is it a P-256 key?)".into()))
}

#[derive(Clone)]
struct Issued {
    jwt: Arc<str>,
    iat: u64,
}

/// Signs, caches and refreshes the provider token.
pub struct ProviderToken {
    key: EncodingKey,
    key_id: String,
    team_id: String,
    current: Mutex<Option<Issued>>,
}

impl std::fmt::Debug for ProviderToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderToken")
            .field("key_id", &self.key_id)
            .field("team_id", &self.team_id)
            .finish_non_exhaustive()
    }
}

impl ProviderToken {
    /// A token source for this key.
    pub fn new(pem: &str, key_id: &str, team_id: &str) -> Result<Self, KeyError> {
        check_key(pem)?;
        Ok(Self {
            key: EncodingKey::from_ec_pem(pem.as_bytes())
                .map_err(|_| KeyError("not an EC private key in PEM".into()))?,
            key_id: key_id.to_owned(),
            team_id: team_id.to_owned(),
            current: Mutex::new(None),
        })
    }

    /// The token to send at `now_s` (Unix seconds), signing a new one when there is none
    /// or the current one is [`REFRESH_AFTER_S`] old.
    pub fn get(&self, now_s: u64) -> Arc<str> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(issued) = cur.as_ref() {
            if now_s.saturating_sub(issued.iat) < REFRESH_AFTER_S && issued.iat <= now_s + 60 {
                return issued.jwt.clone();
            }
        }
        let jwt: Arc<str> = sign(&self.key, &self.key_id, &self.team_id, now_s)
            .expect("the key signed at start-up")
            .into();
        *cur = Some(Issued {
            jwt: jwt.clone(),
            iat: now_s,
        });
        crate::metrics::provider_token_refreshed();
        jwt
    }

    /// APNs said `ExpiredProviderToken` for `rejected`: drop it, unless another request has
    /// already replaced it (so a burst of rejections causes one refresh, not many).
    pub fn invalidate(&self, rejected: &str) {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.as_ref().is_some_and(|i| &*i.jwt == rejected) {
            *cur = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> String {
        sealrelay_testkit::pki::generate_auth_key().unwrap().0
    }

    /// The same key as PKCS#8 with other line breaks, as PKCS#8 with `\r\n`, and as SEC1:
    /// one scalar, so replicas given the key in any of these forms seal the queue alike.
    #[test]
    fn the_scalar_is_the_same_in_every_encoding_of_a_key() {
        let pem = key();
        let a = key_scalar(&pem).expect("PKCS#8");
        assert_eq!(a.len(), 32);
        assert_eq!(key_scalar(&pem.replace('\n', "\r\n")), Some(a.clone()));
        // Re-wrap the base64 body at 76 columns instead of 64.
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let rewrapped: Vec<String> = body
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let pem76 = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            rewrapped.join("\n")
        );
        assert_eq!(key_scalar(&pem76), Some(a.clone()));
        // The ECPrivateKey inside the PKCS#8, as a SEC1 PEM.
        use base64::Engine;
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .unwrap();
        let mut info = der::Reader::new(der::Reader::new(&der).take(0x30).unwrap());
        info.take(0x02).unwrap();
        info.take(0x30).unwrap();
        let sec1 = info.take(0x04).unwrap();
        let sec1_pem = format!(
            "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(sec1)
        );
        assert_eq!(key_scalar(&sec1_pem), Some(a.clone()));
        // Another key has another scalar; garbage has none.
        assert_ne!(key_scalar(&key()), Some(a));
        assert_eq!(key_scalar("not a key"), None);
        assert_eq!(
            key_scalar("-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n"),
            None
        );
    }

    #[test]
    fn reused_for_45_minutes_then_refreshed() {
        let t = ProviderToken::new(&key(), "KEY1234567", "TEAM123456").unwrap();
        let a = t.get(1_000_000);
        assert!(Arc::ptr_eq(&a, &t.get(1_000_000 + REFRESH_AFTER_S - 1)));
        let b = t.get(1_000_000 + REFRESH_AFTER_S);
        assert_ne!(a, b);
    }

    #[test]
    fn invalidate_refreshes_only_the_rejected_token() {
        let t = ProviderToken::new(&key(), "KEY1234567", "TEAM123456").unwrap();
        let a = t.get(1_000_000);
        t.invalidate("some-older-token");
        assert!(Arc::ptr_eq(&a, &t.get(1_000_001)));
        t.invalidate(&a);
        let b = t.get(1_000_002);
        assert_ne!(a, b);
    }

    #[test]
    fn header_and_claims() {
        let t = ProviderToken::new(&key(), "KEY1234567", "TEAM123456").unwrap();
        let jwt = t.get(1_700_000_000);
        let header = jsonwebtoken::decode_header(&jwt).unwrap();
        assert_eq!(header.alg, Algorithm::ES256);
        assert_eq!(header.kid.as_deref(), Some("KEY1234567"));
        let payload = jwt.split('.').nth(1).unwrap();
        use base64_decode as b64;
        let claims: serde_json::Value = serde_json::from_slice(&b64(payload)).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({"iss": "TEAM123456", "iat": 1_700_000_000u64})
        );
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        // URL-safe, unpadded: enough of a decoder for a test.
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => panic!("bad base64url"),
        };
        let mut out = Vec::new();
        let mut acc = 0u32;
        let mut bits = 0;
        for &c in s.as_bytes() {
            acc = (acc << 6) | val(c) as u32;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
                acc &= (1 << bits) - 1;
            }
        }
        out
    }

    #[test]
    fn rejects_a_non_key() {
        assert!(check_key("not a key").is_err());
    }
}
