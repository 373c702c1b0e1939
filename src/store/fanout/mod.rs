//! "Tell every replica": the one publish/subscribe seam that live streams use (watch and
//! signal sockets, receipt events, signer revocations).
//!
//! A message published on a [`Channel`] reaches every current subscriber of that channel on
//! every replica: through Redis pub/sub when the store is Redis (sharded pub/sub, `SPUBLISH`
//! and `SSUBSCRIBE`, for channels that carry a hash tag, so a mailbox's channel lives on the
//! mailbox's Cluster node; plain pub/sub for the few global channels), and through
//! in-process broadcast channels on the embedded store. Each replica holds one Redis
//! subscription per channel however many local subscribers share it.
//!
//! Delivery is at most once and only to those subscribed when the message is published:
//! subscribe first, then read the state, then act on messages. Messages lost while a
//! replica's subscriber connection was down are signalled through [`Fanout::resyncs`], so a
//! consumer re-reads the store instead of trusting its stream. A subscriber that falls
//! behind loses the oldest messages; both the loss and the publish-to-receive delay are
//! counted.

mod channel;
mod memory;
mod redis;
mod transport;

pub use channel::Channel;
pub(crate) use channel::{frame, unframe};
use redis::RedisFanout;

use memory::Hub;
use transport::Transport;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, watch};

use crate::clock::Clock;
use crate::store::error::{StoreError, StoreOp};

/// The fan-out seam.
#[derive(Debug, Clone)]
pub struct Fanout {
    hub: Arc<Hub>,
    /// `None` in process: the hub is every subscriber there is.
    transport: Option<Arc<dyn Transport>>,
    resyncs: watch::Receiver<u64>,
    /// In process nothing is ever missed, so the counter never moves; its sender is kept so
    /// waiting on it waits forever instead of failing.
    _never: Option<Arc<watch::Sender<u64>>>,
    /// The clock a message's delay is measured on (against the publisher's instant).
    clock: Clock,
}

impl Fanout {
    /// In process: one replica.
    pub fn memory() -> Self {
        let (tx, rx) = watch::channel(0);
        Self {
            hub: Arc::default(),
            transport: None,
            resyncs: rx,
            _never: Some(Arc::new(tx)),
            clock: Clock::System,
        }
    }

    /// Across replicas through Redis pub/sub: connects the subscriber (in the background,
    /// retried like the pool); `publisher` is the store's command pool, `clock` the one the
    /// delay from publish to receipt is measured on.
    pub fn redis(
        settings: &crate::store::connection::RedisSettings,
        publisher: fred::prelude::Pool,
        clock: Clock,
    ) -> anyhow::Result<Self> {
        let hub: Arc<Hub> = Arc::default();
        let (transport, resyncs) = RedisFanout::connect(settings, publisher, hub.clone())?;
        Ok(Self {
            hub,
            transport: Some(transport),
            resyncs,
            _never: None,
            clock,
        })
    }

    /// Publishes `payload` to every subscriber of `channel` on every replica.
    pub async fn publish(
        &self,
        channel: &Channel,
        payload: &[u8],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let message = frame(payload, now_ms);
        match &self.transport {
            None => {
                self.hub.deliver(channel, message);
                Ok(())
            }
            Some(t) => {
                StoreOp::FanoutPublish
                    .timed(t.publish(channel, message))
                    .await
            }
        }
    }

    /// Subscribes to `channel`; messages published from now on arrive on the returned
    /// [`Subscription`] (on Redis, once the server has confirmed the subscription). The
    /// replica's subscription to the channel is counted: when the last local
    /// [`Subscription`] of a channel is dropped (or this call fails and it was the only
    /// one), the Redis subscription is dropped at once.
    pub async fn subscribe(&self, channel: &Channel) -> Result<Subscription, StoreError> {
        let (rx, first) = self.hub.join(channel);
        let sub = Subscription {
            rx: Some(rx),
            lagged: false,
            clock: self.clock.clone(),
            release: self.transport.as_ref().map(|t| Release {
                hub: self.hub.clone(),
                transport: t.clone(),
                channel: channel.clone(),
            }),
        };
        if let Some(t) = &self.transport {
            // Also when not the first: an earlier first subscriber's call may still be in
            // flight, and subscribing twice is harmless. On failure `sub` is dropped, which
            // releases the channel again if nobody else holds it.
            StoreOp::FanoutSubscribe
                .timed(t.subscribe(channel, first))
                .await?;
        }
        Ok(sub)
    }

    /// A counter that grows every time messages may have been lost (the subscriber
    /// connection to Redis was re-established): consumers re-read the store when it moves.
    pub fn resyncs(&self) -> watch::Receiver<u64> {
        self.resyncs.clone()
    }

