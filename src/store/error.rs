//! What went wrong in the store ([`StoreError`]) and how the store is counted: the
//! operations the round-trip metrics name ([`StoreOp`]) and the stored or published data
//! this version could not read ([`DecodeKind`]).

use std::future::Future;
use std::time::Instant;

use crate::metrics;

/// What a store call answers.
pub type StoreResult<T> = Result<T, StoreError>;

/// The store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis answered with an error, or not at all within the timeout.
    #[error("redis: {0}")]
    Redis(String),
    /// The retry queue shard is full (`store::queue::SHARD_CAP`).
    #[error("the retry queue is full")]
    Full,
    /// This replica runs on its in-process store because Redis failed, and the operation
    /// needs the shared store (signed pushes, mailboxes).
    #[error("the shared store is unavailable (this replica is degraded)")]
    Degraded,
}

/// A store operation, as the `op` label of `sealrelay_store_duration_seconds` and
/// `sealrelay_store_errors_total` names it. The store owns the list; the metrics register
/// [`StoreOp::ALL`] at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// A policy admission (`policy_admit.lua`).
    Admit,
    /// The rollback of a refused forward.
    Rollback,
    /// The environment a device turned out to live on.
    RememberEnv,
    /// A hold of an alert whose forward waits in the retry queue.
    Hold,
    /// The end of a hold.
    Release,
    /// A dead token's tombstone.
    Bury,
    /// A busy client block's shared bucket.
    Client,
    /// A retry item written (new, rescheduled, or handed over).
    QueuePut,
    /// Due retry items claimed from one shard.
    QueueClaim,
    /// A retry item removed by its claimer.
    QueueAck,
    /// The retry queue's numbers, for the gauges.
    QueueDepth,
    /// A fan-out message published.
    FanoutPublish,
    /// A fan-out channel subscribed.
    FanoutSubscribe,
    /// A signed push's receipt created or found.
    ReceiptBegin,
    /// Target changes applied to a receipt.
    ReceiptUpdate,
    /// A receipt read.
    ReceiptGet,
    /// The sealed request kept beside a push's lease, read by a taker.
    ReceiptKept,
    /// One signer read.
    SignerGet,
    /// A signer enrolled or updated.
    SignerEnroll,
    /// A signer revoked.
    SignerRevoke,
    /// Every signer read.
    SignerList,
    /// One mailbox request (`mailbox.lua`).
    Mailbox,
}

impl StoreOp {
    /// Every operation, for the series registered at start-up.
    pub const ALL: &'static [StoreOp] = &[
        StoreOp::Admit,
        StoreOp::Rollback,
        StoreOp::RememberEnv,
        StoreOp::Hold,
        StoreOp::Release,
        StoreOp::Bury,
        StoreOp::Client,
        StoreOp::QueuePut,
        StoreOp::QueueClaim,
        StoreOp::QueueAck,
        StoreOp::QueueDepth,
        StoreOp::FanoutPublish,
        StoreOp::FanoutSubscribe,
        StoreOp::ReceiptBegin,
        StoreOp::ReceiptUpdate,
        StoreOp::ReceiptGet,
        StoreOp::ReceiptKept,
        StoreOp::SignerGet,
        StoreOp::SignerEnroll,
        StoreOp::SignerRevoke,
        StoreOp::SignerList,
        StoreOp::Mailbox,
    ];

    /// Every operation's label, in the order of [`StoreOp::ALL`].
    pub const LABELS: [&'static str; StoreOp::ALL.len()] = {
        let mut out = [""; StoreOp::ALL.len()];
        let mut i = 0;
        while i < out.len() {
            out[i] = StoreOp::ALL[i].as_str();
            i += 1;
        }
        out
    };

    /// The metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            StoreOp::Admit => "admit",
            StoreOp::Rollback => "rollback",
            StoreOp::RememberEnv => "remember_env",
            StoreOp::Hold => "hold",
            StoreOp::Release => "release",
            StoreOp::Bury => "bury",
            StoreOp::Client => "client",
            StoreOp::QueuePut => "queue_put",
            StoreOp::QueueClaim => "queue_claim",
            StoreOp::QueueAck => "queue_ack",
            StoreOp::QueueDepth => "queue_depth",
            StoreOp::FanoutPublish => "fanout_publish",
            StoreOp::FanoutSubscribe => "fanout_subscribe",
            StoreOp::ReceiptBegin => "receipt_begin",
            StoreOp::ReceiptUpdate => "receipt_update",
            StoreOp::ReceiptGet => "receipt_get",
            StoreOp::ReceiptKept => "receipt_kept",
            StoreOp::SignerGet => "signer_get",
            StoreOp::SignerEnroll => "signer_enroll",
            StoreOp::SignerRevoke => "signer_revoke",
            StoreOp::SignerList => "signer_list",
            StoreOp::Mailbox => "mailbox",
        }
    }

    /// Records one run of this operation.
    pub(crate) fn record(self, started: Instant, ok: bool) {
        metrics::store_op(self.as_str(), started.elapsed(), ok);
    }

    /// Runs `f` and records its duration and outcome under this operation.
    pub(crate) async fn timed<T>(
        self,
        f: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let r = f.await;
        self.record(started, r.is_ok());
        r
    }
}

/// Stored or published data this version could not read: the `kind` label of
/// `sealrelay_store_decode_errors_total`. Such data is never read as a default (an unknown
/// environment code is not production): it is counted, logged, and set aside or skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeKind {
    /// A retry item that opened but holds a value this version does not know (an
    /// environment code, a ticket kind): moved aside like an item sealed under another key.
    Pending,
    /// A message on a mailbox's event channel that is neither `seq <dir> <n>` nor `erase`.
    MailboxEvent,
}

impl DecodeKind {
    /// Every kind, for the series registered at start-up.
    pub const ALL: &'static [DecodeKind] = &[DecodeKind::Pending, DecodeKind::MailboxEvent];

    /// Every kind's label, in the order of [`DecodeKind::ALL`].
    pub const LABELS: [&'static str; DecodeKind::ALL.len()] = {
        let mut out = [""; DecodeKind::ALL.len()];
        let mut i = 0;
        while i < out.len() {
            out[i] = DecodeKind::ALL[i].as_str();
            i += 1;
        }
        out
    };

    /// The metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            DecodeKind::Pending => "pending",
            DecodeKind::MailboxEvent => "mailbox_event",
        }
    }

    /// Counts one failure of this kind.
    pub fn count(self) {
        metrics::store_decode_error(self.as_str());
    }
}
