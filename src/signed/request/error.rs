//! Why a request body was refused.

/// Why a request body was refused: 400 `invalid_request`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub(super) path: String,
    pub(super) message: String,
}

impl RequestError {
    pub(super) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(super) fn body(message: &str) -> Self {
        Self::new("", message)
    }

    /// The short text for the error envelope's `message`; it names the member.
    pub fn message(&self) -> &str {
        &self.message
    }
}
