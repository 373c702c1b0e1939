//! FCM registrations for mailbox pushes: `{"service":"fcm","token":"<FCM registration
//! token>","tag":..,"alert":..}`, and the notification a write asks for, sent through
//! [`crate::push::fcm::FcmClient`] (HTTP v1 with the service account's OAuth2 token), which
//! renders the spec's data-only messages. `UNREGISTERED` forgets the registration; nothing
//! else does (an `INVALID_ARGUMENT` is a payload error).

use serde::{Deserialize, Serialize};

use super::common::{wake, Alert, Notify, Tag};
use crate::device::Environment;
use crate::push::{fcm, Kind, Notification, Priority};
use crate::secret::Secret;

/// Seconds an alert may wait in FCM (`android.ttl`, rendered by the FCM module).
const ALERT_LIFETIME_S: u64 = 7 * 24 * 3600;
/// Seconds a silent push may wait in FCM.
const SILENT_LIFETIME_S: u64 = 3600;

/// An FCM registration (`"service":"fcm"`): every member checked as it is read, and no
/// member besides these.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The registration token.
    pub token: Token,
    /// The tag.
    pub tag: Tag,
    /// The alert text, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<Alert>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("fcm::Registration").finish_non_exhaustive()
    }
}

/// An FCM registration token: 32 to 1024 of `A-Z a-z 0-9 _ : -`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Token(String);

impl TryFrom<String> for Token {
    type Error = &'static str;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        if fcm::is_valid_registration_token(&s) {
            Ok(Token(s))
        } else {
            Err("token must be the FCM registration token: 32 to 1024 of A-Z a-z 0-9 _ : -")
        }
    }
}

impl From<Token> for String {
    fn from(t: Token) -> String {
        t.0
    }
}

impl Registration {
    /// The notification of one push at `now_s` (seconds; the expiry counts from it). FCM
    /// has one environment.
    pub fn notification(&self, notify: Notify, now_s: u64) -> (Environment, Notification) {
        let (kind, priority, lifetime) = match notify {
            Notify::Alert => (Kind::Alert, Priority::High, ALERT_LIFETIME_S),
            Notify::Silent => (Kind::Data, Priority::Normal, SILENT_LIFETIME_S),
        };
        let n = Notification {
            to: Secret::new(&self.token.0),
            id: crate::device::uuid4(),
            topic: None,
            kind,
            priority,
            expiration_s: now_s + lifetime,
            collapse_key: None,
            payload: wake(&self.tag, self.alert.as_ref(), notify),
        };
        (Environment::Production, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The injected clock's second (2026-01-01).
    const NOW_S: u64 = 1_767_225_600;
    use serde_json::json;

    #[test]
    fn registration_rules() {
        let tok = "a".repeat(40);
        let ok = |v| serde_json::from_value::<Registration>(v);
        assert!(ok(json!({"token": tok, "tag": "t", "alert": "hi"})).is_ok());
        let bad = [
            ("short token", json!({"token": "a".repeat(31), "tag": "t"})),
            (
                "bad character",
                json!({"token": format!("{tok}/"), "tag": "t"}),
            ),
            (
                "unknown member",
                json!({"token": tok, "tag": "t", "environment": "production"}),
            ),
            ("no tag", json!({"token": tok})),
        ];
        for (name, v) in bad {
            assert!(ok(v).is_err(), "{name}");
        }
    }

    #[test]
    fn a_silent_push_is_data_and_an_alert_is_high() {
        let r: Registration =
            serde_json::from_value(json!({"token": "a".repeat(40), "tag": "t"})).unwrap();
        let (_, n) = r.notification(Notify::Silent, NOW_S);
        assert_eq!(
            (n.kind, n.priority, n.topic),
            (Kind::Data, Priority::Normal, None)
        );
        let (_, n) = r.notification(Notify::Alert, NOW_S);
        assert_eq!((n.kind, n.priority), (Kind::Alert, Priority::High));
        assert_eq!(n.expiration_s, NOW_S + ALERT_LIFETIME_S);
        assert!(!format!("{r:?}").contains(&"a".repeat(40)));
    }
}
