//! The in-process end of the fan-out ([`Hub`]): every subscriber there is in process, and
//! the local end of the Redis fan-out, which feeds it from the Redis subscription.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::broadcast;

use super::channel::Channel;

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
}
