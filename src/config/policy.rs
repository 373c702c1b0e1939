//! The device policy: `RELAY_DEDUP_WINDOW_S`, `RELAY_FLAP_*`, `RELAY_COOLDOWN_INTERVAL_S`,
//! `RELAY_RATE_*`.

use super::reader::Reader;
use super::vars::*;
use crate::policy::Policy;

pub(super) fn read(r: &mut Reader<'_>) -> Policy {
    let dedup = r.int(&RELAY_DEDUP_WINDOW_S);
    let flap_max = r.int(&RELAY_FLAP_MAX_FORWARDS) as u32;
    let flap_window = r.int(&RELAY_FLAP_WINDOW_S);
    let cooldown = r.int(&RELAY_COOLDOWN_INTERVAL_S);
    let reset = r.int(&RELAY_FLAP_RESET_S);
    let capacity = r.int(&RELAY_RATE_CAPACITY) as u32;
    let refill = r.float(&RELAY_RATE_REFILL_PER_S);
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
