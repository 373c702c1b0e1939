//! The v1 front-end's state: where unsigned pushes are taken ([`Intake`]), its settings,
//! and [`V1`], the core it delivers through with its admission state.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::{clients, Admission};
use crate::delivery::Delivery;

/// Where unsigned pushes are taken (`RELAY_V1_INTAKE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// `POST /` on the public listener (and the admin socket's deprecated push).
    Public,
    /// Only `POST /admin/v1/push` on the admin socket.
    Local,
    /// Nowhere.
    Off,
}

impl Intake {
    /// The 403 text of `POST /` on the public listener, when it refuses.
    pub fn public_refusal(self) -> Option<&'static str> {
        match self {
            Intake::Public => None,
            Intake::Local => Some("unsigned pushes are accepted only on the local admin socket"),
            Intake::Off => Some(OFF),
        }
    }

    /// The 403 text of the admin socket's unsigned push, when it refuses.
    pub fn local_refusal(self) -> Option<&'static str> {
        (self == Intake::Off).then_some(OFF)
    }
}

const OFF: &str = "unsigned pushes are not accepted";

/// The v1 front-end's settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Where unsigned pushes are taken.
    pub intake: Intake,
    /// `Sunset` of the deprecated unsigned push on the admin socket, verbatim.
    pub sunset: Option<String>,
    /// App ids of the apple-app-site-association file; `None` answers it 404.
    pub aasa_app_ids: Option<Vec<String>>,
    /// Ciphertext cap (`RELAY_MAX_CIPHERTEXT_CHARS`).
    pub max_ciphertext_chars: usize,
    /// Intake requests processed at once.
    pub max_inflight: usize,
    /// Time a client has to send its request headers.
    pub header_timeout: Duration,
    /// Time a client has to send its request body.
    pub body_timeout: Duration,
    /// Per-client-address bucket: capacity (0: off) and refill per second.
    pub client_rate: (u32, f64),
    /// Proxies whose X-Forwarded-For is honoured.
    pub trusted_proxies: Vec<clients::Cidr>,
}

/// The v1 front-end: its settings, the core it delivers through, and its admission state.
#[derive(Debug)]
pub(crate) struct V1 {
    pub(super) settings: Settings,
    pub(super) delivery: Arc<Delivery>,
    pub(super) admission: Arc<Admission>,
    pub(super) replica: String,
    /// Several regions: each device decided in its home region.
    pub(super) regions: Option<Arc<crate::region::Regions>>,
}

impl V1 {
    /// The front-end over `delivery`, admitting through `admission`; `replica` names this
    /// replica in log lines.
    pub(crate) fn new(
        settings: Settings,
        delivery: Arc<Delivery>,
        admission: Arc<Admission>,
        replica: String,
    ) -> Self {
        Self {
            settings,
            delivery,
            admission,
            replica,
            regions: None,
        }
    }

    /// Decides each device in its home region (`RELAY_REGION`).
    pub(crate) fn with_regions(mut self, regions: Option<Arc<crate::region::Regions>>) -> Self {
        self.regions = regions;
        self
    }

    /// Forgets client buckets that are full again (called periodically).
    pub(crate) fn sweep(&self) {
        self.admission.sweep(self.delivery.clock().now_ms());
    }

    /// The relay-wide admission these settings ask for (shared with `/v2`).
    pub(crate) fn admission(settings: &Settings) -> Admission {
        Admission::new(
            settings.max_inflight,
            settings.client_rate,
            settings.trusted_proxies.clone(),
        )
    }
}
