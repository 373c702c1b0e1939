//! The delivery policy: a pure function of (state, now, config).
//!
//! This module is the readable specification of what the relay decides for one envelope.
//! Both stores run exactly this logic: the in-memory store calls these functions under a
//! lock, and the Redis store's Lua script (`store/policy_admit.lua`) mirrors them line for line,
//! which a differential property test checks.
//!
//! Decisions are taken in a fixed order, per device:
//!
//! 0. **Dead tokens**: a token APNs rejected for good is answered 410 from memory for a
//!    day, without calling APNs (kept by the store beside this state, see [`DeadReason`]).
//! 1. **Coalesce** on `collapseId`: the same alert within [`Policy::dedup_ms`] of its last
//!    *forward*, or while its first forward waits in the retry queue (a *hold*), is answered
//!    `coalesced` and changes nothing.
//! 2. **Flap suppression** on the flap key (`flapId`, else `collapseId`): once
//!    [`Policy::flap_max_forwards`] forwards fall inside [`Policy::flap_window_ms`], the key
//!    is *cooled*. While cooled, one reminder is forwarded per [`Policy::cooldown_ms`] and
//!    every other post is `suppressed`; every post keeps it cooled, and it warms again after
//!    [`Policy::reset_ms`] without a post.
//! 3. **Rate limit** on the device: a token bucket of [`Policy::rate_capacity`] tokens. Only
//!    a forward takes a token. An empty bucket answers 429 with the whole seconds until one
//!    token is back, and changes nothing.
//!
//! A forward is recorded (the collapse record and the flap count) *before* the APNs call,
//! so a duplicate arriving meanwhile coalesces; if APNs refuses it, [`rollback`] removes
//! exactly that record so the alert is eligible again. The token it took is not refunded.
//!
//! Time is integer milliseconds since the Unix epoch. The bucket is kept as a *theoretical
//! arrival time* in microseconds (GCRA), which is a token bucket expressed as one instant:
//! exact in integer arithmetic, so the Lua mirror computes the very same numbers. Stored
//! instants never move backwards, so a replica whose clock lags cannot refill a bucket or
//! reopen a window early.

mod gcra;

use std::collections::HashMap;

pub use crate::device::Environment;
pub use gcra::{gcra_take, Bucket};

/// How long a notification stays worth delivering: the protocol's staleness window. Apps
/// treat a payload older than 10 minutes as stale, so a notification is never delivered
/// later than this after its acceptance, and a hold (a queued alert that keeps coalescing)
/// lasts at most this long.
pub const STALENESS_S: u64 = 600;

/// How far replicas' clocks may disagree. Pruning keeps this margin: it drops only what
/// decides nothing even for a replica whose clock lags by up to this much, so a lagging
/// replica cannot find a window reopened by another replica's pruning; stored state also
/// outlives the horizon by this much.
pub const CLOCK_SKEW_MS: i64 = 60_000;

/// The policy's parameters, in the units the policy computes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Coalesce the same (device, collapseId) within this time of its last forward.
    pub dedup_ms: i64,
    /// Forwards of one flap key inside the window that cool it.
    pub flap_max_forwards: u32,
    /// The window those forwards are counted in.
    pub flap_window_ms: i64,
    /// While cooled, one reminder forward per this interval.
    pub cooldown_ms: i64,
    /// A cooled key warms again after this long without a post.
    pub reset_ms: i64,
    /// Bucket size: forwards a device may burst.
    pub rate_capacity: u32,
    /// Microseconds for one token to come back (1e6 / refill per second, rounded).
    pub emission_us: i64,
}

impl Policy {
    /// Builds a policy from the configuration's units (seconds and tokens per second).
    pub fn from_seconds(
        dedup_s: u64,
        flap_max_forwards: u32,
        flap_window_s: u64,
        cooldown_s: u64,
        reset_s: u64,
        rate_capacity: u32,
        refill_per_s: f64,
    ) -> Self {
        Self {
            dedup_ms: dedup_s as i64 * 1000,
            flap_max_forwards,
            flap_window_ms: flap_window_s as i64 * 1000,
            cooldown_ms: cooldown_s as i64 * 1000,
            reset_ms: reset_s as i64 * 1000,
            rate_capacity,
            emission_us: ((1e6 / refill_per_s).round() as i64).max(1),
        }
    }

