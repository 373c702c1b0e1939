//! The hop's authentication: `X-Relay-Region-Auth: t=<unix ms>,sig=<base64url without
//! padding of HMAC-SHA256(key, t "\n" method "\n" path-and-query "\n" hex SHA-256(body))>`.
//! Hops are signed with the current key and accepted under the current or the previous one
//! (a key is rotated without a refused hop), and only within 30 s of the receiver's clock.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::digest::{digest, SHA256};
use ring::hmac;

use super::home::hex;

/// How far a hop's `t` may be from the receiver's clock.
pub const FRESH_MS: i64 = 30_000;

/// Why a hop's authentication is refused (each answered 401, counted `refused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No header, or not `t=<digits>,sig=<base64url>`.
    Malformed,
    /// `t` is more than [`FRESH_MS`] from this replica's clock.
    Stale,
    /// The signature matches neither key.
    BadSignature,
}

impl Refusal {
    /// A short label (metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Stale => "stale",
            Refusal::BadSignature => "bad_signature",
        }
    }
}

/// The keys of this region: the current one signs and verifies, the previous one verifies.
pub struct Keys {
    current: hmac::Key,
    previous: Option<hmac::Key>,
}

impl Keys {
    /// From the key files' bytes (one trailing newline already removed).
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Self {
        Self {
            current: hmac::Key::new(hmac::HMAC_SHA256, current),
            previous: previous.map(|p| hmac::Key::new(hmac::HMAC_SHA256, p)),
        }
    }

