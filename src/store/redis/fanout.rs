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

use super::{err, RedisSettings};
use crate::store::common::StoreError;
use crate::store::fanout::{Channel, Fanout, Hub, Transport};

/// Publishing and subscribing through Redis.
pub struct RedisFanout {
    publisher: Pool,
    subscriber: SubscriberClient,
    /// Serializes subscribe and unsubscribe calls, so pruning an idle channel cannot undo a
    /// subscription a new local subscriber just asked for.
    ops: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for RedisFanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFanout").finish_non_exhaustive()
    }
}

/// Messages from Redis the subscriber connection may be ahead of the hub by.
const SUBSCRIBER_BUFFER: usize = 4096;

impl RedisFanout {
    /// Connects the subscriber (in the background, retried like the pool) and returns the
    /// seam. `publisher` is the store's command pool.
    pub fn connect(settings: &RedisSettings, publisher: Pool) -> anyhow::Result<Fanout> {
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
            .with_performance_config(|p| p.broadcast_channel_capacity = SUBSCRIBER_BUFFER)
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_subscriber_client()
            .map_err(|e| anyhow::anyhow!("Redis subscriber: {}", e.details()))?;
        // The connection task runs on by itself (and reconnects); its handle is not needed.
        drop(subscriber.connect());
        let hub: Arc<Hub> = Arc::default();
        let (resync_tx, resync_rx) = watch::channel(0u64);
        let resync_tx = Arc::new(resync_tx);

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
            let mut reconnects = subscriber.reconnect_rx();
            tokio::spawn(async move {
                let mut first = true;
                while reconnects.recv().await.is_ok() {
                    if first {
                        // The first connection is not a reconnection.
                        first = false;
                        if subscriber.tracked_channels().is_empty()
                            && subscriber.tracked_shard_channels().is_empty()
                        {
                            continue;
                        }
                    }
                    if let Err(e) = subscriber.resubscribe_all().await {
                        tracing::warn!(error = %e, "could not subscribe to fan-out channels again after a reconnect");
                    }
                    resync_tx.send_modify(|n| *n += 1);
                }
            });
        }
        Ok(Fanout::with_transport(
            hub,
            Arc::new(RedisFanout {
                publisher,
                subscriber,
                ops: tokio::sync::Mutex::new(()),
            }),
            resync_rx,
        ))
    }
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
        let _g = self.ops.lock().await;
        if channel.is_sharded() {
            self.subscriber
                .ssubscribe(channel.name())
                .await
                .map_err(err)
        } else {
            self.subscriber.subscribe(channel.name()).await.map_err(err)
        }
    }

    /// Unsubscribes from channels nobody on this replica listens to any more (unless a new
    /// local subscriber joined since they were found idle).
    async fn unsubscribe(&self, idle: &[Channel], hub: &Hub) {
        if idle.is_empty() {
            return;
        }
        let _g = self.ops.lock().await;
        for c in idle {
            if hub.has(c) {
                continue;
            }
            let r = if c.is_sharded() {
                self.subscriber.sunsubscribe(c.name()).await
            } else {
                self.subscriber.unsubscribe(c.name()).await
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "unsubscribing an idle fan-out channel failed");
            }
        }
    }
}