    /// How long state can matter after the last write: past this, an untouched device's
    /// state decides nothing and may be forgotten.
    pub fn horizon_ms(&self) -> i64 {
        let bucket_ms = (self.emission_us * self.rate_capacity as i64) / 1000 + 1;
        // A hold lasts at most the staleness window.
        (STALENESS_S as i64 * 1000)
            .max(self.dedup_ms)
            .max(self.flap_window_ms)
            .max(self.reset_ms)
            .max(self.cooldown_ms)
            .max(bucket_ms)
    }
}

/// What the policy keeps for one flap key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlapState {
    /// Instants of the counted forwards still inside the window, oldest first.
    pub forwards: Vec<i64>,
    /// When the key was cooled (the instant of the forward that cooled it), if it is.
    pub cooled_at: Option<i64>,
    /// The last forward while cooled (or the cooling forward itself).
    pub last_reminder: i64,
    /// The last post that reached the flap stage.
    pub last_post: i64,
}

/// Everything the policy keeps for one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// GCRA theoretical arrival time of the bucket, microseconds.
    pub bucket_tat_us: i64,
    /// The APNs environment the device last worked on, in auto mode.
    pub env: Option<Environment>,
    /// collapseId -> instant of its last forward.
    pub collapses: HashMap<String, i64>,
    /// flap key -> its state.
    pub flaps: HashMap<String, FlapState>,
    /// collapseId -> until when it is held: its forward waits in the retry queue, so
    /// duplicates keep coalescing past the dedup window.
    pub held: HashMap<String, i64>,
}

/// Why the push service refused a token for good; such a token is answered from memory
/// (`RELAY_TOMBSTONE_TTL_S`) instead of being sent again, because services treat streams of
/// bad tokens as abuse. The relay's own reasons: the service that buried the token says how
/// it spells them (APNs: `push::apns::reason::spelling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadReason {
    /// The app was uninstalled or the token unregistered.
    Uninstalled,
    /// The token expired.
    Expired,
    /// Not a token of this app on any environment tried.
    Foreign,
}

/// The record of one admitted forward: what [`rollback`] needs to undo exactly it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// When the forward was admitted (ms).
    pub at_ms: i64,
    /// How it was counted.
    pub kind: TicketKind,
}

/// How a forward was counted by flap suppression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketKind {
    /// An ordinary forward, appended to the key's forwards; `cooled` if it cooled the key.
    Counted {
        /// This forward reached the threshold and cooled the key.
        cooled: bool,
    },
    /// The one reminder of a cooldown interval; `prev_reminder_ms` is restored on rollback.
    Reminder {
        /// The reminder instant before this one.
        prev_reminder_ms: i64,
    },
}

/// The policy's answer for one envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send it to APNs; the forward is recorded.
    Forward(Ticket),
    /// The same alert was forwarded within the dedup window.
    Coalesced,
    /// The flap key is cooled and its reminder for this interval is spent.
    Suppressed,
    /// The device's bucket is empty.
    RateLimited {
        /// Whole seconds until one token is back (at least 1).
        retry_after_s: u64,
    },
    /// The token is dead (a tombstone): answer 410 without calling APNs.
    Dead(DeadReason),
}

impl Decision {
    /// A bounded name, for traces.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Forward(_) => "forward",
            Decision::Coalesced => "coalesced",
            Decision::Suppressed => "suppressed",
            Decision::RateLimited { .. } => "rate_limited",
            Decision::Dead(_) => "dead",
        }
    }
}

