//! The alert every front-end delivers: one sealed ciphertext for one device, with its
//! coalescing and flap keys and its priority. Protocol v1 parses it from an envelope
//! ([`crate::v1::envelope`]), signed pushes from each target of a request; both use the
//! field rules here, so "each target follows v1's rules" holds by construction.

use std::fmt;

use crate::device::DeviceToken;
use crate::store::AlertKey;

/// The ciphertext cap daemons in the field fit to (see `DESIGN.md`).
pub const DEFAULT_MAX_CIPHERTEXT_CHARS: usize = 3800;

/// A sealed box carries 48 bytes of overhead (32-byte ephemeral key and 16-byte MAC); with
/// a minimal payload its base64 is at least this long.
pub const MIN_CIPHERTEXT_CHARS: usize = 68;

/// The X-Wing hybrid suite's encapsulation is far larger than X25519's.
pub const MIN_CIPHERTEXT_CHARS_XWING: usize = 1520;

/// The suite an alert means when it names none.
pub const DEFAULT_SUITE: &str = "x25519";

/// Exactly 32 lowercase hex characters: the `collapseId` and `flapId` shape.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Id32(String);

impl Id32 {
    /// Parses a 32-character lowercase hex id.
    pub fn parse(raw: &str) -> Option<Self> {
        is_id32(raw).then(|| Self(raw.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 8 characters: how logs name an alert.
    pub fn prefix8(&self) -> &str {
        &self.0[..8]
    }
}

impl fmt::Debug for Id32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.prefix8())
    }
}

/// Whether `s` is 32 lowercase hex characters.
pub fn is_id32(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The interruption level the sender asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Breaks through scheduled summaries, with sound.
    TimeSensitive,
    /// Delivered quietly, no sound.
    Passive,
}

impl Priority {
    /// The wire name (APNs sends it as its `interruption-level`).
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::TimeSensitive => "time-sensitive",
            Priority::Passive => "passive",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "time-sensitive" => Some(Priority::TimeSensitive),
            "passive" => Some(Priority::Passive),
            _ => None,
        }
    }
}

/// One validated alert.
#[derive(Debug, Clone)]
pub struct Alert {
    /// Where the notification goes.
    pub device: DeviceToken,
    /// The sealing suite, forwarded to the app.
    pub suite: String,
    /// The sealed alert, standard base64, never decoded or logged by the relay.
    pub ciphertext: String,
    /// One run of one alert.
    pub collapse_id: Id32,
    /// The alert's source across runs, when the sender gives one.
    pub flap_id: Option<Id32>,
    /// Interruption level.
    pub priority: Priority,
    /// Whether this is a daemon event (routing metadata only).
    pub event: bool,
}

impl Alert {
    /// The key flap suppression counts forwards under: the `flapId` when the alert has one,
    /// else its `collapseId`.
    pub fn flap_key(&self) -> &str {
        self.flap_id
            .as_ref()
            .map_or(self.collapse_id.as_str(), Id32::as_str)
    }

    /// The alert as the policy's state knows it.
    pub fn key(&self) -> AlertKey<'_> {
        AlertKey::new(&self.device, self.collapse_id.as_str(), self.flap_key())
    }
}

/// Whether `s` is a suite identifier: 1 to 16 of `[a-z0-9-]` starting with a letter or
/// digit.
pub fn is_suite(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=16).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Bytes of the standard base64 alphabet (without `=`).
const BASE64_STD: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
        i += 1;
    }
    t
};

/// Standard base64 with padding, checked by alphabet, padding and length (not decoded).
pub fn is_base64_std_padded(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return false;
    }
    b[..b.len() - pad]
        .iter()
        .fold(true, |ok, &c| ok & BASE64_STD[c as usize])
}

/// Why a ciphertext was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CiphertextError {
    /// Over the configured cap.
    TooLong,
    /// Not padded standard base64, or shorter than the suite's sealed box.
    NotSealedBox,
}

/// Checks a non-empty ciphertext against the cap, the alphabet and the suite's floor, in
/// that order.
pub fn check_ciphertext(c: &str, suite: &str, max_chars: usize) -> Result<(), CiphertextError> {
    if c.len() > max_chars {
        return Err(CiphertextError::TooLong);
    }
    let min = if suite == "xwing" {
        MIN_CIPHERTEXT_CHARS_XWING
    } else {
        MIN_CIPHERTEXT_CHARS
    };
    if !is_base64_std_padded(c) || c.len() < min {
        return Err(CiphertextError::NotSealedBox);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Ciphertexts of a sealed box's length whose base64 is malformed: a dangling
    /// character, a URL-safe one, padding of three, a character after padding.
    pub(crate) fn not_base64() -> [String; 4] {
        [
            format!("{}A", "A".repeat(68)),
            format!("{}-", "A".repeat(71)),
            format!("{}===", "A".repeat(69)),
            format!("{}=A", "A".repeat(70)),
        ]
    }

    #[test]
    fn ciphertext_rules_in_order() {
        let ok = "A".repeat(68);
        assert_eq!(check_ciphertext(&ok, "x25519", 3800), Ok(()));
        assert_eq!(
            check_ciphertext(&"!".repeat(3801), "x25519", 3800),
            Err(CiphertextError::TooLong)
        );
        assert_eq!(
            check_ciphertext(&"A".repeat(64), "x25519", 3800),
            Err(CiphertextError::NotSealedBox)
        );
        assert_eq!(
            check_ciphertext(&"A".repeat(1516), "xwing", 3800),
            Err(CiphertextError::NotSealedBox)
        );
        assert_eq!(check_ciphertext(&"A".repeat(1520), "xwing", 3800), Ok(()));
        for bad in not_base64() {
            assert_eq!(
                check_ciphertext(&bad, "x25519", 3800),
                Err(CiphertextError::NotSealedBox),
                "{bad}"
            );
        }
        assert_eq!(
            check_ciphertext(&format!("{}==", "A".repeat(70)), "x25519", 3800),
            Ok(())
        );
    }

    #[test]
    fn suites_and_ids() {
        assert!(is_suite("x25519") && is_suite("9-a") && is_suite("xwing"));
        for bad in ["", "-x", "X25519", &"a".repeat(17), "a_b"] {
            assert!(!is_suite(bad), "{bad}");
        }
        assert!(Id32::parse(&"a".repeat(32)).is_some());
        assert!(Id32::parse(&"A".repeat(32)).is_none());
        assert!(Id32::parse(&"a".repeat(31)).is_none());
        assert_eq!(Priority::parse("passive"), Some(Priority::Passive));
        assert_eq!(
            Priority::parse(Priority::TimeSensitive.as_str()),
            Some(Priority::TimeSensitive)
        );
    }
}
