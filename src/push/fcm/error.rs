//! Why a service account key or a message is refused. No message ever carries a value that
//! could be secret (the private key, a registration token): fields are named, positions and
//! lengths given, values never quoted.

/// A service account key that cannot be used. The configuration prefixes the variable it
/// came from (`FCM_SERVICE_ACCOUNT_FILE=<path>` or `FCM_SERVICE_ACCOUNT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceAccountError {
    /// The text is not JSON. Only the position is given: the text around it may be the key.
    #[error("not valid JSON (syntax error at line {line}, column {column})")]
    NotJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
    },
    /// The JSON is not an object.
    #[error("not a JSON object")]
    NotObject,
    /// A required field is absent, null or blank.
    #[error("field `{field}` is missing")]
    Missing {
        /// The field's name.
        field: &'static str,
    },
    /// A field is present but unusable.
    #[error("field `{field}` is invalid: {reason}")]
    Invalid {
        /// The field's name.
        field: &'static str,
        /// What is wrong, in words that never quote the value.
        reason: String,
    },
}

/// Why a message was not built (and nothing was sent). The front-end validates
/// registrations first, so this means a caller's bug; it never quotes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MessageError {
    /// The registration token is not 32 to 1024 of `A-Z a-z 0-9 _ : -`.
    #[error("registration token: must be 32 to 1024 of A-Z a-z 0-9 _ : - (got {len} bytes{})", if *.bad_char { ", some outside that set" } else { "" })]
    InvalidToken {
        /// Its length in bytes.
        len: usize,
        /// Whether it holds a byte outside the set.
        bad_char: bool,
    },
    /// The tag is not 1 to 64 of `A-Z a-z 0-9 _ -`.
    #[error("tag: must be 1 to 64 of A-Z a-z 0-9 _ -")]
    InvalidTag,
    /// The alert text is longer than 160 characters.
    #[error("alert: at most 160 characters (got {len})")]
    AlertTooLong {
        /// Its length in characters.
        len: usize,
    },
}
