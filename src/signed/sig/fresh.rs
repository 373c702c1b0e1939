//! The freshness window of `issuedAtMs` and a read's `ts`.

use super::keys::*;

/// 422 `stale_request`: `issuedAtMs` or `ts` is outside the freshness window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StaleError {
    /// More than 5 minutes before the relay's clock.
    #[error("the request was issued more than 5 minutes ago")]
    TooOld,
    /// More than 30 seconds after the relay's clock.
    #[error("the request was issued more than 30 seconds in the future")]
    TooNew,
}

/// Fresh when `now_ms - 300000 <= issued_ms <= now_ms + 30000` (both bounds included,
/// saturating at 0 and at `u64::MAX`).
pub fn check_fresh(issued_ms: u64, now_ms: u64) -> Result<(), StaleError> {
    if issued_ms < now_ms.saturating_sub(FRESH_BEFORE_MS) {
        Err(StaleError::TooOld)
    } else if issued_ms > now_ms.saturating_add(FRESH_AFTER_MS) {
        Err(StaleError::TooNew)
    } else {
        Ok(())
    }
}