/// Decides one envelope for a device and records what the decision changes.
pub fn admit(
    state: &mut DeviceState,
    collapse_id: &str,
    flap_key: &str,
    now_ms: i64,
    p: &Policy,
) -> Decision {
    // 1. Coalesce, measured from the last forward of this alert, or held while queued.
    if let Some(&last) = state.collapses.get(collapse_id) {
        if now_ms - last < p.dedup_ms {
            return Decision::Coalesced;
        }
    }
    if state
        .held
        .get(collapse_id)
        .is_some_and(|&until| now_ms < until)
    {
        return Decision::Coalesced;
    }

    // 2. Flap suppression.
    let mut flap = state.flaps.get(flap_key).cloned().unwrap_or_default();
    if flap.cooled_at.is_some() && now_ms - flap.last_post >= p.reset_ms {
        flap = FlapState::default();
    }
    let reminder = if flap.cooled_at.is_some() {
        if now_ms - flap.last_reminder < p.cooldown_ms {
            flap.last_post = flap.last_post.max(now_ms);
            state.flaps.insert(flap_key.to_owned(), flap);
            return Decision::Suppressed;
        }
        true
    } else {
        flap.forwards.retain(|&t| now_ms - t < p.flap_window_ms);
        false
    };

    // 3. Rate limit: GCRA, a token bucket as one instant.
    match gcra_take(
        state.bucket_tat_us,
        now_ms * 1000,
        p.emission_us,
        i64::from(p.rate_capacity),
    ) {
        Ok(tat) => state.bucket_tat_us = tat,
        Err(retry_after_s) => return Decision::RateLimited { retry_after_s },
    }

    // Record the forward.
    let last = state
        .collapses
        .entry(collapse_id.to_owned())
        .or_insert(now_ms);
    *last = (*last).max(now_ms);
    flap.last_post = flap.last_post.max(now_ms);
    let kind = if reminder {
        let prev = flap.last_reminder;
        flap.last_reminder = flap.last_reminder.max(now_ms);
        TicketKind::Reminder {
            prev_reminder_ms: prev,
        }
    } else {
        flap.forwards.push(now_ms);
        let cooled = flap.forwards.len() >= p.flap_max_forwards as usize;
        if cooled {
            flap.cooled_at = Some(now_ms);
            flap.last_reminder = flap.last_reminder.max(now_ms);
        }
        TicketKind::Counted { cooled }
    };
    state.flaps.insert(flap_key.to_owned(), flap);
    Decision::Forward(Ticket {
        at_ms: now_ms,
        kind,
    })
}

/// Undoes exactly the forward `ticket` recorded, when APNs refused it (at once, or finally
/// from the retry queue), so the same alert is eligible again. Records written since by other
/// forwards are left alone. The bucket token is not refunded. Any hold on the alert ends.
pub fn rollback(state: &mut DeviceState, collapse_id: &str, flap_key: &str, ticket: &Ticket) {
    if state.collapses.get(collapse_id) == Some(&ticket.at_ms) {
        state.collapses.remove(collapse_id);
    }
    state.held.remove(collapse_id);
    let Some(flap) = state.flaps.get_mut(flap_key) else {
        return;
    };
    match ticket.kind {
        TicketKind::Reminder { prev_reminder_ms } => {
            if flap.last_reminder == ticket.at_ms {
                flap.last_reminder = prev_reminder_ms;
            }
        }
        TicketKind::Counted { cooled } => {
            if let Some(i) = flap.forwards.iter().position(|&t| t == ticket.at_ms) {
                flap.forwards.remove(i);
            }
            // Only the forward that cooled the key uncools it: another forward of the same
            // millisecond has the same instant but did not cool anything.
            if cooled && flap.cooled_at == Some(ticket.at_ms) {
                flap.cooled_at = None;
            }
        }
    }
}

/// Holds an alert while its forward waits in the retry queue: duplicates coalesce until
/// `until_ms` (the end of its staleness window) or [`release`].
pub fn hold(state: &mut DeviceState, collapse_id: &str, until_ms: i64) {
    let h = state.held.entry(collapse_id.to_owned()).or_insert(until_ms);
    *h = (*h).max(until_ms);
}

/// Ends a hold: the queued forward was delivered (its collapse record now coalesces as
/// usual) or given up.
pub fn release(state: &mut DeviceState, collapse_id: &str) {
    state.held.remove(collapse_id);
}

/// Whether a collapse record still decides anything at `now_ms`.
pub fn collapse_live(last_forward_ms: i64, now_ms: i64, p: &Policy) -> bool {
    now_ms - last_forward_ms < p.dedup_ms
}

