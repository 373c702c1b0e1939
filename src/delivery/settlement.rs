//! How a queued delivery ended, told to the front-end that asked for it.
//!
//! A front-end that wants to hear how its queued deliveries end (signed pushes, whose
//! receipts say it target by target) puts its own [`Reference`] on the delivery
//! (`Context::settles`) and gives the core a [`Settlement`]. The core keeps the reference with
//! the queued item and, when the item leaves the queue, reports the [`Ending`]; it knows
//! nothing of what the reference names or how the front-end records it.

use super::outcome::Outcome;

/// A front-end's reference to what a delivery settles (for signed pushes: the push id and
/// the target's key), carried opaque and stored with the queued item.
pub type Reference = (String, String);

/// How a queued delivery ended.
#[derive(Debug, Clone, Copy)]
pub enum Ending<'a> {
    /// The service answered (or the relay answered for it): the outcome.
    Outcome(&'a Outcome),
    /// The staleness window closed before it could be sent.
    Expired,
    /// The item could not be sent as stored (a device token this version cannot read, or
    /// sealed under another queue key), and was taken out of the queue.
    SetAside,
    /// The replica stopped with the item in its in-process queue (Redis was failing, so it
    /// could not be handed on): it is lost with the replica.
    Lost,
}

/// Whom the core tells how queued deliveries ended.
#[async_trait::async_trait]
pub trait Settlement: Send + Sync + std::fmt::Debug {
    /// The queued item carrying `reference` left the queue with `ending`. Its staleness
    /// window closes at `deadline_ms`: a report the front-end cannot record at once is worth
    /// retrying until then, and not past it.
    async fn ended(&self, reference: &Reference, ending: Ending<'_>, deadline_ms: i64);
}
