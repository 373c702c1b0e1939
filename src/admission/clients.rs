//! Per-client-address admission: a token bucket per source address, so one hostile or
//! broken client cannot take the relay's capacity from every other daemon.
//!
//! The address is the TCP peer, or, when the peer is one of `RELAY_TRUSTED_PROXIES`, the
//! right-most `X-Forwarded-For` entry that is not itself a trusted proxy (the left part of
//! that header is whatever the client claimed). IPv6 addresses are grouped by /64, the
//! block one host usually owns. The default bucket (600, refilling 20/s) lets a daemon's
//! fan-out of 100 devices per alert through untouched.
//!
//! **Shared in Redis, past the first quarter.** Each replica keeps the bucket in memory, and
//! a client that has used no more than a quarter of it costs no Redis call, so a daemon's
//! ordinary bursts (100 devices of a 600 bucket) keep the one-round-trip happy path. Once a
//! client has used more than a quarter of a replica's bucket, each further request also
//! takes a token from the client's bucket in Redis (`admission_client.lua`), shared by every replica:
//! a heavy client is limited cluster-wide to at most a quarter of the bucket per replica plus
//! one shared bucket, instead of a whole bucket per replica.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;

use crate::policy::{gcra_take, Bucket};

/// An address block: `10.0.0.0/8`, `fd00::/8`, or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Parses `addr` or `addr/bits`.
    pub fn parse(s: &str) -> Option<Self> {
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().ok()?)),
            None => (s, None),
        };
        let net: IpAddr = addr.trim().parse().ok()?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        (bits <= max).then_some(Self { net, bits })
    }

    /// Whether `ip` lies in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.bits == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.bits)
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.bits == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.bits)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Parses `RELAY_TRUSTED_PROXIES`: comma-separated blocks; empty means none.
pub fn parse_trusted(s: &str) -> Result<Vec<Cidr>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| Cidr::parse(p).ok_or_else(|| p.to_owned()))
        .collect()
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client a request is counted for. `forwarded_for` holds every `X-Forwarded-For`
/// header line in the order received: a proxy chain may split the list over several lines,
/// which together form one list (RFC 9110, 5.3).
pub fn client_of(peer: IpAddr, forwarded_for: &[&str], trusted: &[Cidr]) -> IpAddr {
    let peer = canonical(peer);
    if !trusted.iter().any(|c| c.contains(peer)) || forwarded_for.is_empty() {
        return peer;
    }
    let mut client = peer;
    let hops = forwarded_for.iter().rev().flat_map(|line| line.rsplit(','));
    for hop in hops {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            break;
        };
        let ip = canonical(ip);
        client = ip;
        if !trusted.iter().any(|c| c.contains(ip)) {
            break;
        }
    }
    client
}

/// The bucket key: IPv4 as is, IPv6 by its /64.
pub fn group(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

const SHARDS: usize = 16;

/// Token buckets per client block (GCRA, like the device bucket).
#[derive(Debug)]
pub struct ClientLimiter {
    shards: Vec<Mutex<HashMap<IpAddr, i64>>>,
    bucket: Bucket,
}

impl ClientLimiter {
    /// `capacity` requests in a burst, refilling `refill_per_s`.
    pub fn new(capacity: u32, refill_per_s: f64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            bucket: Bucket {
                capacity: i64::from(capacity),
                emission_us: ((1e6 / refill_per_s).round() as i64).max(1),
            },
        }
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<HashMap<IpAddr, i64>> {
        let h = match ip {
            IpAddr::V4(v4) => u32::from(*v4) as usize,
            IpAddr::V6(v6) => (u128::from(*v6) >> 64) as usize,
        };
        &self.shards[h.wrapping_mul(0x9E37_79B9) % SHARDS]
    }

    /// Takes a token for `client` at `now_ms`: `Ok(busy)` (busy: more than a quarter of the
    /// bucket is spent, so the shared bucket must be asked too), or `Err(retry_after_s)` when
    /// its bucket is empty.
    pub fn check(&self, client: IpAddr, now_ms: i64) -> Result<bool, u64> {
        let key = group(client);
        let now_us = now_ms * 1000;
        let mut map = self.shard(&key).lock().unwrap_or_else(|p| p.into_inner());
        let stored = map.get(&key).copied().unwrap_or(now_us);
        let Bucket {
            capacity,
            emission_us,
        } = self.bucket;
        let tat = gcra_take(stored, now_us, emission_us, capacity)?;
        map.insert(key, tat);
        Ok(tat - now_us > emission_us * (capacity / 4))
    }

    /// Takes a token for `client`: from this replica's bucket, and, once the client is busy
    /// (more than a quarter spent), from its shared bucket in the store as well.
    /// `Err(retry_after_s)` when either is empty.
    pub async fn take(
        &self,
        client: IpAddr,
        store: &crate::store::Store,
        now_ms: i64,
    ) -> Result<(), u64> {
        if self.check(client, now_ms)? {
            let block = group(client).to_string();
            if let Some(wait) = store
                .policy()
                .client_take(&block, now_ms, self.bucket)
                .await
            {
                return Err(wait);
            }
        }
        Ok(())
    }

    /// Forgets clients whose buckets are full again.
    pub fn sweep(&self, now_ms: i64) {
        let now_us = now_ms * 1000;
        for s in &self.shards {
            s.lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|_, tat| *tat > now_us);
        }
    }
}

