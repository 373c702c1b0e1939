//! The relay's one job, end to end: admit an envelope, forward it, settle the outcome.
//!
//! [`Relay::handle`] runs the policy through the store, sends an admitted forward to APNs
//! (trying the other environment once in auto mode when the token belongs there), rolls
//! the forward record back if APNs refuses it, and returns an [`Outcome`]. Each outcome
//! knows its HTTP status, body and metric label in one place.

use std::time::Instant;

use axum::http::StatusCode;
use serde_json::{json, Value};
use tracing::Instrument;

use crate::apns::client::ApnsClient;
use crate::apns::{Notification, Verdict};
use crate::clock::Clock;
use crate::config::{Config, Delivery, EnvironmentMode};
use crate::envelope::Envelope;
use crate::policy::{Decision, Environment};
use crate::store::{Admission, Store};

/// How the relay answered one envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// APNs accepted it (or dry run).
    Forwarded,
    /// Duplicate within the dedup window.
    Coalesced,
    /// Held by flap suppression.
    Suppressed,
    /// The device's bucket is empty.
    RateLimited {
        /// Seconds until a token is back.
        retry_after_s: u64,
    },
    /// APNs rejected the device token.
    TokenRejected {
        /// Apple's reason.
        reason: String,
    },
    /// APNs throttled the device (429).
    ApnsThrottled {
        /// Apple's reason.
        reason: String,
    },
    /// APNs rejected the relay's credentials.
    CredentialsRejected {
        /// Apple's reason.
        reason: String,
    },
    /// No answer from APNs.
    ApnsUnreachable,
    /// Any other APNs error.
    ApnsError {
        /// APNs's HTTP status.
        status: u16,
        /// Apple's reason.
        reason: String,
    },
    /// No APNs credentials and not a dry run.
    NotConfigured,
    /// The policy store could not answer.
    StoreUnavailable,
}

impl Outcome {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Forwarded | Outcome::Coalesced | Outcome::Suppressed => StatusCode::ACCEPTED,
            Outcome::RateLimited { .. } | Outcome::ApnsThrottled { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Outcome::TokenRejected { .. } => StatusCode::GONE,
            Outcome::CredentialsRejected { .. }
            | Outcome::ApnsUnreachable
            | Outcome::ApnsError { .. }
            | Outcome::NotConfigured => StatusCode::BAD_GATEWAY,
            Outcome::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The JSON body of the answer, in the reference relay's shape.
    pub fn body(&self) -> Value {
        match self {
            Outcome::Forwarded => json!({"v": 1, "outcome": "forwarded"}),
            Outcome::Coalesced => json!({"v": 1, "outcome": "coalesced"}),
            Outcome::Suppressed => json!({"v": 1, "outcome": "suppressed"}),
            Outcome::RateLimited { .. } => json!({"v": 1, "error": "device is rate limited"}),
            Outcome::TokenRejected { reason } => {
                json!({"v": 1, "error": "device token rejected by APNs", "reason": reason})
            }
            Outcome::ApnsThrottled { reason } => {
                json!({"v": 1, "error": "APNs rate limited this device", "reason": reason})
            }
            Outcome::CredentialsRejected { reason } => {
                json!({"v": 1, "error": "relay APNs credentials rejected", "reason": reason})
            }
            Outcome::ApnsUnreachable => json!({"v": 1, "error": "APNs unreachable"}),
            Outcome::ApnsError { status, reason } => {
                json!({"v": 1, "error": "APNs error", "apnsStatus": status, "reason": reason})
            }
            Outcome::NotConfigured => {
                json!({"v": 1, "error": "relay is not configured for APNs delivery"})
            }
            Outcome::StoreUnavailable => json!({"v": 1, "error": "relay state unavailable"}),
        }
    }

    /// `Retry-After` seconds, when the answer carries one.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Outcome::RateLimited { retry_after_s } => Some(*retry_after_s),
            Outcome::StoreUnavailable => Some(1),
            _ => None,
        }
    }

    /// The bounded metric label and log name.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Coalesced => "coalesced",
            Outcome::Suppressed => "suppressed",
            Outcome::RateLimited { .. } => "rate_limited",
            Outcome::TokenRejected { .. } => "token_rejected",
            Outcome::ApnsThrottled { .. } => "apns_throttled",
            Outcome::CredentialsRejected { .. } => "credentials_rejected",
            Outcome::ApnsUnreachable => "apns_unreachable",
            Outcome::ApnsError { .. } => "apns_error",
            Outcome::NotConfigured => "not_configured",
            Outcome::StoreUnavailable => "store_unavailable",
        }
    }

    fn from_verdict(v: Verdict) -> Self {
        match v {
            Verdict::Delivered => Outcome::Forwarded,
            Verdict::TokenRejected { reason } => Outcome::TokenRejected { reason },
            Verdict::CredentialsRejected { reason } => Outcome::CredentialsRejected { reason },
            Verdict::Throttled { reason } => Outcome::ApnsThrottled { reason },
            Verdict::Unreachable => Outcome::ApnsUnreachable,
            Verdict::ServerError { status, reason } | Verdict::Refused { status, reason } => {
                Outcome::ApnsError { status, reason }
            }
        }
    }
}

