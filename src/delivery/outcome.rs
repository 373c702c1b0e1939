//! What happened to one notification in the core: admitted and forwarded, held back by
//! the policy, queued for retry, or refused by the service with its typed verdict. The
//! core answers no protocol: each front-end renders these in its own vocabulary (v1's
//! `{"v":1,...}` bodies, signed pushes' receipt states, mailboxes' counters).

use crate::policy::DeadReason;
use crate::push::{Verdict, VerdictClass};

/// What happened to one notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The service accepted it.
    Forwarded,
    /// Dry run (`RELAY_DRY_RUN=true`, no credentials): logged, not sent.
    DryRun,
    /// Duplicate within the dedup window, or while its forward waits in the retry queue.
    Coalesced,
    /// Held by flap suppression.
    Suppressed,
    /// The device's bucket is empty.
    RateLimited {
        /// Seconds until a token is back.
        retry_after_s: u64,
    },
    /// The service failed transiently; the notification waits in the retry queue.
    Queued,
    /// The token is in the dead-token memory: rejected with the reason it was buried
    /// for, without asking the service again.
    Remembered(DeadReason),
    /// The service's final verdict on it was not delivered (token dead, relay
    /// misconfigured, request rejected, or a transient failure that could not be queued).
    Failed(Verdict),
    /// No push service configured and not a dry run.
    NotConfigured,
    /// The policy store could not answer.
    StoreUnavailable,
}

impl Outcome {
    /// The outcome a final verdict settles as.
    pub fn of(v: Verdict) -> Self {
        if v.class == VerdictClass::Delivered {
            Outcome::Forwarded
        } else {
            Outcome::Failed(v)
        }
    }
}
