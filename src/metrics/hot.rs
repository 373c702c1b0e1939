//! The handles of the series recorded on every request, resolved once per thread and label
//! set instead of on every call.
//!
//! `counter!` and its kin build a key (a vector of labels), hash it and read the recorder's
//! registry under a lock each time they run; on protocol v1 that was about 3% of the relay's
//! CPU (`bench/profile-before.md`). The Prometheus recorder's handles stay valid for the
//! life of the process (no idle timeout is set in [`super::handle`]), so a handle resolved
//! once can be kept. Each worker thread keeps its own small map, so nothing is locked.
//!
//! The maps are keyed by the addresses and lengths of the metric name and label values:
//! they are `&'static str` drawn from bounded sets, so each map stays bounded too (a value
//! spelled at two addresses takes two entries, which name the same series).
//!
//! A kept handle is the one the recorder in effect gave the first time: on a thread that
//! has already recorded a series, a local recorder installed later
//! (`metrics::with_local_recorder`, in tests) does not see that series. A test with its own
//! recorder records on a thread of its own (as this module's test does).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use metrics::{Counter, Gauge, Histogram};

/// The metric name and up to three label values, each by address and length.
type Key = [(usize, usize); 4];

fn key(name: &'static str, values: &[&'static str]) -> Key {
    debug_assert!(values.len() <= 3, "{name}: a key holds three label values");
    let mut k = [(0, 0); 4];
    k[0] = (name.as_ptr() as usize, name.len());
    for (slot, v) in k[1..].iter_mut().zip(values) {
        *slot = (v.as_ptr() as usize, v.len());
    }
    k
}

/// A multiplicative hash of machine words: the keys are addresses, not attacker input.
#[derive(Default)]
pub(super) struct WordHasher(u64);

impl WordHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_ne_bytes(word));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}

pub(super) type Map<H> = RefCell<HashMap<Key, H, BuildHasherDefault<WordHasher>>>;

thread_local! {
    static COUNTERS: Map<Counter> = RefCell::default();
    static HISTOGRAMS: Map<Histogram> = RefCell::default();
    static GAUGES: Map<Gauge> = RefCell::default();
}

/// A kind of handle, and the map of this thread that keeps it.
pub(super) trait Kept: Sized + 'static {
    fn map() -> &'static std::thread::LocalKey<Map<Self>>;
}

impl Kept for Counter {
    fn map() -> &'static std::thread::LocalKey<Map<Self>> {
        &COUNTERS
    }
}

impl Kept for Histogram {
    fn map() -> &'static std::thread::LocalKey<Map<Self>> {
        &HISTOGRAMS
    }
}

impl Kept for Gauge {
    fn map() -> &'static std::thread::LocalKey<Map<Self>> {
        &GAUGES
    }
}

/// Runs `apply` on the handle of `name` with `values`, resolving it with `make` the first
/// time this thread meets that key.
pub(super) fn with<H: Kept>(
    name: &'static str,
    values: &[&'static str],
    make: impl FnOnce() -> H,
    apply: impl FnOnce(&H),
) {
    let k = key(name, values);
    let mut work = Some((make, apply));
    let _ = H::map().try_with(|m| {
        if let Some((make, apply)) = work.take() {
            apply(m.borrow_mut().entry(k).or_insert_with(make));
        }
    });
    // A thread being torn down has no map left: the handle is resolved for this call alone.
    if let Some((make, apply)) = work {
        apply(&make());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// The value of the exposition's line that starts with `series`.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Kept handles record every call into its own series: per label set, across threads
    /// (each with its own map), and the same as the recorder's own lookup would.
    #[test]
    fn kept_handles_record_every_call_into_its_own_series() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let work = |forwarded: u64, coalesced: u64| {
            metrics::with_local_recorder(&recorder, || {
                for _ in 0..forwarded {
                    super::super::intake("forwarded", 202, Duration::from_millis(1));
                }
                for _ in 0..coalesced {
                    super::super::intake("coalesced", 202, Duration::from_millis(1));
                }
                super::super::apns_request("production", 200, "none", Duration::ZERO);
                super::super::apns_request("production", 410, "unregistered", Duration::ZERO);
                let held = [
                    super::super::InflightGuard::enter(),
                    super::super::InflightGuard::enter(),
                ];
                let text = handle.render();
                assert_eq!(
                    value(&text, "sealrelay_inflight_requests"),
                    Some(2.0),
                    "{text}"
                );
                drop(held);
            });
        };
        std::thread::scope(|s| {
            s.spawn(|| work(3, 1)).join().unwrap();
            s.spawn(|| work(2, 1)).join().unwrap();
        });
        let text = handle.render();
        let v = |series: &str| value(&text, series);
        assert_eq!(
            v(r#"sealrelay_intake_requests_total{outcome="forwarded",status="202"}"#),
            Some(5.0),
            "{text}"
        );
        assert_eq!(
            v(r#"sealrelay_intake_requests_total{outcome="coalesced",status="202"}"#),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            v(r#"sealrelay_intake_duration_seconds_count{outcome="forwarded"}"#),
            Some(5.0),
            "{text}"
        );
        assert_eq!(
            v(
                r#"sealrelay_apns_requests_total{environment="production",status="410",reason="unregistered"}"#
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            v(r#"sealrelay_apns_duration_seconds_count{environment="production"}"#),
            Some(4.0),
            "{text}"
        );
        // Every guard entered was dropped.
        assert_eq!(v("sealrelay_inflight_requests"), Some(0.0), "{text}");
    }
}
