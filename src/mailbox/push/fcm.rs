//! The FCM module for mailbox pushes: registrations `{"service":"fcm","token":"<FCM
//! registration token>","tag":..,"alert":..}` and the spec's data-only messages through
//! [`crate::push::fcm::FcmClient`] (HTTP v1 with the service account's OAuth2 token).
//! `UNREGISTERED` forgets the registration; nothing else does (an `INVALID_ARGUMENT` is a
//! payload error).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{alert_text, Module, Notify, Sent};
use crate::push::fcm::{self, FcmClient};
use crate::push::{BoxFuture, VerdictClass};

/// The module over the relay's FCM client.
pub struct FcmModule {
    client: Arc<FcmClient>,
}

impl FcmModule {
    /// Over `client`.
    pub fn new(client: Arc<FcmClient>) -> Self {
        Self { client }
    }
}

impl Module for FcmModule {
    fn service(&self) -> &'static str {
        "fcm"
    }

    fn check(&self, reg: &Map<String, Value>) -> Result<(), &'static str> {
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

    fn send<'a>(
        &'a self,
        reg: &'a Map<String, Value>,
        notify: Notify,
        _topic: &'a str,
    ) -> BoxFuture<'a, Sent> {
        Box::pin(async move {
            let token = reg.get("token").and_then(Value::as_str).unwrap_or_default();
            let tag = reg.get("tag").and_then(Value::as_str).unwrap_or_default();
            let n = match notify {
                Notify::Alert => fcm::Notify::Alert(alert_text(reg).to_owned()),
                Notify::Silent => fcm::Notify::Silent,
            };
            let outcome = self.client.send(token, tag, n).await;
            let label = match outcome.class() {
                VerdictClass::Delivered => "delivered",
                VerdictClass::TokenDead => "token_dead",
                VerdictClass::Retryable => "retryable",
                VerdictClass::Misconfigured => "misconfigured",
                VerdictClass::Rejected => "rejected",
            };
            Sent {
                outcome: label,
                forget: outcome.deletes_registration(),
            }
        })
    }
}
