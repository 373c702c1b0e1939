//! The APNs module for mailbox pushes: registrations `{"service":"apns","token":"<hex>",
//! "environment":"production"|"development","tag":..,"alert":..}` and the spec's payloads,
//! through the relay's one APNs client (its connections and provider token).
//!
//! - alert: `apns-push-type: alert`, priority 10, expiring in 7 days,
//!   `{"aps":{"alert":{"body":"<alert>"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"<tag>"}}`;
//! - silent: `apns-push-type: background`, priority 5, expiring in 1 hour,
//!   `{"aps":{"content-available":1},"zerobyte":{"tag":"<tag>"}}`.
//!
//! The topic is the app's (`push=<topic>`); the registration's environment picks
//! production or sandbox. A 410 or `BadDeviceToken` forgets the registration; nothing else
//! does.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{alert_text, Module, Notify, Sent};
use crate::device::{DeviceToken, Environment};
use crate::push::{BoxFuture, Kind, Message, Push, Verdict, VerdictClass};

/// Seconds an alert push may wait in APNs.
const ALERT_LIFETIME_S: u64 = 7 * 24 * 3600;
/// Seconds a silent push may wait in APNs.
const SILENT_LIFETIME_S: u64 = 3600;

/// The module over the relay's APNs client.
pub struct ApnsModule {
    push: Arc<dyn Push>,
}

impl ApnsModule {
    /// Over `push` (the relay's APNs client).
    pub fn new(push: Arc<dyn Push>) -> Self {
        Self { push }
    }
}

/// An APNs device token as registered: lowercase hex of 32 to 100 bytes.
fn is_apns_token(s: &str) -> bool {
    (64..=200).contains(&s.len())
        && s.len().is_multiple_of(2)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The exact APNs body for `notify`.
pub fn payload(notify: Notify, tag: &str, alert: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
    match notify {
        Notify::Alert => format!(
            r#"{{"aps":{{"alert":{{"body":{}}},"mutable-content":1,"sound":"default"}},"zerobyte":{{"tag":{}}}}}"#,
            q(alert),
            q(tag)
        ),
        Notify::Silent => format!(
            r#"{{"aps":{{"content-available":1}},"zerobyte":{{"tag":{}}}}}"#,
            q(tag)
        ),
    }
}

impl Module for ApnsModule {
    fn service(&self) -> &'static str {
        "apns"
    }

    fn check(&self, reg: &Map<String, Value>) -> Result<(), &'static str> {
        for k in reg.keys() {
            if !matches!(
                k.as_str(),
                "service" | "token" | "environment" | "tag" | "alert"
            ) {
                return Err(
                    "APNs registrations take service, token, environment, tag and alert only",
                );
            }
        }
        match reg.get("token") {
            Some(Value::String(t)) if is_apns_token(t) => {}
            _ => {
                return Err("token must be the APNs device token: lowercase hex of 32 to 100 bytes")
            }
        }
        match reg.get("environment") {
            None => Ok(()),
            Some(Value::String(e)) if e == "production" || e == "development" => Ok(()),
            _ => Err("environment must be production or development"),
        }
    }

    fn send<'a>(
        &'a self,
        reg: &'a Map<String, Value>,
        notify: Notify,
        topic: &'a str,
    ) -> BoxFuture<'a, Sent> {
        Box::pin(async move {
            let Some(device) = reg
                .get("token")
                .and_then(Value::as_str)
                .and_then(DeviceToken::parse)
            else {
                return Sent {
                    outcome: "rejected",
                    forget: false,
                };
            };
            let env = match reg.get("environment").and_then(Value::as_str) {
                Some("development") => Environment::Sandbox,
                _ => Environment::Production,
            };
            let tag = reg.get("tag").and_then(Value::as_str).unwrap_or_default();
            let now_s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let (kind, priority, lifetime) = match notify {
                Notify::Alert => (Kind::Alert, 10, ALERT_LIFETIME_S),
                Notify::Silent => (Kind::Background, 5, SILENT_LIFETIME_S),
            };
            let message = Message {
                device,
                id: crate::device::uuid4(),
                topic: Some(topic.to_owned()),
                kind,
                priority,
                collapse_id: None,
                expiration_s: now_s + lifetime,
                body: bytes::Bytes::from(payload(notify, tag, alert_text(reg))),
            };
            let reply = self
                .push
                .send(env, &message, self.push.request_timeout())
                .await;
            let dead = reply.status == 410
                || matches!(&reply.verdict, Verdict::TokenRejected { reason } if reason == "BadDeviceToken");
            let outcome = match reply.verdict.class() {
                VerdictClass::Delivered => "delivered",
                VerdictClass::TokenDead => "token_dead",
                VerdictClass::Retryable => "retryable",
                VerdictClass::Misconfigured => "misconfigured",
                VerdictClass::Rejected => "rejected",
            };
            Sent {
                outcome,
                forget: dead,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specs_payloads() {
        assert_eq!(
            payload(Notify::Alert, "Zq3k8r2mT1u0wQ", "New message"),
            r#"{"aps":{"alert":{"body":"New message"},"mutable-content":1,"sound":"default"},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
        );
        assert_eq!(
            payload(Notify::Silent, "Zq3k8r2mT1u0wQ", "ignored"),
            r#"{"aps":{"content-available":1},"zerobyte":{"tag":"Zq3k8r2mT1u0wQ"}}"#
        );
        let v: Value =
            serde_json::from_str(&payload(Notify::Alert, "t", "a \"quoted\"\nline")).unwrap();
        assert_eq!(v["aps"]["alert"]["body"], "a \"quoted\"\nline");
    }

    /// Checking needs no service: a push that is never called.
    #[derive(Debug)]
    struct Unused;

    impl Push for Unused {
        fn send<'a>(
            &'a self,
            _: Environment,
            _: &'a Message,
            _: std::time::Duration,
        ) -> BoxFuture<'a, crate::push::Reply> {
            unreachable!("checking a registration sends nothing")
        }

        fn request_timeout(&self) -> std::time::Duration {
            std::time::Duration::from_secs(1)
        }
    }

    #[test]
    fn registration_rules() {
        let m = ApnsModule::new(Arc::new(Unused));
        let reg = |v: Value| -> Map<String, Value> { serde_json::from_value(v).unwrap() };
        let tok = "ab".repeat(32);
        assert!(m.check(&reg(serde_json::json!({"service":"apns","token":tok,"environment":"production","tag":"t"}))).is_ok());
        assert!(m
            .check(&reg(
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
            assert!(m.check(&reg(bad.clone())).is_err(), "{bad}");
        }
    }
}
