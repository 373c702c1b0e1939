//! Wall-clock time, injectable: the relay asks a [`Clock`], tests drive a manual one.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Where "now" comes from.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The system clock.
    #[default]
    System,
    /// A clock tests set and advance.
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// A manual clock starting at `ms`.
    pub fn manual(ms: i64) -> Self {
        Clock::Manual(Arc::new(AtomicI64::new(ms)))
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    /// Microseconds since the Unix epoch (a manual clock's milliseconds, in microseconds).
    pub fn now_us(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0),
            Clock::Manual(t) => t.load(Ordering::SeqCst).saturating_mul(1000),
        }
    }

    /// Moves a manual clock forward (no effect on the system clock).
    pub fn advance_ms(&self, ms: i64) {
        if let Clock::Manual(t) = self {
            t.fetch_add(ms, Ordering::SeqCst);
        }
    }
}
