//! What travels between replicas: where a message goes ([`Channel`]) and the bytes it
//! travels as ([`frame`]/[`unframe`]).

use bytes::Bytes;

/// Messages a subscriber may fall behind by before it loses the oldest.
pub(crate) const BUFFER: usize = 256;
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
    pub(crate) fn buffer(&self) -> usize {
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