    /// Drops the Redis subscriptions of channels nobody listens to any more (run
    /// periodically).
    pub async fn prune(&self) {
        let idle = self.hub.prune();
        if let Some(t) = &self.transport {
            t.unsubscribe(&idle, &self.hub).await;
        }
    }
}

/// One subscriber's stream of messages.
#[derive(Debug)]
pub struct Subscription {
    /// `None` only while being dropped.
    rx: Option<broadcast::Receiver<Bytes>>,
    /// Messages were lost since [`Subscription::take_lagged`] was last asked.
    lagged: bool,
    /// The fan-out's clock, for the delay metric.
    clock: Clock,
    /// What dropping the last subscriber of the channel must undo (across replicas only).
    release: Option<Release>,
}

/// The channel a [`Subscription`] holds on a transport, released with the last one.
#[derive(Debug)]
struct Release {
    hub: Arc<Hub>,
    transport: Arc<dyn Transport>,
    channel: Channel,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.rx.take());
        let Some(r) = self.release.take() else {
            return;
        };
        if !r.hub.release(&r.channel) {
            return;
        }
        // The last local subscriber is gone: drop the replica's subscription now rather
        // than at the next prune. Outside a runtime (at exit) the prune is moot.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                r.transport
                    .unsubscribe(std::slice::from_ref(&r.channel), &r.hub)
                    .await;
            });
        }
    }
}

impl Subscription {
    /// Whether messages were lost because this subscriber fell behind since the last call:
    /// the subscriber then re-reads from the store what they may have said.
    pub fn take_lagged(&mut self) -> bool {
        std::mem::take(&mut self.lagged)
    }

    /// The next message; `None` when the fan-out is gone. Messages lost because this
    /// subscriber fell behind are counted and skipped.
    pub async fn recv(&mut self) -> Option<Bytes> {
        let rx = self.rx.as_mut()?;
        loop {
            match rx.recv().await {
                Ok(m) => {
                    let Some((sent_ms, payload)) = unframe(&m) else {
                        continue;
                    };
                    let now = self.clock.now_ms();
                    crate::metrics::fanout_delay(Duration::from_millis(
                        (now - sent_ms).max(0) as u64
                    ));
                    return Some(payload);
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    crate::metrics::fanout_lagged(n);
                    self.lagged = true;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::channel::BUFFER;
    use super::*;

    impl Fanout {
        /// Channels with a local subscriber (for tests and diagnostics).
        pub(crate) fn channels(&self) -> usize {
            self.hub.len()
        }
    }

    #[test]
    fn frames_round_trip() {
        let f = frame(b"seq 7", 1_790_000_000_123);
        assert_eq!(
            unframe(&f),
            Some((1_790_000_000_123, Bytes::from_static(b"seq 7")))
        );
        assert_eq!(unframe(&Bytes::from_static(b"short")), None);
        assert_eq!(unframe(&Bytes::from_static(b"x\nshort")), None);
        assert_eq!(
            unframe(&Bytes::from_static(b"5\n")),
            Some((5, Bytes::new()))
        );
    }

    #[tokio::test]
    async fn in_process_subscribers_of_a_channel_get_its_messages_only() {
        let f = Fanout::memory();
        let a = Channel::sharded("t{m:a}:events".into());
        let b = Channel::sharded("t{m:b}:events".into());
        let mut a1 = f.subscribe(&a).await.unwrap();
        let mut a2 = f.subscribe(&a).await.unwrap();
        let mut b1 = f.subscribe(&b).await.unwrap();
        f.publish(&a, b"one", 1).await.unwrap();
        f.publish(&b, b"two", 1).await.unwrap();
        assert_eq!(a1.recv().await.unwrap(), "one");
        assert_eq!(a2.recv().await.unwrap(), "one");
        assert_eq!(b1.recv().await.unwrap(), "two");
        assert_eq!(f.channels(), 2);
        drop((a1, a2));
        f.prune().await;
        assert_eq!(f.channels(), 1);
        // Publishing to a channel nobody listens to is fine.
        f.publish(&a, b"lost", 1).await.unwrap();
    }

    #[tokio::test]
    async fn a_slow_subscriber_loses_the_oldest_and_is_told() {
        let f = Fanout::memory();
        let c = Channel::global("t:global".into());
        let mut s = f.subscribe(&c).await.unwrap();
        f.publish(&c, b"first", 1).await.unwrap();
        assert_eq!(s.recv().await.unwrap(), "first");
        assert!(!s.take_lagged(), "nothing lost yet");
        for i in 0..(BUFFER + 10) {
            f.publish(&c, format!("{i}").as_bytes(), 1).await.unwrap();
        }
        assert_eq!(s.recv().await.unwrap(), "10");
        assert!(s.take_lagged(), "the loss is reported once");
        assert!(!s.take_lagged());
        assert_eq!(s.recv().await.unwrap(), "11");
        assert!(!s.take_lagged());
    }
}
