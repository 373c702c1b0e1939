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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, watch};

use super::common::{StoreError, StoreOp};

/// Messages a subscriber may fall behind by before it loses the oldest.
const BUFFER: usize = 256;
/// The same for a signal rendezvous's channel (names ending `:sig`), which carries bursts
/// of frames: a side's whole frame bucket (400) with room to spare.
const SIGNAL_BUFFER: usize = 1024;

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Channel {
    name: String,
    sharded: bool,
}

impl Channel {
    /// A channel bound to a hash tag (its name contains `{tag}`): sharded pub/sub on the
    /// tag's Cluster slot.
    pub fn sharded(name: String) -> Self {
        debug_assert!(name.contains('{') && name.contains('}'));
        Self {
            name,
            sharded: true,
        }
    }

    /// A cluster-wide channel (plain pub/sub).
    pub fn global(name: String) -> Self {
        Self {
            name,
            sharded: false,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is sharded.
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// How far a local subscriber may fall behind.
    fn buffer(&self) -> usize {
        if self.name.ends_with(":sig") {
            SIGNAL_BUFFER
        } else {
            BUFFER
        }
    }
}

/// A message as it travels: the publish instant (ms, for the delay metric) in decimal, a
/// newline, the payload. Text, so a Lua script can publish a frame too.
pub(crate) fn frame(payload: &[u8], now_ms: i64) -> Bytes {
    let mut b = Vec::with_capacity(payload.len() + 16);
    b.extend_from_slice(now_ms.to_string().as_bytes());
    b.push(b'\n');
    b.extend_from_slice(payload);
    Bytes::from(b)
}

/// Splits a travelling message; `None` for anything that is not one.
pub(crate) fn unframe(b: &Bytes) -> Option<(i64, Bytes)> {
    let nl = b.iter().position(|&c| c == b'\n')?;
    let at = std::str::from_utf8(&b[..nl]).ok()?.parse().ok()?;
    Some((at, b.slice(nl + 1..)))
}

/// In-process fan-out: one broadcast channel per channel name. Also the local end of the
/// Redis fan-out, which feeds it from the Redis subscription.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    channels: Mutex<HashMap<Channel, broadcast::Sender<Bytes>>>,
}

impl Hub {
    /// A receiver for `channel`; true when the channel had no local subscriber before.
    pub(crate) fn join(&self, channel: &Channel) -> (broadcast::Receiver<Bytes>, bool) {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(channel) {
            Some(tx) => (tx.subscribe(), false),
            None => {
                let (tx, rx) = broadcast::channel(channel.buffer());
                map.insert(channel.clone(), tx);
                (rx, true)
            }
        }
    }

    /// Hands a travelling message to the local subscribers of `channel`.
    pub(crate) fn deliver(&self, channel: &Channel, message: Bytes) {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(channel) {
            let _ = tx.send(message);
        }
    }

    /// Forgets `channel` if nobody listens to it any more; true when it was forgotten (its
    /// Redis subscription is then dropped too).
    pub(crate) fn release(&self, channel: &Channel) -> bool {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(channel).is_some_and(|tx| tx.receiver_count() == 0) {
            map.remove(channel);
            return true;
        }
        false
    }

    /// Forgets channels nobody listens to any more; returns them.
    pub(crate) fn prune(&self) -> Vec<Channel> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let idle: Vec<Channel> = map
            .iter()
            .filter(|(_, tx)| tx.receiver_count() == 0)
            .map(|(c, _)| c.clone())
            .collect();
        for c in &idle {
            map.remove(c);
        }
        idle
    }

    /// Whether `channel` has a local subscriber.
    pub(crate) fn has(&self, channel: &Channel) -> bool {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(channel)
            .is_some_and(|tx| tx.receiver_count() > 0)
    }
}

/// How messages cross between replicas: Redis pub/sub ([`super::redis::fanout`]), or
/// nothing at all in process (the [`Hub`] alone delivers). A transport takes the message as
/// it travels ([`frame`]), so a Lua script that publishes from inside its own transaction
/// sends the same bytes.
#[async_trait::async_trait]
pub(crate) trait Transport: Send + Sync + std::fmt::Debug {
    /// Publishes one travelling message to every replica.
    async fn publish(&self, channel: &Channel, message: Bytes) -> Result<(), StoreError>;
    /// Makes sure this replica listens to `channel` (`first`: it had no local subscriber).
    async fn subscribe(&self, channel: &Channel, first: bool) -> Result<(), StoreError>;
    /// Stops listening to channels no local subscriber of `hub` wants any more.
    async fn unsubscribe(&self, idle: &[Channel], hub: &Hub);
}

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
        }
    }

    /// Across replicas through `transport`, which feeds `hub` with what it receives and
    /// moves `resyncs` whenever messages may have been lost.
    pub(crate) fn with_transport(
        hub: Arc<Hub>,
        transport: Arc<dyn Transport>,
        resyncs: watch::Receiver<u64>,
    ) -> Self {
        Self {
            hub,
            transport: Some(transport),
            resyncs,
            _never: None,
        }
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
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or(0);
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
    use super::*;

    impl Hub {
        /// Channels with at least one local subscriber.
        pub(crate) fn len(&self) -> usize {
            self.channels
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len()
        }
    }

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