    /// The header value for a hop sent at `t_ms`.
    pub fn sign(&self, t_ms: i64, method: &str, path_and_query: &str, body: &[u8]) -> String {
        let tag = hmac::sign(
            &self.current,
            message(t_ms, method, path_and_query, body).as_bytes(),
        );
        format!("t={t_ms},sig={}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks a received header against this replica's clock `now_ms`.
    pub fn verify(
        &self,
        header: Option<&str>,
        now_ms: i64,
        method: &str,
        path_and_query: &str,
        body: &[u8],
    ) -> Result<(), Refusal> {
        let (t_ms, sig) = parse(header.ok_or(Refusal::Malformed)?)?;
        if (now_ms - t_ms).abs() > FRESH_MS {
            return Err(Refusal::Stale);
        }
        let msg = message(t_ms, method, path_and_query, body);
        let ok = std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .any(|k| hmac::verify(k, msg.as_bytes(), &sig).is_ok());
        if ok {
            Ok(())
        } else {
            Err(Refusal::BadSignature)
        }
    }
}

/// The part of [`Keys::verify`] that needs no body: a well-formed header with a fresh `t`.
/// The region listener asks it before it reads a body, so a stranger's request holds no
/// memory and no time.
pub fn check_form_and_freshness(header: Option<&str>, now_ms: i64) -> Result<(), Refusal> {
    let (t_ms, _) = parse(header.ok_or(Refusal::Malformed)?)?;
    if (now_ms - t_ms).abs() > FRESH_MS {
        return Err(Refusal::Stale);
    }
    Ok(())
}

fn message(t_ms: i64, method: &str, path_and_query: &str, body: &[u8]) -> String {
    format!(
        "{t_ms}\n{method}\n{path_and_query}\n{}",
        hex(digest(&SHA256, body).as_ref())
    )
}

/// `t=<digits>,sig=<base64url without padding>`, nothing else.
fn parse(header: &str) -> Result<(i64, Vec<u8>), Refusal> {
    let (t, sig) = header.split_once(',').ok_or(Refusal::Malformed)?;
    let t = t.strip_prefix("t=").ok_or(Refusal::Malformed)?;
    let sig = sig.strip_prefix("sig=").ok_or(Refusal::Malformed)?;
    if t.is_empty() || t.len() > 15 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::Malformed);
    }
    let t_ms = t.parse().map_err(|_| Refusal::Malformed)?;
    let sig = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|_| Refusal::Malformed)?;
    if sig.len() != 32 {
        return Err(Refusal::Malformed);
    }
    Ok((t_ms, sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const OLD: &[u8] = b"fedcba9876543210fedcba9876543210";

    #[test]
    fn a_signed_hop_verifies_and_every_part_is_covered() {
        let keys = Keys::new(KEY, None);
        let h = keys.sign(1_000_000, "POST", "/?x=1", b"{}");
        assert!(h.starts_with("t=1000000,sig="));
        assert_eq!(
            keys.verify(Some(&h), 1_000_000, "POST", "/?x=1", b"{}"),
            Ok(())
        );
        for (m, pq, body) in [
            ("PUT", "/?x=1", &b"{}"[..]),
            ("POST", "/?x=2", b"{}"),
            ("POST", "/?x=1", b"{ }"),
        ] {
            assert_eq!(
                keys.verify(Some(&h), 1_000_000, m, pq, body),
                Err(Refusal::BadSignature)
            );
        }
        // Another key.
        let other = Keys::new(OLD, None);
        assert_eq!(
            other.verify(Some(&h), 1_000_000, "POST", "/?x=1", b"{}"),
            Err(Refusal::BadSignature)
        );
    }

    #[test]
    fn thirty_seconds_either_way_and_no_more() {
        let keys = Keys::new(KEY, None);
        let h = keys.sign(100_000, "GET", "/", b"");
        for now in [70_000, 130_000] {
            assert_eq!(keys.verify(Some(&h), now, "GET", "/", b""), Ok(()));
        }
        for now in [69_999, 130_001] {
            assert_eq!(
                keys.verify(Some(&h), now, "GET", "/", b""),
                Err(Refusal::Stale)
            );
        }
    }

    #[test]
    fn form_and_freshness_are_checked_without_the_body() {
        let keys = Keys::new(KEY, None);
        let h = keys.sign(100_000, "POST", "/", b"{}");
        assert_eq!(check_form_and_freshness(Some(&h), 100_000), Ok(()));
        assert_eq!(
            check_form_and_freshness(Some(&h), 200_000),
            Err(Refusal::Stale)
        );
        assert_eq!(
            check_form_and_freshness(Some("t=1"), 1),
            Err(Refusal::Malformed)
        );
        assert_eq!(check_form_and_freshness(None, 1), Err(Refusal::Malformed));
    }

    #[test]
    fn the_previous_key_verifies_but_never_signs() {
        let old = Keys::new(OLD, None);
        let rotating = Keys::new(KEY, Some(OLD));
        let by_old = old.sign(5, "GET", "/", b"");
        assert_eq!(rotating.verify(Some(&by_old), 5, "GET", "/", b""), Ok(()));
        let by_rotating = rotating.sign(5, "GET", "/", b"");
        assert_eq!(
            old.verify(Some(&by_rotating), 5, "GET", "/", b""),
            Err(Refusal::BadSignature)
        );
    }

    #[test]
    fn malformed_headers_are_named_as_such() {
        let keys = Keys::new(KEY, None);
        for h in [
            "",
            "t=1",
            "sig=abc,t=1",
            "t=,sig=",
            "t=-5,sig=AAAA",
            "t=1,sig=AAAA",
            "t=1,sig=not base64",
            "t=1234567890123456,sig=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(
                keys.verify(Some(h), 1, "GET", "/", b""),
                Err(Refusal::Malformed),
                "{h}"
            );
        }
        assert_eq!(
            keys.verify(None, 1, "GET", "/", b""),
            Err(Refusal::Malformed)
        );
    }

    proptest! {
        /// Any header text is refused or accepted without a panic, and only a signature made
        /// with the key over exactly this request is accepted.
        #[test]
        fn arbitrary_headers_never_verify(header in ".{0,120}") {
            let keys = Keys::new(KEY, None);
            prop_assert!(keys.verify(Some(&header), 1, "GET", "/", b"").is_err());
        }
    }
}
