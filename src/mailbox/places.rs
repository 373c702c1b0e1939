//! The places for sockets on one replica: at most `RELAY_MAILBOX_MAX_SOCKETS` of one mailbox
//! and `RELAY_MAX_SOCKETS` in all, taken before an upgrade costs the store anything and
//! given back the moment a socket closes.

use std::sync::Arc;

use super::error::MailboxError;
use super::state::Name;

/// Why a socket found no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `RELAY_MAILBOX_MAX_SOCKETS` of its mailbox are open on this replica: 429.
    Mailbox,
    /// `RELAY_MAX_SOCKETS` are open on this replica: 503.
    Replica,
}

impl Full {
    /// Both.
    pub const ALL: [Full; 2] = [Full::Mailbox, Full::Replica];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Full::Mailbox => "mailbox",
            Full::Replica => "replica",
        }
    }
}

/// The places for sockets on this replica: at most `per_mailbox` of one mailbox and `total`
/// in all. A [`Place`] is held for a socket's life and given back when it drops.
#[derive(Debug)]
pub(crate) struct Places {
    per_mailbox: usize,
    total: usize,
    taken: std::sync::Mutex<Taken>,
}

#[derive(Debug, Default)]
struct Taken {
    total: usize,
    by_mailbox: std::collections::HashMap<String, usize>,
}

impl Places {
    /// `per_mailbox` sockets per mailbox, `total` in all.
    pub(crate) fn new(per_mailbox: usize, total: usize) -> Arc<Self> {
        Arc::new(Self {
            per_mailbox,
            total,
            taken: Default::default(),
        })
    }

    /// A place for a socket of `name`; 503 when the replica is full, 429 (`Retry-After: 1`)
    /// when the mailbox is.
    pub(crate) fn take(self: &Arc<Self>, name: &Name) -> Result<Place, MailboxError> {
        let mut t = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        if t.total >= self.total {
            crate::metrics::socket_refused(Full::Replica.as_str());
            return Err(MailboxError::Unavailable);
        }
        let n = t.by_mailbox.entry(name.as_str().to_owned()).or_insert(0);
        if *n >= self.per_mailbox {
            crate::metrics::socket_refused(Full::Mailbox.as_str());
            return Err(MailboxError::RateLimited(1));
        }
        *n += 1;
        t.total += 1;
        Ok(Place {
            places: self.clone(),
            name: name.as_str().to_owned(),
        })
    }
}

/// One socket's place, given back on drop.
#[derive(Debug)]
pub(crate) struct Place {
    places: Arc<Places>,
    name: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut t = self.places.taken.lock().unwrap_or_else(|p| p.into_inner());
        t.total -= 1;
        if let Some(n) = t.by_mailbox.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                t.by_mailbox.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_per_mailbox_and_per_replica_are_given_back_on_drop() {
        let places = Places::new(2, 3);
        let (a, b) = (Name::of("app", "a"), Name::of("app", "b"));
        let a1 = places.take(&a).unwrap();
        let a2 = places.take(&a).unwrap();
        assert_eq!(places.take(&a).unwrap_err(), MailboxError::RateLimited(1));
        let b1 = places.take(&b).unwrap();
        assert_eq!(places.take(&b).unwrap_err(), MailboxError::Unavailable);
        assert_eq!(places.taken.lock().unwrap().total, 3);
        drop(a1);
        let b2 = places.take(&b).unwrap();
        drop((a2, b1, b2));
        assert_eq!(places.taken.lock().unwrap().total, 0);
        assert!(places.taken.lock().unwrap().by_mailbox.is_empty());
    }
}
