//! Request bodies read whole, up to a limit and within a deadline, as every front-end reads
//! them. A declared `Content-Length` over the limit is refused before a byte is read; a body
//! that grows past it is refused when it does; one that does not arrive in time is told
//! apart from one that breaks. A leaf: it imports nothing of the crate.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::header;

/// Why a body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit, declared or sent.
    TooLarge,
    /// The connection broke, or the body was malformed.
    Unreadable,
    /// It did not arrive within the deadline.
    TimedOut,
}

/// The body of `req`, at most `max` bytes, within `deadline`.
pub async fn read(req: Request, max: usize, deadline: Duration) -> Result<Bytes, BodyError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge);
    }
    match tokio::time::timeout(deadline, axum::body::to_bytes(req.into_body(), max)).await {
        Err(_) => Err(BodyError::TimedOut),
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                BodyError::TooLarge
            } else {
                BodyError::Unreadable
            })
        }
    }
}
