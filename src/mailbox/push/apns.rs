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

use serde_json::{Map, Value};

use super::{wake, Notify};
use crate::device::Environment;
use crate::push::{Kind, Notification, Priority};
use crate::secret::Secret;

/// Seconds an alert push may wait in APNs.
const ALERT_LIFETIME_S: u64 = 7 * 24 * 3600;
/// Seconds a silent push may wait in APNs.
const SILENT_LIFETIME_S: u64 = 3600;

/// An APNs device token as registered: lowercase hex of 32 to 100 bytes.
fn is_apns_token(s: &str) -> bool {
    (64..=200).contains(&s.len())
        && s.len().is_multiple_of(2)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks an APNs registration's fields (the shared ones are checked already).
pub fn check(reg: &Map<String, Value>) -> Result<(), &'static str> {
    for k in reg.keys() {
        if !matches!(
            k.as_str(),
            "service" | "token" | "environment" | "tag" | "alert"
        ) {
            return Err("APNs registrations take service, token, environment, tag and alert only");
        }
    }
    match reg.get("token") {
        Some(Value::String(t)) if is_apns_token(t) => {}
        _ => return Err("token must be the APNs device token: lowercase hex of 32 to 100 bytes"),
    }
    match reg.get("environment") {
        None => Ok(()),
        Some(Value::String(e)) if e == "production" || e == "development" => Ok(()),
        _ => Err("environment must be production or development"),
    }
}

/// The environment and notification of one push for `reg` (already checked) on the app's
/// `topic`; `None` when the token is not one APNs takes (nothing is sent).
pub fn notification(
    reg: &Map<String, Value>,
    notify: Notify,
    topic: &str,
) -> Option<(Environment, Notification)> {
    let device = reg
        .get("token")
        .and_then(Value::as_str)
        .and_then(crate::device::DeviceToken::parse)?;
    let env = match reg.get("environment").and_then(Value::as_str) {
        Some("development") => Environment::Sandbox,
        _ => Environment::Production,
    };
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (kind, priority, lifetime) = match notify {
        Notify::Alert => (Kind::Alert, Priority::High, ALERT_LIFETIME_S),
        Notify::Silent => (Kind::Background, Priority::Normal, SILENT_LIFETIME_S),
    };
    let n = Notification {
        to: Secret::new(device.expose()),
        id: crate::device::uuid4(),
        topic: Some(topic.to_owned()),
        kind,
        priority,
        expiration_s: now_s + lifetime,
        collapse_key: None,
        payload: wake(reg, notify),
    };
    Some((env, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(v: Value) -> Map<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_specs_payloads() {
        let tok = "ab".repeat(32);
        let r = reg(serde_json::json!({"service":"apns","token":tok,"tag":"Zq3k8r2mT1u0wQ"}));
        let body = |notify| {
            let (_, n) = notification(&r, notify, "com.example").unwrap();
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
            serde_json::json!({"service":"apns","token":"ab".repeat(32),"tag":"t","alert":"a \"quoted\"\nline"}),
        );
        let (_, n) = notification(&r, Notify::Alert, "com.example").unwrap();
        let v: Value = serde_json::from_slice(&crate::push::apns::render(&n)).unwrap();
        assert_eq!(v["aps"]["alert"]["body"], "a \"quoted\"\nline");
    }

    #[test]
    fn the_environment_kind_and_priority() {
        let tok = "ab".repeat(32);
        let r = reg(
            serde_json::json!({"service":"apns","token":tok,"environment":"development","tag":"t"}),
        );
        let (env, n) = notification(&r, Notify::Silent, "com.example").unwrap();
        assert_eq!(env, Environment::Sandbox);
        assert_eq!((n.kind, n.priority), (Kind::Background, Priority::Normal));
        assert_eq!(n.topic.as_deref(), Some("com.example"));
        let r = reg(serde_json::json!({"service":"apns","token":tok,"tag":"t"}));
        let (env, n) = notification(&r, Notify::Alert, "com.example").unwrap();
        assert_eq!(env, Environment::Production);
        assert_eq!((n.kind, n.priority), (Kind::Alert, Priority::High));
    }

    #[test]
    fn registration_rules() {
        let tok = "ab".repeat(32);
        assert!(check(&reg(
            serde_json::json!({"service":"apns","token":tok,"environment":"production","tag":"t"})
        ))
        .is_ok());
        assert!(check(&reg(
            serde_json::json!({"service":"apns","token":"ab".repeat(100),"tag":"t"})
        ))
        .is_ok());
        for bad in [
            serde_json::json!({"service":"apns","token":"AB".repeat(32),"tag":"t"}),
            serde_json::json!({"service":"apns","token":"ab".repeat(31),"tag":"t"}),
            serde_json::json!({"service":"apns","token":"ab".repeat(101),"tag":"t"}),
            serde_json::json!({"service":"apns","token":format!("{tok}a"),"tag":"t"}),
            serde_json::json!({"service":"apns","tag":"t"}),
            serde_json::json!({"service":"apns","token":tok,"environment":"sandbox","tag":"t"}),
            serde_json::json!({"service":"apns","token":tok,"tag":"t","extra":"x"}),
        ] {
            assert!(check(&reg(bad.clone())).is_err(), "{bad}");
        }
    }
}
