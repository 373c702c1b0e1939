//! The checks of a mailbox socket's upgrade, shared by [`super::watch`] and
//! [`super::signal`]: the bearer (header or `zerobyte.bearer.<token>` subprotocol, 401), the
//! upgrade itself (400), the mailbox's fan-out channel subscribed before the store's check
//! (so nothing published in between is missed; 503), then the store's check of the bearer
//! and the sockets' bucket; subprotocol `zerobyte.v1` is selected.

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Request};

use super::auth::{self, Bearer};
use super::error::MailboxError;
use super::front::Mailboxes;
use crate::store::fanout::Subscription;
use crate::store::mailbox::{Answer, Name, Op};

/// The kinds of mailbox socket, as labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `GET .../<dir>/watch`.
    Watch,
    /// `GET .../signal/<side>`.
    Signal,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 2] = [Kind::Watch, Kind::Signal];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Watch => "watch",
            Kind::Signal => "signal",
        }
    }
}

/// A checked upgrade: the upgrade ready to take, the store's answer, the bearer, the
/// subscription to the mailbox's channel.
pub(super) type Accepted = (WebSocketUpgrade, Answer, Bearer, Subscription);

/// The checks, in order; the store's check and bucket are `op`'s. The upgrade, ready to
/// take, reads messages of at most `max_message` bytes.
pub(super) async fn accept(
    m: &Mailboxes,
    name: &Name,
    req: Request,
    max_message: usize,
    op: Op,
) -> Result<Accepted, MailboxError> {
    let (mut parts, _) = req.into_parts();
    let bearer = auth::from_upgrade(&parts.headers).ok_or(MailboxError::Unauthorized)?;
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|_| MailboxError::BadRequest)?;
    let sub = m
        .store
        .fanout()
        .subscribe(&m.store.mailboxes().channel(name))
        .await
        .map_err(|_| MailboxError::Unavailable)?;
    let answer = m.run(name, &bearer, &op).await?;
    let upgrade = upgrade
        .protocols([auth::SUBPROTOCOL])
        .max_message_size(max_message)
        .max_frame_size(max_message);
    Ok((upgrade, answer, bearer, sub))
}
