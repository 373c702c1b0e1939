//! The device policy: `RELAY_DEDUP_WINDOW_S`, `RELAY_FLAP_*`, `RELAY_COOLDOWN_INTERVAL_S`,
//! `RELAY_RATE_*`.

use super::Reader;
use crate::policy::Policy;

/// The smallest refill rate of a bucket: with at most 1,000,000 tokens it keeps
/// `emission_us * capacity` at or below 1e15, so bucket arithmetic stays exact in Lua's
/// doubles and far from i64 overflow (see `src/policy/gcra.rs`).
pub(super) const MIN_REFILL_PER_S: f64 = 0.001;

pub(super) fn read(r: &mut Reader<'_>) -> Policy {
    let dedup = r.int("RELAY_DEDUP_WINDOW_S", 1, 86_400);
    let flap_max = r.int("RELAY_FLAP_MAX_FORWARDS", 1, 10_000) as u32;
    let flap_window = r.int("RELAY_FLAP_WINDOW_S", 1, 604_800);
    let cooldown = r.int("RELAY_COOLDOWN_INTERVAL_S", 1, 604_800);
    let reset = r.int("RELAY_FLAP_RESET_S", 1, 604_800);
    let capacity = r.int("RELAY_RATE_CAPACITY", 1, 1_000_000) as u32;
    let refill = r.float("RELAY_RATE_REFILL_PER_S", MIN_REFILL_PER_S, 10_000.0);
    Policy::from_seconds(
        dedup,
        flap_max,
        flap_window,
        cooldown,
        reset,
        capacity,
        refill,
    )
}
