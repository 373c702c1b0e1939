//! What every service's registration shares (`tag`, optional `alert`, a `service` name),
//! the registration of a service the relay has no module for ([`Generic`]), and what a
//! write asks for ([`Notify`]). Each member is a type that checks itself as it is read, so a
//! registration that deserializes is a valid one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::push::Payload;

/// What the writer asked for (`X-Relay-Notify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// A visible notification (mutable-content, priority 10).
    Alert,
    /// A background push (content-available, priority 5).
    Silent,
}

impl Notify {
    /// `X-Relay-Notify`'s value: `alert`, `silent`; anything else is `Err` (400).
    pub fn parse(v: &[u8]) -> Result<Self, ()> {
        match v {
            b"alert" => Ok(Notify::Alert),
            b"silent" => Ok(Notify::Silent),
            _ => Err(()),
        }
    }
}

/// A string member that checks itself as it is read: `$name(String)`, read only when `$ok`
/// holds of it, else refused with `$why`; written back as the plain string.
macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, |$s:ident| $ok:expr, $why:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl TryFrom<String> for $name {
            type Error = &'static str;

            fn try_from($s: String) -> Result<Self, Self::Error> {
                if $ok {
                    Ok($name($s))
                } else {
                    Err($why)
                }
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }
    };
}

checked_string!(
    /// `service`: 1 to 16 of `a-z 0-9 -`, starting with a letter.
    ServiceName,
    |s| (1..=16).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
    "service must be 1 to 16 of a-z 0-9 -, starting with a letter"
);

impl ServiceName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

checked_string!(
    /// `tag`: 1 to 64 of `A-Z a-z 0-9 _ -`.
    Tag,
    |s| (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
    "tag must be 1 to 64 of A-Z a-z 0-9 _ -"
);

checked_string!(
    /// `alert`: the text an alert push shows, at most 160 characters.
    Alert,
    |s| s.chars().count() <= 160,
    "alert must be a string of at most 160 characters"
);

checked_string!(
    /// A member of a [`Generic`] registration: a string of at most 256 characters.
    Member,
    |s| s.chars().count() <= 256,
    "every other member must be a string of at most 256 characters"
);

/// What every service's wake-up carries: the registration's tag, and for an alert its
/// text (`New message` when the registration gives none).
pub fn wake(tag: &Tag, alert: Option<&Alert>, notify: Notify) -> Payload {
    Payload::Wake {
        tag: tag.0.clone(),
        alert: (notify == Notify::Alert)
            .then(|| alert.map_or("New message", |a| a.0.as_str()).to_owned()),
    }
}

/// At most this many members besides `service`, `tag` and `alert` in a [`Generic`]
/// registration.
pub const MAX_GENERIC_MEMBERS: usize = 8;

/// The registration of a service the relay has no module for: kept, never sent.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generic {
    /// The service it names.
    pub service: ServiceName,
    /// The tag.
    pub tag: Tag,
    /// The alert text, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<Alert>,
    /// Every other member (at most [`MAX_GENERIC_MEMBERS`]).
    #[serde(flatten)]
    pub others: BTreeMap<String, Member>,
}

impl std::fmt::Debug for Generic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Other members may hold an address at the service: only their names print.
        f.debug_struct("Generic")
            .field("service", &self.service)
            .field("members", &self.others.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
