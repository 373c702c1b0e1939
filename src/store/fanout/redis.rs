//! The fan-out seam over Redis pub/sub: one subscriber connection per replica (fred's
//! `SubscriberClient`, which tracks what it is subscribed to), feeding the replica's
//! in-process [`Hub`]; publishes go through the command pool. Channels with a hash tag use
//! sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`, routed to the tag's slot on a Cluster), the
//! others plain pub/sub. After the subscriber reconnects, every tracked channel is
//! subscribed again and the resync counter grows, so consumers re-read what they may have
//! missed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::MessageKind;
use tokio::sync::watch;

use super::channel::Channel;
use super::memory::Hub;
use super::transport::Transport;
use crate::store::connection::client::{err, RedisSettings};
use crate::store::error::StoreError;

/// Publishing and subscribing through Redis.
pub struct RedisFanout {
    publisher: Pool,
    subscriber: SubscriberClient,
    /// Held shared by subscribe and unsubscribe calls and exclusively by the resubscription
    /// after a reconnect, so no channel's call overlaps the resubscription of them all.
    ops: Arc<tokio::sync::RwLock<()>>,
    /// One lock per channel with a call in flight: subscribing and releasing one channel
    /// are serialized, so releasing an idle channel cannot undo a subscription a new local
    /// subscriber just asked for, while a SUBSCRIBE that stalls (a paused Cluster node)
    /// holds only the upgrades of its own channel.
    channels: Arc<ChannelLocks>,
}

/// Per-channel locks, forgotten once no call holds them.
#[derive(Debug, Default)]
struct ChannelLocks(
    std::sync::Mutex<std::collections::HashMap<Channel, Arc<tokio::sync::Mutex<()>>>>,
);

impl ChannelLocks {
    /// Runs `f` holding `channel`'s lock.
    async fn with<T>(&self, channel: &Channel, f: impl std::future::Future<Output = T>) -> T {
        let lock = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(channel.clone())
            .or_default()
            .clone();
        let out = {
            let _g = lock.lock().await;
            f.await
        };
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Two references: the map's and ours; nobody else waits on it.
        if Arc::strong_count(&lock) == 2 {
            map.remove(channel);
        }
        out
    }
}

impl std::fmt::Debug for RedisFanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFanout").finish_non_exhaustive()
    }
}