/// Whether a flap state still decides anything at `now_ms`: a dead one behaves exactly
/// like an absent one.
pub fn flap_live(f: &FlapState, now_ms: i64, p: &Policy) -> bool {
    match f.cooled_at {
        Some(_) => now_ms - f.last_post < p.reset_ms,
        None => f.forwards.iter().any(|&t| now_ms - t < p.flap_window_ms),
    }
}

/// Drops state that no longer decides anything at `now_ms`, or at any instant up to
/// [`CLOCK_SKEW_MS`] before it; returns whether the device has nothing left worth keeping
/// (apart from its remembered environment).
pub fn prune(state: &mut DeviceState, now_ms: i64, p: &Policy) -> bool {
    let now_ms = now_ms - CLOCK_SKEW_MS;
    state
        .collapses
        .retain(|_, &mut t| collapse_live(t, now_ms, p));
    state.flaps.retain(|_, f| flap_live(f, now_ms, p));
    state.held.retain(|_, &mut until| now_ms < until);
    state.collapses.is_empty()
        && state.flaps.is_empty()
        && state.held.is_empty()
        && state.bucket_tat_us <= now_ms * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Policy {
        /// The DESIGN.md defaults.
        pub(crate) fn defaults() -> Self {
            Self::from_seconds(75, 6, 1800, 1800, 7200, 60, 0.5)
        }
    }

    const C1: &str = "c1";
    const C2: &str = "c2";
    const F: &str = "flap";
    const S: i64 = 1000;
    const T0: i64 = 1_700_000_000_000;

    fn forward(d: Decision) -> Ticket {
        match d {
            Decision::Forward(t) => t,
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    /// A policy whose rate limit never interferes, to look at one rule at a time.
    fn no_limit() -> Policy {
        Policy {
            rate_capacity: 1_000_000,
            ..Policy::defaults()
        }
    }

    #[test]
    fn defaults_match_design() {
        let p = Policy::defaults();
        assert_eq!(p.dedup_ms, 75_000);
        assert_eq!(p.flap_max_forwards, 6);
        assert_eq!(p.flap_window_ms, 1_800_000);
        assert_eq!(p.cooldown_ms, 1_800_000);
        assert_eq!(p.reset_ms, 7_200_000);
        assert_eq!(p.rate_capacity, 60);
        assert_eq!(p.emission_us, 2_000_000);
        assert_eq!(p.horizon_ms(), 7_200_000);
        assert_eq!(
            Policy::from_seconds(5, 3, 20, 10, 30, 4, 0.5).horizon_ms(),
            600_000
        );
    }

    #[test]
    fn coalesce_window_edges_from_the_last_forward() {
        let p = no_limit();
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, C1, T0, &p));
        assert_eq!(admit(&mut s, C1, C1, T0, &p), Decision::Coalesced);
        assert_eq!(
            admit(&mut s, C1, C1, T0 + 75 * S - 1, &p),
            Decision::Coalesced
        );
        // Coalesced sightings do not extend the window: it runs from the forward.
        forward(admit(&mut s, C1, C1, T0 + 75 * S, &p));
        assert_eq!(
            admit(&mut s, C1, C1, T0 + 150 * S - 1, &p),
            Decision::Coalesced
        );
        forward(admit(&mut s, C1, C1, T0 + 150 * S, &p));
        // Another alert on the same device is not coalesced.
        forward(admit(&mut s, C2, C2, T0 + 150 * S, &p));
    }

    #[test]
    fn coalesced_posts_change_nothing() {
        let p = Policy::defaults();
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, F, T0, &p));
        let before = s.clone();
        assert_eq!(admit(&mut s, C1, F, T0 + S, &p), Decision::Coalesced);
        assert_eq!(s, before);
    }

    /// Six forwards of one flap key within 1800 s cool it; the sixth is still forwarded.
    #[test]
    fn flap_cools_on_the_sixth_forward_inside_the_window() {
        let p = no_limit();
        let mut s = DeviceState::default();
        for i in 0..5 {
            let t = forward(admit(&mut s, &format!("c{i}"), F, T0 + i * 60 * S, &p));
            assert_eq!(t.kind, TicketKind::Counted { cooled: false });
        }
        let t = forward(admit(&mut s, "c5", F, T0 + 300 * S, &p));
        assert_eq!(t.kind, TicketKind::Counted { cooled: true });
        assert_eq!(
            admit(&mut s, "c6", F, T0 + 360 * S, &p),
            Decision::Suppressed
        );
    }

    #[test]
    fn flap_forwards_age_out_of_the_window_at_its_edge() {
        let p = no_limit();
        let mut s = DeviceState::default();
        forward(admit(&mut s, "c0", F, T0, &p));
        for i in 1..5 {
            forward(admit(&mut s, &format!("c{i}"), F, T0 + i * S, &p));
        }
        // At exactly T0 + 1800 s the first forward is outside the window: only 5 counted.
        let t = forward(admit(&mut s, "c5", F, T0 + 1800 * S, &p));
        assert_eq!(t.kind, TicketKind::Counted { cooled: false });
        // One millisecond earlier it would have been the sixth.
        let mut s2 = DeviceState::default();
        forward(admit(&mut s2, "c0", F, T0, &p));
        for i in 1..5 {
            forward(admit(&mut s2, &format!("c{i}"), F, T0 + i * S, &p));
        }
        let t = forward(admit(&mut s2, "c5", F, T0 + 1800 * S - 1, &p));
        assert_eq!(t.kind, TicketKind::Counted { cooled: true });
    }

    fn cooled_at(p: &Policy, at: i64) -> DeviceState {
        let mut s = DeviceState::default();
        for i in 0..6 {
            forward(admit(&mut s, &format!("w{i}"), F, at - (5 - i), p));
        }
        assert_eq!(s.flaps[F].cooled_at, Some(at));
        s
    }

    #[test]
    fn one_reminder_per_cooldown_interval() {
        let p = no_limit();
        let mut s = cooled_at(&p, T0);
        assert_eq!(
            admit(&mut s, "a", F, T0 + 1800 * S - 1, &p),
            Decision::Suppressed
        );
        let t = forward(admit(&mut s, "b", F, T0 + 1800 * S, &p));
        assert_eq!(
            t.kind,
            TicketKind::Reminder {
                prev_reminder_ms: T0
            }
        );
        assert_eq!(
            admit(&mut s, "c", F, T0 + 1801 * S, &p),
            Decision::Suppressed
        );
        assert_eq!(
            admit(&mut s, "d", F, T0 + 3600 * S - 1, &p),
            Decision::Suppressed
        );
        forward(admit(&mut s, "e", F, T0 + 3600 * S, &p));
    }

    #[test]
    fn every_post_keeps_it_cooled_and_silence_resets() {
        let p = no_limit();
        let mut s = cooled_at(&p, T0);
        // A post every 7199 s keeps it cooled indefinitely (each is a reminder here, since
        // 7199 s > the 1800 s cooldown, but the key stays cooled).
        let mut t = T0;
        for i in 0..3 {
            t += 7199 * S;
            let tk = forward(admit(&mut s, &format!("k{i}"), F, t, &p));
            assert!(matches!(tk.kind, TicketKind::Reminder { .. }));
        }
        // 7200 s of silence: cooling ends, the post counts as an ordinary first forward.
        t += 7200 * S;
        let tk = forward(admit(&mut s, "z", F, t, &p));
        assert_eq!(tk.kind, TicketKind::Counted { cooled: false });
        assert_eq!(s.flaps[F].forwards, vec![t]);
    }

    #[test]
    fn suppressed_posts_extend_the_cooling() {
        let p = no_limit();
        let mut s = cooled_at(&p, T0);
        assert_eq!(
            admit(&mut s, "a", F, T0 + 1000 * S, &p),
            Decision::Suppressed
        );
        // 7200 s after the cooling forward but only 6200 s after the suppressed post:
        // still cooled, and this is the interval's reminder.
        let tk = forward(admit(&mut s, "b", F, T0 + 7200 * S, &p));
        assert!(matches!(tk.kind, TicketKind::Reminder { .. }));
        assert_eq!(
            admit(&mut s, "c", F, T0 + 7201 * S, &p),
            Decision::Suppressed
        );
    }

    #[test]
    fn flap_key_defaults_to_the_collapse_id_and_keys_are_independent() {
        let p = no_limit();
        let mut s = cooled_at(&p, T0);
        // Another flap key on the same device is untouched.
        forward(admit(&mut s, "other", "other", T0 + S, &p));
    }

    #[test]
    fn bucket_burst_then_refill_with_retry_after() {
        let p = Policy::defaults();
        let mut s = DeviceState::default();
        for i in 0..60 {
            forward(admit(&mut s, &format!("b{i}"), &format!("f{i}"), T0, &p));
        }
        // Empty: one token back in 2 s.
        assert_eq!(
            admit(&mut s, "x", "x", T0, &p),
            Decision::RateLimited { retry_after_s: 2 }
        );
        assert_eq!(
            admit(&mut s, "x", "x", T0 + 1001, &p),
            Decision::RateLimited { retry_after_s: 1 }
        );
        assert_eq!(
            admit(&mut s, "x", "x", T0 + 1999, &p),
            Decision::RateLimited { retry_after_s: 1 }
        );
        forward(admit(&mut s, "x", "x", T0 + 2000, &p));
        assert_eq!(
            admit(&mut s, "y", "y", T0 + 2000, &p),
            Decision::RateLimited { retry_after_s: 2 }
        );
    }

    #[test]
    fn rate_limited_posts_change_nothing_and_take_no_token() {
        let p = Policy {
            rate_capacity: 1,
            ..Policy::defaults()
        };
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, C1, T0, &p));
        let before = s.clone();
        assert!(matches!(
            admit(&mut s, C2, C2, T0 + 1, &p),
            Decision::RateLimited { .. }
        ));
        assert_eq!(s, before);
    }

    #[test]
    fn coalesced_and_suppressed_posts_take_no_token() {
        let p = Policy {
            rate_capacity: 7,
            ..Policy::defaults()
        };
        let mut s = cooled_at(&p, T0); // six tokens spent, one left
        for i in 0..50 {
            assert_eq!(
                admit(&mut s, &format!("s{i}"), F, T0 + i, &p),
                Decision::Suppressed
            );
            assert_eq!(admit(&mut s, "w5", F, T0 + i, &p), Decision::Coalesced);
        }
        forward(admit(&mut s, C1, C1, T0 + 100, &p));
        assert!(matches!(
            admit(&mut s, C2, C2, T0 + 100, &p),
            Decision::RateLimited { .. }
        ));
    }

    #[test]
    fn a_lagging_clock_cannot_refill_early() {
        let p = Policy {
            rate_capacity: 1,
            ..Policy::defaults()
        };
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, C1, T0, &p));
        // A replica 10 s behind sees the bucket as it is, not refilled.
        assert_eq!(
            admit(&mut s, C2, C2, T0 - 10 * S, &p),
            Decision::RateLimited { retry_after_s: 12 }
        );
        // And a lagging forward never moves the collapse record back.
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, C1, T0, &Policy::defaults()));
        assert_eq!(
            admit(&mut s, C1, C1, T0 - 100 * S, &Policy::defaults()),
            Decision::Coalesced
        );
    }

    #[test]
    fn rollback_makes_the_alert_eligible_again() {
        let p = Policy::defaults();
        let mut s = DeviceState::default();
        let t = forward(admit(&mut s, C1, F, T0, &p));
        rollback(&mut s, C1, F, &t);
        assert!(s.collapses.is_empty());
        assert!(s.flaps[F].forwards.is_empty());
        let t2 = forward(admit(&mut s, C1, F, T0 + S, &p));
        // The token was not refunded: two spent.
        assert_eq!(s.bucket_tat_us, (T0 * 1000) + 2 * p.emission_us);
        assert_eq!(t2.at_ms, T0 + S);
    }

    #[test]
    fn rollback_of_the_cooling_forward_uncools() {
        let p = no_limit();
        let mut s = DeviceState::default();
        let mut last = None;
        for i in 0..6 {
            last = Some(forward(admit(&mut s, &format!("c{i}"), F, T0 + i, &p)));
        }
        let t = last.unwrap();
        assert_eq!(t.kind, TicketKind::Counted { cooled: true });
        rollback(&mut s, "c5", F, &t);
        assert_eq!(s.flaps[F].cooled_at, None);
        assert_eq!(s.flaps[F].forwards.len(), 5);
        // Eligible again, and it cools again.
        let t = forward(admit(&mut s, "c5", F, T0 + 10, &p));
        assert_eq!(t.kind, TicketKind::Counted { cooled: true });
    }

    /// Two forwards in one millisecond, the second cooling the key: rolling back the first
    /// must not uncool it (found by the differential test).
    #[test]
    fn rollback_of_a_same_millisecond_forward_leaves_the_cooling() {
        let p = Policy {
            flap_max_forwards: 2,
            ..no_limit()
        };
        let mut s = DeviceState::default();
        let first = forward(admit(&mut s, "a", F, T0, &p));
        let second = forward(admit(&mut s, "b", F, T0, &p));
        assert_eq!(first.kind, TicketKind::Counted { cooled: false });
        assert_eq!(second.kind, TicketKind::Counted { cooled: true });
        rollback(&mut s, "a", F, &first);
        assert_eq!(s.flaps[F].cooled_at, Some(T0), "still cooled");
        assert_eq!(admit(&mut s, "c", F, T0 + 1, &p), Decision::Suppressed);
    }

    #[test]
    fn rollback_of_a_reminder_restores_the_previous_one() {
        let p = no_limit();
        let mut s = cooled_at(&p, T0);
        let t = forward(admit(&mut s, "r", F, T0 + 1800 * S, &p));
        rollback(&mut s, "r", F, &t);
        assert_eq!(s.flaps[F].last_reminder, T0);
        forward(admit(&mut s, "r", F, T0 + 1801 * S, &p));
    }

    #[test]
    fn rollback_leaves_a_newer_record_alone() {
        let p = no_limit();
        let mut s = DeviceState::default();
        let t = forward(admit(&mut s, C1, F, T0, &p));
        // Window passed, the same alert forwarded again, then the old one is refused.
        forward(admit(&mut s, C1, F, T0 + 80 * S, &p));
        rollback(&mut s, C1, F, &t);
        assert_eq!(s.collapses[C1], T0 + 80 * S);
        assert_eq!(s.flaps[F].forwards, vec![T0 + 80 * S]);
    }

    #[test]
    fn a_held_alert_coalesces_until_released_or_its_window_ends() {
        let p = Policy::defaults();
        let mut s = DeviceState::default();
        let t = forward(admit(&mut s, C1, C1, T0, &p));
        hold(&mut s, C1, T0 + 600 * S);
        // Past the dedup window, still coalesced while queued.
        assert_eq!(admit(&mut s, C1, C1, T0 + 300 * S, &p), Decision::Coalesced);
        assert_eq!(
            admit(&mut s, C1, C1, T0 + 600 * S - 1, &p),
            Decision::Coalesced
        );
        forward(admit(&mut s, C1, C1, T0 + 600 * S, &p));
        // Released after delivery: the dedup window from the forward applies again.
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, C1, T0, &p));
        hold(&mut s, C1, T0 + 600 * S);
        release(&mut s, C1);
        forward(admit(&mut s, C1, C1, T0 + 75 * S, &p));
        // A final refusal rolls the forward back and ends the hold.
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, C1, T0, &p));
        hold(&mut s, C1, T0 + 600 * S);
        rollback(&mut s, C1, C1, &t);
        assert!(s.held.is_empty());
        forward(admit(&mut s, C1, C1, T0 + S, &p));
    }

    #[test]
    fn prune_forgets_only_what_decides_nothing() {
        let p = Policy::defaults();
        let mut s = DeviceState::default();
        forward(admit(&mut s, C1, F, T0, &p));
        // Dead at T0 + 75 s, but a replica lagging by up to the skew margin would still
        // coalesce on it: kept.
        assert!(!prune(&mut s, T0 + 75 * S, &p));
        assert!(!s.collapses.is_empty());
        assert!(!prune(&mut s, T0 + 75 * S + CLOCK_SKEW_MS, &p));
        assert!(s.collapses.is_empty());
        assert!(!s.flaps.is_empty());
        assert!(prune(&mut s, T0 + 1800 * S + CLOCK_SKEW_MS, &p));
        assert!(s.flaps.is_empty());
    }
}
