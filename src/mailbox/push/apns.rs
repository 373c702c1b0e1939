//! APNs registrations for mailbox pushes: `{"service":"apns","token":"<hex>",
//! "environment":"production"|"development","tag":..,"alert":..}`, and the notification a
//! write asks for, sent through the relay's one APNs client (its connections and provider
//! token), which renders the spec's payloads ([`crate::push::apns::payload::wake`]):
//!
//! - alert: `apns-push-type: alert`, priority 10, expiring in 7 days;
//! - silent: `apns-push-type: background`, priority 5, expiring in 1 hour.
//!
//! The topic is the app's (`push=<topic>`); the registration's environment picks
//! production or sandbox. A 410 or `BadDeviceToken` forgets the registration; nothing else
//! does.

use serde::{Deserialize, Serialize};

use super::common::{wake, Alert, Notify, Tag};
use crate::device::{DeviceToken, Environment};
use crate::push::{Kind, Notification, Priority};
use crate::secret::Secret;

/// Seconds an alert push may wait in APNs.
const ALERT_LIFETIME_S: u64 = 7 * 24 * 3600;
/// Seconds a silent push may wait in APNs.
const SILENT_LIFETIME_S: u64 = 3600;

/// An APNs registration (`"service":"apns"`): every member checked as it is read, and no
/// member besides these.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The device token.
    pub token: Token,
    /// Which APNs environment; production when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Which>,
    /// The tag.
    pub tag: Tag,
    /// The alert text, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<Alert>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("apns::Registration")
            .field("environment", &self.environment)
            .finish_non_exhaustive()
    }
}

/// An APNs device token as registered: lowercase hex of 32 to 100 bytes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Token(DeviceToken);

impl TryFrom<String> for Token {
    type Error = &'static str;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        let lower_hex = (64..=200).contains(&s.len())
            && s.len().is_multiple_of(2)
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match DeviceToken::parse(&s) {
            Some(t) if lower_hex => Ok(Token(t)),
            _ => Err("token must be the APNs device token: lowercase hex of 32 to 100 bytes"),
        }
    }
}

impl From<Token> for String {
    fn from(t: Token) -> String {
        t.0.expose().to_owned()
    }
}

/// A registration's `environment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    /// APNs production.
    Production,
    /// The APNs sandbox.
    Development,
}

impl Registration {
    /// The environment and notification of one push on the app's `topic` at `now_s`
    /// (seconds; the expiry counts from it).
    pub fn notification(
        &self,
        notify: Notify,
        topic: &str,
        now_s: u64,
    ) -> (Environment, Notification) {
        let env = match self.environment {
            Some(Which::Development) => Environment::Sandbox,
            Some(Which::Production) | None => Environment::Production,
        };
        let (kind, priority, lifetime) = match notify {
            Notify::Alert => (Kind::Alert, Priority::High, ALERT_LIFETIME_S),
            Notify::Silent => (Kind::Background, Priority::Normal, SILENT_LIFETIME_S),
        };
        let n = Notification {
            to: Secret::new(self.token.0.expose()),
            id: crate::device::uuid4(),
            topic: Some(topic.to_owned()),
            kind,
            priority,
            expiration_s: now_s + lifetime,
            collapse_key: None,
            payload: wake(&self.tag, self.alert.as_ref(), notify),
        };
        (env, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The injected clock's second (2026-01-01).
    const NOW_S: u64 = 1_767_225_600;
    use serde_json::{json, Value};

    fn reg(v: Value) -> Result<Registration, serde_json::Error> {
        let mut v = v;
        v.as_object_mut().unwrap().remove("service");
        serde_json::from_value(v)
    }

    #[test]
    fn the_specs_payloads() {
        let tok = "ab".repeat(32);
        let r = reg(json!({"service":"apns","token":tok,"tag":"Zq3k8r2mT1u0wQ"})).unwrap();
        let body = |notify| {
            let (_, n) = r.notification(notify, "com.example", NOW_S);
            String::from_utf8(crate::push::apns::render(&n).to_vec()).unwrap()
        };
        assert_eq!(
            body(Notify::Alert),
            r#"{"aps":{"alert":{"body":"New message"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
        );
        assert_eq!(
            body(Notify::Silent),
            r#"{"aps":{"content-available":1},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
        );
        let r = reg(
            json!({"service":"apns","token":"ab".repeat(32),"tag":"t","alert":"a \"quoted\"\nline"}),
        )
        .unwrap();
        let (_, n) = r.notification(Notify::Alert, "com.example", NOW_S);
        let v: Value = serde_json::from_slice(&crate::push::apns::render(&n)).unwrap();
        assert_eq!(v["aps"]["alert"]["body"], "a \"quoted\"\nline");
    }

    #[test]
    fn the_environment_kind_and_priority() {
        let tok = "ab".repeat(32);
        let r = reg(json!({"service":"apns","token":tok,"environment":"development","tag":"t"}))
            .unwrap();
        let (env, n) = r.notification(Notify::Silent, "com.example", NOW_S);
        assert_eq!(env, Environment::Sandbox);
        assert_eq!((n.kind, n.priority), (Kind::Background, Priority::Normal));
        assert_eq!(n.topic.as_deref(), Some("com.example"));
        // The expiry counts from the clock the caller passes, not the machine's.
        assert_eq!(n.expiration_s, NOW_S + SILENT_LIFETIME_S);
        let r = reg(json!({"service":"apns","token":tok,"tag":"t"})).unwrap();
        let (env, n) = r.notification(Notify::Alert, "com.example", NOW_S);
        assert_eq!(env, Environment::Production);
        assert_eq!((n.kind, n.priority), (Kind::Alert, Priority::High));
        assert_eq!(n.expiration_s, NOW_S + ALERT_LIFETIME_S);
    }

    #[test]
    fn registration_rules() {
        let tok = "ab".repeat(32);
        let good = [
            (
                "production",
                json!({"token":tok,"environment":"production","tag":"t"}),
            ),
            ("100 bytes", json!({"token":"ab".repeat(100),"tag":"t"})),
        ];
        for (name, v) in good {
            assert!(reg(v).is_ok(), "{name}");
        }
        let bad = [
            ("upper case", json!({"token":"AB".repeat(32),"tag":"t"})),
            ("31 bytes", json!({"token":"ab".repeat(31),"tag":"t"})),
            ("101 bytes", json!({"token":"ab".repeat(101),"tag":"t"})),
            ("odd length", json!({"token":format!("{tok}a"),"tag":"t"})),
            ("no token", json!({"tag":"t"})),
            (
                "sandbox",
                json!({"token":tok,"environment":"sandbox","tag":"t"}),
            ),
            ("unknown member", json!({"token":tok,"tag":"t","extra":"x"})),
            ("no tag", json!({"token":tok})),
        ];
        for (name, v) in bad {
            assert!(reg(v).is_err(), "{name}");
        }
    }

    #[test]
    fn a_registration_never_prints_its_token() {
        let tok = "ab".repeat(32);
        let r = reg(json!({"token":tok,"tag":"t"})).unwrap();
        assert!(!format!("{r:?}").contains(&tok));
    }
}
