//! FCM registrations for mailbox pushes: `{"service":"fcm","token":"<FCM registration
//! token>","tag":..,"alert":..}`, and the notification a write asks for, sent through
//! [`crate::push::fcm::FcmClient`] (HTTP v1 with the service account's OAuth2 token), which
//! renders the spec's data-only messages. `UNREGISTERED` forgets the registration; nothing
//! else does (an `INVALID_ARGUMENT` is a payload error).

use serde_json::{Map, Value};

use super::{wake, Notify};
use crate::device::Environment;
use crate::push::{fcm, Kind, Notification, Priority};
use crate::secret::Secret;

/// Seconds an alert may wait in FCM (`android.ttl`, rendered by the FCM module).
const ALERT_LIFETIME_S: u64 = 7 * 24 * 3600;
/// Seconds a silent push may wait in FCM.
const SILENT_LIFETIME_S: u64 = 3600;

/// Checks an FCM registration's fields (the shared ones are checked already).
pub fn check(reg: &Map<String, Value>) -> Result<(), &'static str> {
    for k in reg.keys() {
        if !matches!(k.as_str(), "service" | "token" | "tag" | "alert") {
            return Err("FCM registrations take service, token, tag and alert only");
        }
    }
    match reg.get("token") {
        Some(Value::String(t)) if fcm::is_valid_registration_token(t) => Ok(()),
        _ => Err("token must be the FCM registration token: 32 to 1024 of A-Z a-z 0-9 _ : -"),
    }
}

/// The notification of one push for `reg` (already checked). FCM has one environment.
pub fn notification(
    reg: &Map<String, Value>,
    notify: Notify,
) -> Option<(Environment, Notification)> {
    let token = reg.get("token").and_then(Value::as_str).unwrap_or_default();
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (kind, priority, lifetime) = match notify {
        Notify::Alert => (Kind::Alert, Priority::High, ALERT_LIFETIME_S),
        Notify::Silent => (Kind::Data, Priority::Normal, SILENT_LIFETIME_S),
    };
    let n = Notification {
        to: Secret::new(token),
        id: crate::device::uuid4(),
        topic: None,
        kind,
        priority,
        expiration_s: now_s + lifetime,
        collapse_key: None,
        payload: wake(reg, notify),
    };
    Some((Environment::Production, n))
}
