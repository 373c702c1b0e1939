//! The core every front-end shares: admit one alert, push it, settle the outcome.
//!
//! [`Delivery::handle`] runs the policy through the store ([`crate::store`]), sends an
//! admitted forward through the [`Push`] service (trying the service's other environment once in
//! auto mode when the token belongs there), rolls the forward record back if the service
//! refuses it, queues it for retry when the failure is transient, and returns an
//! [`Outcome`]: what happened to the notification, which each front-end answers in its own
//! vocabulary. The retry worker ([`retry`]) settles queued forwards the same way, and tells
//! the front-end that asked how each ended ([`settlement`]): the core knows no front-end's
//! vocabulary.
//!
//! Round trips to the store: one on the happy path (the admission); a refusal adds the
//! rollback (and a dead token's burial), a queued forward adds the hold and the enqueue, an
//! environment fallback that works adds the remembered environment, and an alert whose
//! admission on this replica got no reply is rolled back before it is admitted again
//! ([`lost`]).

pub mod alert;
mod handle;
mod lost;
pub mod outcome;
pub mod retry;
pub mod settlement;

pub use alert::Alert;
pub use handle::{notification, Context, Delivery, Sender, Settings};
pub use outcome::Outcome;
pub use settlement::{Ending, Reference, Settlement};
