//! Values that must never be printed: signing keys, bearer tokens, shared secrets. A leaf
//! module.

use std::fmt;

/// A secret string. `Debug` prints `[redacted]`; the value is reached only through
/// [`Secret::expose`], at the one place that uses it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Secret bytes (a shared key read from a file as is). `Debug` prints `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps secret bytes.
    pub fn new(b: Vec<u8>) -> Self {
        Self(b)
    }

    /// The bytes themselves.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn never_prints() {
        let s = super::Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(s.expose(), "hunter2");
        let b = super::SecretBytes::new(b"k".to_vec());
        assert_eq!(format!("{b:?}"), "[redacted]");
    }
}
