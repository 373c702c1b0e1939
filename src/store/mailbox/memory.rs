//! Mailboxes in process: [`MemoryMailboxes`] under a lock, running the mailbox's rules, and
//! [`InProcessMailboxes`], which publishes each request's events on the in-process fan-out.

use std::collections::HashMap;
use std::sync::Mutex;

use super::backend::{event_channel, MailboxBackend};
use crate::mailbox::state::{self, Answer, Kept, Mailbox, MailboxEvent, Name, Request};
use crate::store::concern::InProcess;
use crate::store::error::StoreError;

/// Mailboxes in process memory.
#[derive(Debug, Default)]
pub struct MemoryMailboxes {
    map: Mutex<HashMap<Name, Mailbox>>,
}

impl MemoryMailboxes {
    /// Applies one request: the answer, and the generation of the claim it applied to (0
    /// when none), for the event it publishes.
    fn apply_in(&self, req: &Request<'_>, now_ms: i64) -> (Answer, u64) {
        let name = req.name;
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(name).is_some_and(|m| m.expired(now_ms)) {
            map.remove(name);
        }
        let (answer, generation, kept) =
            state::request(map.get_mut(name), req.bearer, req.op, now_ms, req.limits);
        match kept {
            Kept::Same => {}
            Kept::Made(m) => {
                map.insert(name.clone(), *m);
            }
            Kept::Dropped => {
                map.remove(name);
            }
        }
        (answer, generation)
    }

    /// Forgets mailboxes idle past their time (called periodically).
    pub fn sweep(&self, now_ms: i64) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, m| !m.expired(now_ms));
    }
}

/// Mailboxes in process, publishing their events on the in-process fan-out.
pub type InProcessMailboxes = InProcess<MemoryMailboxes>;

#[async_trait::async_trait]
impl MailboxBackend for InProcessMailboxes {
    async fn apply(&self, req: &Request<'_>, now_ms: i64) -> Result<Answer, StoreError> {
        let (answer, generation) = self.memory.apply_in(req, now_ms);
        if let Some(ev) = MailboxEvent::of(req.op, &answer, generation) {
            let _ = self
                .fanout
                .publish(&event_channel("", req.name), ev.encode().as_bytes(), now_ms)
                .await;
        }
        Ok(answer)
    }

    fn sweep(&self, now_ms: i64) {
        self.memory.sweep(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::state::{Dir, Limits, Op};
    use crate::store::mailbox::receive_event;
    use bytes::Bytes;

    impl MemoryMailboxes {
        /// Applies one request (see [`Op`]) for the bearer whose SHA-256 hex is `bearer` (the
        /// answer alone, as the differential tests compare it).
        pub(crate) fn apply(
            &self,
            name: &Name,
            bearer: &str,
            op: &Op,
            now_ms: i64,
            limits: Limits,
        ) -> Answer {
            let req = Request {
                name,
                bearer,
                op,
                limits,
            };
            self.apply_in(&req, now_ms).0
        }

        /// Mailboxes held.
        pub(crate) fn len(&self) -> usize {
            self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
        }
    }

    const T0: i64 = 1_790_000_000_000;
    const LIMITS: Limits = Limits {
        idle_ms: 60_000,
        max_envelopes: 3,
    };

    #[test]
    fn idle_expiry_counts_writes_and_claims_not_reads() {
        let m = MemoryMailboxes::default();
        let n = Name::of("chat", "abcdefghijklmnop");
        m.apply(&n, "b", &Op::Claim, T0, LIMITS);
        m.apply(&n, "b", &Op::Head { dir: Dir::P2c }, T0 + 59_000, LIMITS);
        assert_eq!(
            m.apply(&n, "b", &Op::Head { dir: Dir::P2c }, T0 + 60_000, LIMITS),
            Answer::NotFound
        );
        m.apply(&n, "b", &Op::Claim, T0 + 60_000, LIMITS);
        m.apply(
            &n,
            "b",
            &Op::Put {
                dir: Dir::P2c,
                seq: 1,
                data: Bytes::from_static(b"x"),
                notify: false,
            },
            T0 + 100_000,
            LIMITS,
        );
        assert!(matches!(
            m.apply(&n, "b", &Op::Head { dir: Dir::P2c }, T0 + 159_999, LIMITS),
            Answer::Head { .. }
        ));
        m.sweep(T0 + 160_000);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn only_event_texts_are_received() {
        let ev = MailboxEvent::Erased { generation: 7 };
        assert_eq!(receive_event(ev.encode().as_bytes()), Some(ev));
        assert_eq!(receive_event(b"erase @07"), None);
    }
}