/// Messages from Redis the subscriber connection may be ahead of the hub by.
const SUBSCRIBER_BUFFER: usize = 4096;
/// How long a command on the subscriber connection may take: a SUBSCRIBE that does not
/// answer fails its upgrade (503) instead of holding it.
const SUBSCRIBER_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisFanout {
    /// Connects the subscriber (in the background, retried like the pool), feeding `hub`;
    /// `publisher` is the store's command pool. With the counter of resynchronisations.
    pub(crate) fn connect(
        settings: &RedisSettings,
        publisher: Pool,
        hub: Arc<Hub>,
    ) -> anyhow::Result<(Arc<RedisFanout>, watch::Receiver<u64>)> {
        let mut config = Config::from_url(&settings.url)
            .map_err(|e| anyhow::anyhow!("REDIS_URL is not valid: {}", e.details()))?;
        config.fail_fast = false;
        let subscriber = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(2);
                c.internal_command_timeout = Duration::from_secs(2);
            })
            // Messages wait here between the connection task and the hub: fred's default of
            // 32 lost bursts of signal frames.
            .with_performance_config(|p| {
                p.broadcast_channel_capacity = SUBSCRIBER_BUFFER;
                p.default_command_timeout = SUBSCRIBER_TIMEOUT;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_subscriber_client()
            .map_err(|e| anyhow::anyhow!("Redis subscriber: {}", e.details()))?;
        // The connection task runs on by itself (and reconnects); its handle is not needed.
        drop(subscriber.connect());
        let (resync_tx, resync_rx) = watch::channel(0u64);
        let resync_tx = Arc::new(resync_tx);
        let ops = Arc::new(tokio::sync::RwLock::new(()));
        let channels = Arc::new(ChannelLocks::default());
        let (moved_tx, moved_rx) = tokio::sync::mpsc::unbounded_channel();

        // Messages from Redis to the local subscribers of their channel.
        {
            let hub = hub.clone();
            let resync_tx = resync_tx.clone();
            let mut rx = subscriber.message_rx();
            tokio::spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(m) => {
                            let name = m.channel.to_string();
                            let channel = match m.kind {
                                MessageKind::SMessage => Channel::sharded(name),
                                MessageKind::Message => Channel::global(name),
                                MessageKind::Sunsubscribe => {
                                    // Ours (an idle channel released) or the server's (the
                                    // channel's slot moved): the follower tells them apart.
                                    let _ = moved_tx.send(Channel::sharded(name));
                                    continue;
                                }
                                _ => continue,
                            };
                            let payload = match m.value {
                                Value::Bytes(b) => b,
                                Value::String(s) => Bytes::from(s.to_string()),
                                _ => continue,
                            };
                            hub.deliver(&channel, payload);
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            crate::metrics::fanout_lagged(n);
                            resync_tx.send_modify(|n| *n += 1);
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        // After a reconnect: subscribe to everything again, then tell consumers to resync.
        {
            let subscriber = subscriber.clone();
            let resync_tx = resync_tx.clone();
            let ops = ops.clone();
            let mut reconnects = subscriber.reconnect_rx();
            tokio::spawn(async move {
                let mut first = true;
                while reconnects.recv().await.is_ok() {
                    if first {
                        // The first connection is not a reconnection: nothing was missed,
                        // since a subscription asked for before it waits for it and is made
                        // on it (telling sockets to resync would make a watch opened in the
                        // relay's first moments send a head it has no reason to).
                        first = false;
                        continue;
                    }
                    // Until every channel is subscribed again (a refused or timed-out
                    // SUBSCRIBE is tried again, 100 ms doubling to 2 s): a subscriber that
                    // gave up would stay deaf with every channel marked subscribed.
                    let mut pause = Duration::from_millis(100);
                    loop {
                        let r = {
                            let _g = ops.write().await;
                            resubscribe(&subscriber).await
                        };
                        match r {
                            Ok(()) => break,
                            Err(e) => {
                                tracing::warn!(error = %e, "could not subscribe to fan-out channels again after a reconnect; retrying");
                                tokio::time::sleep(pause).await;
                                pause = (pause * 2).min(Duration::from_secs(2));
                            }
                        }
                    }
                    resync_tx.send_modify(|n| *n += 1);
                }
            });
        }
        tokio::spawn(follow_moves(
            moved_rx,
            subscriber.clone(),
            ops.clone(),
            channels.clone(),
            hub,
            resync_tx,
        ));
        let transport = Arc::new(RedisFanout {
            publisher,
            subscriber,
            ops,
            channels,
        });
        Ok((transport, resync_rx))
    }
}

/// Subscribes again to shard channels the server unsubscribed this replica from while a
/// local subscriber still listens: Redis does so, unasked, for every channel of a slot that
/// a reshard or a failover moved to another node. The `SSUBSCRIBE` follows the slot to its
/// new owner (`MOVED`), tried again (100 ms doubling to 2 s) until it is made or nobody
/// listens any more; then consumers are told to resync, since messages published between
/// the two were lost. An `sunsubscribe` this replica asked for (its last local subscriber
/// left) finds nobody listening and is let be.
async fn follow_moves(
    mut moved: tokio::sync::mpsc::UnboundedReceiver<Channel>,
    subscriber: SubscriberClient,
    ops: Arc<tokio::sync::RwLock<()>>,
    channels: Arc<ChannelLocks>,
    hub: Arc<Hub>,
    resync_tx: Arc<watch::Sender<u64>>,
) {
    while let Some(channel) = moved.recv().await {
        let mut pause = Duration::from_millis(100);
        let renewed = loop {
            let r = {
                let _g = ops.read().await;
                channels
                    .with(&channel, async {
                        if !hub.has(&channel) {
                            return Ok(false);
                        }
                        subscriber.ssubscribe(channel.name()).await.map(|()| true)
                    })
                    .await
            };
            match r {
                Ok(renewed) => break renewed,
                Err(e) => {
                    tracing::warn!(error = %e, "could not subscribe again to a fan-out channel the server dropped (a moved slot); retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        };
        if renewed {
            crate::metrics::fanout_moved();
            resync_tx.send_modify(|n| *n += 1);
        }
    }
}

/// Waits until the server has made the plain subscriptions `subscriber` sent so far. fred counts a
/// `SUBSCRIBE` done once it is written (its reply comes out of band and is dropped), so a
/// message published right after could reach the server first and be lost; a `PING` on
/// the same connection (the node a Cluster client sends plain subscriptions to) is
/// answered only after them. (`SSUBSCRIBE` waits for its own reply.)
async fn confirm(subscriber: &SubscriberClient) -> Result<(), fred::error::Error> {
    let slot = fred::util::redis_keyslot(subscriber.id().as_bytes());
    let ping = fred::types::CustomCommand::new_static(
        "PING",
        fred::types::ClusterHash::Custom(slot),
        false,
    );
    subscriber
        .custom::<Value, Value>(ping, Vec::new())
        .await
        .map(|_| ())
}

/// Subscribes again to every tracked channel, plain ones in one `SUBSCRIBE` and sharded
/// ones in one `SSUBSCRIBE` per hash slot. Not fred's `resubscribe_all`: that sends a
/// `SUBSCRIBE` without arguments when only sharded channels are tracked, and the error it
/// earns can confirm a later subscription before the server has made it (a message
/// published right after is then lost: seen in `fanout_reaches_another_replica_on_redis`).
async fn resubscribe(subscriber: &SubscriberClient) -> Result<(), fred::error::Error> {
    let plain: Vec<String> = subscriber
        .tracked_channels()
        .iter()
        .map(|c| c.to_string())
        .collect();
    if !plain.is_empty() {
        subscriber.subscribe(plain).await?;
        confirm(subscriber).await?;
    }
    let mut by_slot: std::collections::BTreeMap<u16, Vec<String>> = Default::default();
    for c in subscriber.tracked_shard_channels() {
        by_slot
            .entry(fred::util::redis_keyslot(c.as_bytes()))
            .or_default()
            .push(c.to_string());
    }
    for (_, group) in by_slot {
        subscriber.ssubscribe(group).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl Transport for RedisFanout {
    /// Publishes one travelling message.
    async fn publish(&self, channel: &Channel, message: Bytes) -> Result<(), StoreError> {
        let client = self.publisher.next();
        let r: Result<i64, _> = if channel.is_sharded() {
            client.spublish(channel.name(), message).await
        } else {
            client.publish(channel.name(), message).await
        };
        r.map(|_| ()).map_err(err)
    }

    /// Makes sure this replica's subscriber listens to `channel`.
    async fn subscribe(&self, channel: &Channel, first: bool) -> Result<(), StoreError> {
        let tracked = if channel.is_sharded() {
            self.subscriber
                .tracked_shard_channels()
                .contains(channel.name())
        } else {
            self.subscriber.tracked_channels().contains(channel.name())
        };
        if tracked && !first {
            return Ok(());
        }
        let _g = self.ops.read().await;
        self.channels
            .with(channel, async {
                if channel.is_sharded() {
                    self.subscriber
                        .ssubscribe(channel.name())
                        .await
                        .map_err(err)
                } else {
                    self.subscriber
                        .subscribe(channel.name())
                        .await
                        .map_err(err)?;
                    confirm(&self.subscriber).await.map_err(err)
                }
            })
            .await
    }

    /// Unsubscribes from channels nobody on this replica listens to any more (unless a new
    /// local subscriber joined since they were found idle).
    async fn unsubscribe(&self, idle: &[Channel], hub: &Hub) {
        if idle.is_empty() {
            return;
        }
        let _g = self.ops.read().await;
        for c in idle {
            self.channels
                .with(c, async {
                    if hub.has(c) {
                        return;
                    }
                    let r = if c.is_sharded() {
                        self.subscriber.sunsubscribe(c.name()).await
                    } else {
                        self.subscriber.unsubscribe(c.name()).await
                    };
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "unsubscribing an idle fan-out channel failed");
                    }
                })
                .await;
        }
    }
}
