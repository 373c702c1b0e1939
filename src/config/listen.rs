//! Listeners and drain: `RELAY_LISTEN`, `RELAY_ADMIN_LISTEN`, `RELAY_SHUTDOWN_*`.

use std::time::Duration;

use super::Reader;
use crate::app::Settings;

pub(super) fn read(r: &mut Reader<'_>) -> Settings {
    Settings {
        listen: r.addr("RELAY_LISTEN"),
        admin_listen: r.addr("RELAY_ADMIN_LISTEN"),
        shutdown_delay: Duration::from_secs(r.int("RELAY_SHUTDOWN_DELAY_S", 0, 300)),
        shutdown_grace: Duration::from_secs(r.int("RELAY_SHUTDOWN_GRACE_S", 1, 600)),
    }
}