/// The unspecified address, for requests without a peer (in-process tests).
pub const UNKNOWN: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

#[cfg(test)]
mod tests {
    use super::*;

    impl ClientLimiter {
        /// Client blocks tracked.
        fn len(&self) -> usize {
            self.shards
                .iter()
                .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
                .sum()
        }

        /// Whether none is tracked.
        fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.1.2.3")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.9.9.9")), "IPv4-mapped");
        let c = Cidr::parse("fd00::/8").unwrap();
        assert!(c.contains(ip("fd12::1")));
        assert!(!c.contains(ip("fe80::1")));
        assert!(Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.1")));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("nope").is_none());
        assert_eq!(parse_trusted(" 10.0.0.0/8, ::1 ").unwrap().len(), 2);
        assert_eq!(parse_trusted("").unwrap().len(), 0);
        assert_eq!(parse_trusted("10.0.0.0/8,bad").unwrap_err(), "bad");
    }

    #[test]
    fn forwarded_for_is_honoured_only_from_trusted_proxies() {
        let trusted = parse_trusted("10.0.0.0/8").unwrap();
        // From the internet: the header is ignored.
        assert_eq!(
            client_of(ip("203.0.113.7"), &["1.2.3.4"], &trusted),
            ip("203.0.113.7")
        );
        // From a trusted proxy: the right-most untrusted hop; spoofed left parts ignored.
        assert_eq!(
            client_of(
                ip("10.0.0.2"),
                &["6.6.6.6, 198.51.100.9, 10.0.0.3"],
                &trusted
            ),
            ip("198.51.100.9")
        );
        assert_eq!(client_of(ip("10.0.0.2"), &[], &trusted), ip("10.0.0.2"));
        assert_eq!(
            client_of(ip("10.0.0.2"), &["garbage"], &trusted),
            ip("10.0.0.2")
        );
        // The list split over two header lines reads as one list: the right-most
        // untrusted hop is on the second line, not the last entry of the first.
        assert_eq!(
            client_of(
                ip("10.0.0.2"),
                &["6.6.6.6, 198.51.100.9", "203.0.113.5, 10.0.0.3"],
                &trusted
            ),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_of(ip("10.0.0.2"), &["198.51.100.9", "10.0.0.3"], &trusted),
            ip("198.51.100.9")
        );
    }

    #[test]
    fn ipv6_is_grouped_by_64() {
        assert_eq!(group(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(group(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        let l = ClientLimiter::new(2, 1.0);
        assert!(l.check(ip("2001:db8::1"), 0).is_ok());
        assert!(l.check(ip("2001:db8::2"), 0).is_ok());
        assert_eq!(l.check(ip("2001:db8::3"), 0), Err(1));
        assert!(l.check(ip("2001:db9::1"), 0).is_ok(), "another /64");
    }

    #[test]
    fn a_daemon_fan_out_passes_with_the_defaults_without_asking_redis() {
        let l = ClientLimiter::new(600, 20.0);
        for _ in 0..100 {
            assert_eq!(l.check(ip("192.0.2.1"), 1_000), Ok(false));
        }
        for _ in 100..150 {
            l.check(ip("192.0.2.1"), 1_000).unwrap();
        }
        assert_eq!(
            l.check(ip("192.0.2.1"), 1_000),
            Ok(true),
            "past a quarter: busy"
        );
        assert_eq!(l.len(), 1);
        l.sweep(1_000 + 151 * 50 + 1);
        assert!(l.is_empty());
    }
}