/// Where forwards go.
#[derive(Debug)]
pub enum Sender {
    /// Real (or mock) APNs.
    Apns(Box<ApnsClient>),
    /// Logged, answered forwarded.
    DryRun,
    /// Answered 502 not configured.
    Unconfigured,
}

/// The relay: configuration, store, sender and clock.
#[derive(Debug)]
pub struct Relay {
    cfg: Config,
    store: Store,
    sender: Sender,
    clock: Clock,
}

impl Relay {
    /// Builds the relay from a validated configuration.
    pub fn new(cfg: Config, store: Store, clock: Clock) -> anyhow::Result<Self> {
        let sender = match &cfg.delivery {
            Delivery::Apns(creds) => Sender::Apns(Box::new(ApnsClient::new(&cfg, creds)?)),
            Delivery::DryRun => Sender::DryRun,
            Delivery::Unconfigured => Sender::Unconfigured,
        };
        Ok(Self {
            cfg,
            store,
            sender,
            clock,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Admits, forwards and settles one envelope.
    pub async fn handle(&self, envelope: &Envelope) -> Outcome {
        let now_ms = self.clock.now_ms();
        let collapse = envelope.collapse_id.as_str();
        let flap_key = envelope.flap_key();
        let admission_span = tracing::info_span!(
            "admission",
            store = self.store.kind(),
            decision = tracing::field::Empty
        );
        let admitted = self
            .store
            .admit(&envelope.device, collapse, flap_key, now_ms)
            .instrument(admission_span.clone())
            .await;
        if let Ok(a) = &admitted {
            admission_span.record("decision", a.decision.label());
        }
        let admission = match admitted {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "policy store failed");
                return Outcome::StoreUnavailable;
            }
        };
        let Admission { decision, env } = admission;
        let ticket = match decision {
            Decision::Coalesced => return Outcome::Coalesced,
            Decision::Suppressed => return Outcome::Suppressed,
            Decision::RateLimited { retry_after_s } => {
                return Outcome::RateLimited { retry_after_s }
            }
            Decision::Forward(ticket) => ticket,
        };

        let outcome = self.forward(envelope, now_ms, env).await;
        if outcome != Outcome::Forwarded {
            if let Err(e) = self
                .store
                .rollback(
                    &envelope.device,
                    collapse,
                    flap_key,
                    &ticket,
                    self.clock.now_ms(),
                )
                .await
            {
                tracing::error!(error = %e, "rolling back a refused forward failed");
            }
        }
        outcome
    }

    async fn forward(
        &self,
        envelope: &Envelope,
        now_ms: i64,
        remembered: Option<Environment>,
    ) -> Outcome {
        let client = match &self.sender {
            Sender::Apns(c) => c,
            Sender::DryRun => {
                let size = crate::apns::payload::build(
                    envelope,
                    &self.cfg.alert_title,
                    &self.cfg.alert_body,
                )
                .len();
                tracing::info!(
                    device = %envelope.device.hash8(),
                    collapse = envelope.collapse_id.prefix8(),
                    payload_bytes = size,
                    "dry run: would forward to APNs"
                );
                return Outcome::Forwarded;
            }
            Sender::Unconfigured => return Outcome::NotConfigured,
        };
        let n = Notification::new(
            envelope,
            (now_ms / 1000) as u64,
            &self.cfg.alert_title,
            &self.cfg.alert_body,
        );
        let first = match self.cfg.environment {
            EnvironmentMode::Production => Environment::Production,
            EnvironmentMode::Sandbox => Environment::Sandbox,
            EnvironmentMode::Auto => remembered.unwrap_or(Environment::Production),
        };
        let reply = client.send(first, &n).await;
        if self.cfg.environment != EnvironmentMode::Auto || !reply.verdict.wrong_environment() {
            return Outcome::from_verdict(reply.verdict);
        }
        let second = first.other();
        let reply = client.send(second, &n).await;
        if reply.verdict == Verdict::Delivered && remembered != Some(second) {
            if let Err(e) = self
                .store
                .remember_env(&envelope.device, second, self.clock.now_ms())
                .await
            {
                tracing::warn!(error = %e, "could not remember the device's APNs environment");
            }
        }
        Outcome::from_verdict(reply.verdict)
    }

    /// Time since `started`, for the request log.
    pub fn elapsed_ms(started: Instant) -> f64 {
        started.elapsed().as_secs_f64() * 1000.0
    }
}
