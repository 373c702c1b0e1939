//! What every layer knows about a device: its push token and, for APNs, the environment it
//! lives on. A leaf module: it imports nothing of the crate.

use std::fmt;

/// An APNs device token: 16 to 512 hex characters, lowercased.
///
/// Never printed: `Display` and `Debug` show only [`DeviceToken::hash8`], so a token cannot
/// reach a log line by accident.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeviceToken(String);

impl DeviceToken {
    /// Parses a token as a sender writes it (either case; odd lengths allowed, since Apple
    /// calls the length variable).
    pub fn parse(raw: &str) -> Option<Self> {
        if !(16..=512).contains(&raw.len()) || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Self(raw.to_ascii_lowercase()))
    }

    /// The token itself, for the APNs request path and the sealed retry queue only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the token.
    pub fn digest(&self) -> [u8; 32] {
        sha256(self.0.as_bytes())
    }

    /// The first 8 hex characters of SHA-256 of the token: how logs name a device.
    pub fn hash8(&self) -> String {
        hex(&self.digest()[..4])
    }

    /// The first 16 hex characters of SHA-256 of the token: how a receipt names a target.
    pub fn hash16(&self) -> String {
        hex(&self.digest()[..8])
    }

    /// The first 32 hex characters of SHA-256 of the token: how stored state names a
    /// device, so a copy of the store reveals no token.
    pub fn store_key(&self) -> String {
        hex(&self.digest()[..16])
    }
}

impl fmt::Debug for DeviceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceToken({})", self.hash8())
    }
}

impl fmt::Display for DeviceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hash8())
    }
}

/// The APNs environment a device token belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Environment {
    /// `api.push.apple.com`: App Store and TestFlight builds.
    Production,
    /// `api.sandbox.push.apple.com`: development builds.
    Sandbox,
}

impl Environment {
    /// Both environments.
    pub const ALL: [Environment; 2] = [Environment::Production, Environment::Sandbox];

    /// The metric label and log name.
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "production",
            Environment::Sandbox => "sandbox",
        }
    }

    /// The environment that is not this one.
    pub fn other(self) -> Self {
        match self {
            Environment::Production => Environment::Sandbox,
            Environment::Sandbox => Environment::Production,
        }
    }

    /// One-letter code used in stored state.
    pub fn code(self) -> &'static str {
        match self {
            Environment::Production => "p",
            Environment::Sandbox => "s",
        }
    }

    /// Inverse of [`Environment::code`].
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "p" => Some(Environment::Production),
            "s" => Some(Environment::Sandbox),
            _ => None,
        }
    }
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A random (version 4) UUID, lowercase 8-4-4-4-12: APNs notification ids, signed-push
/// request ids.
pub fn uuid4() -> String {
    let mut b = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_print_and_name_devices_by_hash() {
        let t = DeviceToken::parse("ABCDEF0123456789abcdef0123456789").unwrap();
        assert_eq!(t.expose(), "abcdef0123456789abcdef0123456789");
        assert_eq!(format!("{t}").len(), 8);
        assert!(!format!("{t:?}").contains("abcdef0123"));
        assert_eq!(t.store_key().len(), 32);
        assert_eq!(t.hash16().len(), 16);
        assert!(t.store_key().starts_with(&t.hash16()));
        assert!(t.hash16().starts_with(&t.hash8()));
        assert!(DeviceToken::parse(&"a".repeat(15)).is_none());
        assert!(DeviceToken::parse(&"a".repeat(17)).is_some());
        assert!(DeviceToken::parse(&"a".repeat(513)).is_none());
        assert!(DeviceToken::parse("zzzzzzzzzzzzzzzz").is_none());
    }

    #[test]
    fn environment_codes_round_trip() {
        for e in [Environment::Production, Environment::Sandbox] {
            assert_eq!(Environment::from_code(e.code()), Some(e));
            assert_eq!(e.other().other(), e);
        }
        assert_eq!(Environment::from_code("x"), None);
    }
}
