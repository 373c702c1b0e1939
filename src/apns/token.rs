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
        crate::telemetry::provider_token_refreshed();
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
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .unwrap()
            .serialize_pem()
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
