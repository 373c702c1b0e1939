//! The generic cell rate algorithm: a token bucket kept as one instant, its *theoretical
//! arrival time*. Exact in integer arithmetic, so the Lua mirror (`store/connection/gcra.lua`,
//! prepended to every script that takes a token) computes the very same numbers; a
//! differential test binds the two.
//!
//! Bounds: instants are microseconds since the Unix epoch (about 1.8e15 today) and the
//! configuration keeps `emission_us * capacity` at or below 1e15, so every intermediate
//! value stays below 2^53 and Lua's doubles represent it exactly.

/// A bucket's shape: `capacity` tokens in a burst, one back every `emission_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens in a full bucket.
    pub capacity: i64,
    /// Microseconds per token.
    pub emission_us: i64,
}

/// Takes one token from a GCRA bucket with arrival time `tat_us`: the new arrival time, or
/// `Err` with the whole seconds (at least 1) until a token is back. A stored `tat_us`
/// behind `now_us` counts as a full bucket; one ahead of it (a lagging clock) is never
/// moved back.
pub fn gcra_take(tat_us: i64, now_us: i64, emission_us: i64, capacity: i64) -> Result<i64, u64> {
    let tat = tat_us.max(now_us);
    let tolerance = emission_us * (capacity - 1);
    if tat - now_us > tolerance {
        let wait_us = tat - now_us - tolerance;
        return Err(((wait_us + 999_999) / 1_000_000).max(1) as u64);
    }
    Ok(tat + emission_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_token_per_emission() {
        let (e, cap, now) = (500_000, 3, 1_000_000_000);
        let mut tat = 0;
        for _ in 0..3 {
            tat = gcra_take(tat, now, e, cap).unwrap();
        }
        assert_eq!(gcra_take(tat, now, e, cap), Err(1));
        assert!(gcra_take(tat, now + 499_999, e, cap).is_err());
        assert!(gcra_take(tat, now + 500_000, e, cap).is_ok());
    }

    #[test]
    fn capacity_one_and_long_intervals() {
        let hour = 3_600_000_000;
        let tat = gcra_take(0, 0, hour, 1).unwrap();
        assert_eq!(gcra_take(tat, 1, hour, 1), Err(3600));
        assert_eq!(gcra_take(tat, hour, hour, 1), Ok(2 * hour));
    }
}
