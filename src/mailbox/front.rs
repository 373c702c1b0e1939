//! The mailbox front-end itself: the apps it serves, its settings, and the one store round
//! trip every handler shares ([`Mailboxes::run`]), with the answers it maps to errors.

use std::sync::Arc;

use tokio::sync::watch as stop_watch;

use super::state::{Answer, Limits, Name, Op, Request};
use crate::clock::Clock;
use crate::store::Store;

use super::auth::Bearer;
use super::error::MailboxError;
use super::{ice, push};

/// One app served mailboxes (`RELAY_APPS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// 1 to 32 of `[a-z0-9-]`, starting with a letter.
    pub name: String,
    /// The APNs topic of its pushes (`push=<topic>`); `None`: no push extension.
    pub push: Option<String>,
    /// The signal extension.
    pub signal: bool,
    /// The ICE extension.
    pub ice: bool,
}

/// The mailbox front-end's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The apps served; none: every `/v1/...` path is 404.
    pub apps: Vec<App>,
    /// Idle expiry and the envelopes a direction holds.
    pub limits: Limits,
    /// The largest envelope, bytes.
    pub max_envelope_bytes: usize,
    /// What bounds a socket.
    pub sockets: Sockets,
}

/// What bounds the watch and signal sockets.
#[derive(Debug, Clone, Copy)]
pub struct Sockets {
    /// Sockets of one mailbox open at once on this replica (`RELAY_MAILBOX_MAX_SOCKETS`).
    pub per_mailbox: usize,
    /// Sockets open at once on this replica (`RELAY_MAX_SOCKETS`).
    pub per_replica: usize,
    /// How often a socket is pinged; silent for twice this, it is closed with 1001
    /// (`RELAY_SOCKET_PING_S`).
    pub ping: std::time::Duration,
    /// Frame bytes a signal receiver may have waiting (`RELAY_SIGNAL_BUFFER_BYTES`).
    pub signal_buffer_bytes: usize,
}

/// The mailbox front-end.
pub struct Mailboxes {
    pub(super) settings: Settings,
    pub(super) store: Arc<Store>,
    pub(super) clock: Clock,
    pub(super) modules: push::Modules,
    pub(super) ice: Option<ice::Ice>,
    pub(super) stop: stop_watch::Receiver<bool>,
    pub(super) places: Arc<super::places::Places>,
    /// Several regions: each mailbox decided in its home region.
    pub(super) regions: Option<Arc<crate::region::Regions>>,
}

impl std::fmt::Debug for Mailboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailboxes")
            .field("apps", &self.settings.apps)
            .finish_non_exhaustive()
    }
}

impl Mailboxes {
    /// The front-end over `store`, pushing through `modules`, handing out ICE credentials
    /// through `ice` (when a provider is configured); its sockets close (1001) when `stop`
    /// turns true.
    pub fn new(
        settings: Settings,
        store: Arc<Store>,
        clock: Clock,
        modules: push::Modules,
        ice: Option<ice::Ice>,
        stop: stop_watch::Receiver<bool>,
    ) -> Self {
        let places =
            super::places::Places::new(settings.sockets.per_mailbox, settings.sockets.per_replica);
        Self {
            places,
            settings,
            store,
            clock,
            modules,
            ice,
            stop,
            regions: None,
        }
    }

    /// Decides each mailbox in its home region (`RELAY_REGION`).
    pub fn with_regions(mut self, regions: Option<Arc<crate::region::Regions>>) -> Self {
        self.regions = regions;
        self
    }

    pub(super) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// One store round trip; the answers every route shares mapped to their errors.
    pub(super) async fn run(
        &self,
        name: &Name,
        bearer: &Bearer,
        op: &Op,
    ) -> Result<Answer, MailboxError> {
        let answer = self
            .store
            .mailboxes()
            .apply(
                &Request {
                    name,
                    bearer: bearer.hash(),
                    op,
                    limits: self.settings.limits,
                },
                self.now_ms(),
            )
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "mailbox: the shared store did not answer");
                MailboxError::Unavailable
            })?;
        match answer {
            Answer::NotFound => Err(MailboxError::NotFound),
            Answer::Forbidden => Err(MailboxError::Forbidden),
            Answer::RateLimited(s) => {
                if let Some(b) = op.bucket() {
                    crate::metrics::mailbox_rate_limited(b.label());
                }
                Err(MailboxError::RateLimited(s))
            }
            a => Ok(a),
        }
    }
}
