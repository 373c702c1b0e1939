//! Admission before a request costs anything: the relay-wide in-flight limit
//! (`RELAY_MAX_INFLIGHT`) and the per-source bucket ([`clients`]), shared by every front-end
//! that takes unauthenticated bodies (v1's `POST /` and `/v2`). A request is counted here
//! before its body is read, parsed, looked up or verified, so a client that sends invented
//! signer ids or garbage is shed at the door like any other.
//!
//! One limit and one bucket for both front-ends: the relay's capacity is one, and a source
//! that floods `/v2` spends the same tokens it would spend on `POST /`.

pub(crate) mod clients;

use std::net::IpAddr;

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use tokio::sync::{Semaphore, SemaphorePermit};

use clients::{Cidr, ClientLimiter};

/// Why a request was refused at the door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Over `RELAY_MAX_INFLIGHT`: 503 with `Retry-After: 1`.
    Overloaded,
    /// The source's bucket is empty: 429 with `Retry-After` in seconds.
    RateLimited {
        /// Seconds until a token is back.
        retry_after_s: u64,
    },
}

/// A request admitted: holds its in-flight slot until dropped.
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    _permit: SemaphorePermit<'a>,
    _counted: crate::metrics::InflightGuard,
}

/// The in-flight limit and the per-source buckets.
#[derive(Debug)]
pub(crate) struct Admission {
    inflight: Semaphore,
    clients: Option<ClientLimiter>,
    trusted: Vec<Cidr>,
}

impl Admission {
    /// `max_inflight` requests at once; buckets of `client_rate.0` tokens (0: none) refilling
    /// `client_rate.1` per second; `X-Forwarded-For` honoured from `trusted` only.
    pub(crate) fn new(max_inflight: usize, client_rate: (u32, f64), trusted: Vec<Cidr>) -> Self {
        crate::metrics::max_inflight(max_inflight);
        Self {
            inflight: Semaphore::new(max_inflight),
            clients: (client_rate.0 > 0).then(|| ClientLimiter::new(client_rate.0, client_rate.1)),
            trusted,
        }
    }

    /// Takes an in-flight slot, or refuses with [`Refused::Overloaded`].
    pub(crate) fn enter(&self) -> Result<Admitted<'_>, Refused> {
        let permit = self
            .inflight
            .try_acquire()
            .map_err(|_| Refused::Overloaded)?;
        Ok(Admitted {
            _permit: permit,
            _counted: crate::metrics::InflightGuard::enter(),
        })
    }

    /// Takes a token from the bucket of the request's source (see [`clients`]), or refuses
    /// with [`Refused::RateLimited`]. Without buckets, always admits.
    pub(crate) async fn take(
        &self,
        req: &Parts,
        store: &crate::store::Store,
        now_ms: i64,
    ) -> Result<(), Refused> {
        let Some(limiter) = &self.clients else {
            return Ok(());
        };
        limiter
            .take(self.source(req), store, now_ms)
            .await
            .map_err(|retry_after_s| Refused::RateLimited { retry_after_s })
    }

    /// The source a request is counted for: the TCP peer, or from a trusted proxy the
    /// right-most untrusted `X-Forwarded-For` hop.
    pub(crate) fn source(&self, req: &Parts) -> IpAddr {
        let peer = req
            .extensions
            .get::<ConnectInfo<std::net::SocketAddr>>()
            .map_or(clients::UNKNOWN, |c| c.0.ip());
        // X-Forwarded-For matters only from a trusted proxy: read it only then.
        if self.trusted.is_empty() {
            return peer;
        }
        let forwarded_for: Vec<&str> = req
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        clients::client_of(peer, &forwarded_for, &self.trusted)
    }

    /// Forgets buckets that are full again (called periodically).
    pub(crate) fn sweep(&self, now_ms: i64) {
        if let Some(l) = &self.clients {
            l.sweep(now_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_flight_limit_is_one_for_all_and_frees_on_drop() {
        let a = Admission::new(2, (0, 1.0), Vec::new());
        let one = a.enter().unwrap();
        let two = a.enter().unwrap();
        assert_eq!(a.enter().unwrap_err(), Refused::Overloaded);
        drop(one);
        let three = a.enter().unwrap();
        drop((two, three));
    }

    #[tokio::test]
    async fn a_source_over_its_bucket_is_refused_with_a_wait() {
        let store = crate::store::Store::memory(crate::policy::Policy::defaults());
        let a = Admission::new(10, (2, 1.0), Vec::new());
        let (req, ()) = axum::http::Request::new(()).into_parts();
        assert!(a.take(&req, &store, 0).await.is_ok());
        assert!(a.take(&req, &store, 0).await.is_ok());
        assert_eq!(
            a.take(&req, &store, 0).await.unwrap_err(),
            Refused::RateLimited { retry_after_s: 1 }
        );
        assert!(a.take(&req, &store, 1_000).await.is_ok());
    }
}
