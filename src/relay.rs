//! The relay's one job, end to end: admit an envelope, forward it, settle the outcome.
//!
//! [`Relay::handle`] runs the policy through the store, sends an admitted forward to APNs
//! (trying the other environment once in auto mode when the token belongs there), rolls
//! the forward record back if APNs refuses it, and returns an [`Outcome`]. Each outcome
//! knows its HTTP status, body and metric label in one place.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{json, Value};
use tracing::Instrument;

use crate::apns::client::ApnsClient;
use crate::apns::{Notification, Verdict};
use crate::clock::Clock;
use crate::config::{Config, Delivery, EnvironmentMode};
use crate::envelope::{DeviceToken, Envelope};
use crate::policy::{DeadReason, Decision, Environment, Ticket};
use crate::queue::{backoff_ms, random_u32, Pending};
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
    /// APNs failed transiently; the notification waits in the retry queue.
    Queued,
    /// Too many requests in flight (`RELAY_MAX_INFLIGHT`).
    Overloaded,
    /// The sending client's address is over its bucket.
    ClientRateLimited {
        /// Seconds until a token is back.
        retry_after_s: u64,
    },
}

impl Outcome {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Forwarded | Outcome::Coalesced | Outcome::Suppressed | Outcome::Queued => {
                StatusCode::ACCEPTED
            }
            Outcome::RateLimited { .. }
            | Outcome::ApnsThrottled { .. }
            | Outcome::ClientRateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Outcome::TokenRejected { .. } => StatusCode::GONE,
            Outcome::CredentialsRejected { .. }
            | Outcome::ApnsUnreachable
            | Outcome::ApnsError { .. }
            | Outcome::NotConfigured => StatusCode::BAD_GATEWAY,
            Outcome::StoreUnavailable | Outcome::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
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
            Outcome::Queued => json!({"v": 1, "outcome": "queued"}),
            Outcome::Overloaded => json!({"v": 1, "error": "relay overloaded"}),
            Outcome::ClientRateLimited { .. } => json!({"v": 1, "error": "client is rate limited"}),
        }
    }

    /// `Retry-After` seconds, when the answer carries one.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Outcome::RateLimited { retry_after_s }
            | Outcome::ClientRateLimited { retry_after_s } => Some(*retry_after_s),
            Outcome::StoreUnavailable | Outcome::Overloaded => Some(1),
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
            Outcome::Queued => "queued",
            Outcome::Overloaded => "overloaded",
            Outcome::ClientRateLimited { .. } => "client_rate_limited",
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

/// How often an idle retry worker looks for due items.
const RETRY_POLL: Duration = Duration::from_millis(100);
/// Items claimed per poll.
const RETRY_BATCH: usize = 32;
/// Retry attempts in flight per replica.
const RETRY_CONCURRENCY: usize = 256;
/// How often the queue depth gauge is refreshed.
const RETRY_DEPTH_EVERY: Duration = Duration::from_secs(2);

/// One delivery's result.
struct Attempt {
    verdict: Verdict,
    /// `BadDeviceToken` on every environment tried: the token is dead, not misplaced.
    bad_everywhere: bool,
}

fn is_bad_token(v: &Verdict) -> bool {
    matches!(v, Verdict::TokenRejected { reason } if reason == "BadDeviceToken")
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
    inflight: tokio::sync::Semaphore,
    clients: Option<crate::clients::ClientLimiter>,
}

impl Relay {
    /// Builds the relay from a validated configuration.
    pub fn new(cfg: Config, store: Store, clock: Clock) -> anyhow::Result<Self> {
        let sender = match &cfg.delivery {
            Delivery::Apns(creds) => Sender::Apns(Box::new(ApnsClient::new(&cfg, creds)?)),
            Delivery::DryRun => Sender::DryRun,
            Delivery::Unconfigured => Sender::Unconfigured,
        };
        let inflight = tokio::sync::Semaphore::new(cfg.max_inflight);
        let clients = (cfg.ip_rate.0 > 0)
            .then(|| crate::clients::ClientLimiter::new(cfg.ip_rate.0, cfg.ip_rate.1));
        Ok(Self {
            cfg,
            store,
            sender,
            clock,
            inflight,
            clients,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A slot among `RELAY_MAX_INFLIGHT` requests in process, or `None` when all are taken
    /// (the request is shed with 503).
    pub fn admit_request(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.inflight.try_acquire().ok()
    }

    /// Takes a token from the bucket of the client that sent a request (this replica's,
    /// and the shared one in Redis once the client is busy): `Err(retry_after_s)` when
    /// empty.
    pub async fn check_client(
        &self,
        peer: std::net::IpAddr,
        forwarded_for: Option<&str>,
    ) -> Result<(), u64> {
        let Some(limiter) = &self.clients else {
            return Ok(());
        };
        let client = crate::clients::client_of(peer, forwarded_for, &self.cfg.trusted_proxies);
        let now = self.clock.now_ms();
        if limiter.check(client, now)? {
            let (capacity, emission_us) = limiter.params();
            let block = crate::clients::group(client).to_string();
            if let Some(wait) = self
                .store
                .client_take(&block, now, capacity, emission_us)
                .await
            {
                return Err(wait);
            }
        }
        Ok(())
    }

    /// Forgets idle state held in process (called periodically).
    pub fn sweep(&self) {
        let now = self.clock.now_ms();
        self.store.in_process().sweep(now);
        if let Some(l) = &self.clients {
            l.sweep(now);
        }
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
            Decision::Dead(reason) => {
                return Outcome::TokenRejected {
                    reason: reason.as_str().to_owned(),
                }
            }
            Decision::Forward(ticket) => ticket,
        };

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
            Sender::Unconfigured => {
                self.rollback(&envelope.device, collapse, flap_key, &ticket)
                    .await;
                return Outcome::NotConfigured;
            }
        };
        let n = Notification::new(
            envelope,
            (now_ms / 1000) as u64,
            &self.cfg.alert_title,
            &self.cfg.alert_body,
        );
        let first = self.first_env(env);
        let attempt = self.deliver(client, &n, first, env).await;
        if attempt.verdict == Verdict::Delivered {
            return Outcome::Forwarded;
        }
        if attempt.verdict.transient() {
            // Delivery past a 2xx is the relay's job: retry from the queue inside the
            // staleness window; duplicates keep coalescing meanwhile.
            let (at, kind, prev) = Pending::ticket_fields(&ticket);
            let item = Pending {
                id: n.apns_id.clone(),
                device: envelope.device.expose().to_owned(),
                collapse_id: collapse.to_owned(),
                flap_key: flap_key.to_owned(),
                priority: n.priority_header(),
                expiration_s: n.expiration_s,
                body: String::from_utf8_lossy(&n.body).into_owned(),
                env: first.code().to_owned(),
                attempts: 1,
                ticket_at_ms: at,
                ticket_kind: kind,
                ticket_prev_ms: prev,
            };
            let now = self.clock.now_ms();
            let queued = async {
                self.store
                    .hold(&envelope.device, collapse, item.expires_ms(), now)
                    .await?;
                self.store
                    .enqueue(&item, now + backoff_ms(1, random_u32()))
                    .await
            }
            .await;
            match queued {
                Ok(()) => {
                    tracing::info!(
                        device = %envelope.device.hash8(),
                        collapse = envelope.collapse_id.prefix8(),
                        reason = attempt.verdict.reason_label(),
                        "APNs failed transiently; queued for retry"
                    );
                    return Outcome::Queued;
                }
                Err(e) => tracing::error!(error = %e, "could not queue a notification for retry"),
            }
        }
        self.settle_refusal(&envelope.device, collapse, flap_key, &ticket, &attempt)
            .await;
        Outcome::from_verdict(attempt.verdict)
    }

    fn first_env(&self, remembered: Option<Environment>) -> Environment {
        match self.cfg.environment {
            EnvironmentMode::Production => Environment::Production,
            EnvironmentMode::Sandbox => Environment::Sandbox,
            EnvironmentMode::Auto => remembered.unwrap_or(Environment::Production),
        }
    }

    /// One delivery: `first`, then in auto mode the other environment once when the token
    /// belongs there; remembers the environment that worked.
    async fn deliver(
        &self,
        client: &ApnsClient,
        n: &Notification,
        first: Environment,
        remembered: Option<Environment>,
    ) -> Attempt {
        let reply = client.send(first, n).await;
        if self.cfg.environment != EnvironmentMode::Auto || !reply.verdict.wrong_environment() {
            let bad_everywhere = is_bad_token(&reply.verdict);
            return Attempt {
                verdict: reply.verdict,
                bad_everywhere,
            };
        }
        let first_bad = is_bad_token(&reply.verdict);
        let second = first.other();
        let reply = client.send(second, n).await;
        if reply.verdict == Verdict::Delivered && remembered != Some(second) {
            if let Err(e) = self
                .store
                .remember_env(&n.device, second, self.clock.now_ms())
                .await
            {
                tracing::warn!(error = %e, "could not remember the device's APNs environment");
            }
        }
        let bad_everywhere = first_bad && is_bad_token(&reply.verdict);
        Attempt {
            verdict: reply.verdict,
            bad_everywhere,
        }
    }

    async fn rollback(
        &self,
        device: &DeviceToken,
        collapse: &str,
        flap_key: &str,
        ticket: &Ticket,
    ) {
        if let Err(e) = self
            .store
            .rollback(device, collapse, flap_key, ticket, self.clock.now_ms())
            .await
        {
            tracing::error!(error = %e, "rolling back a refused forward failed");
        }
    }

    /// APNs refused for good (or the retries ran out): roll the forward back so the alert is
    /// eligible again, and remember a dead token.
    async fn settle_refusal(
        &self,
        device: &DeviceToken,
        collapse: &str,
        flap_key: &str,
        ticket: &Ticket,
        attempt: &Attempt,
    ) {
        self.rollback(device, collapse, flap_key, ticket).await;
        if let Verdict::TokenRejected { reason } = &attempt.verdict {
            let dead = match DeadReason::from_reason(reason) {
                Some(DeadReason::BadDeviceToken) if !attempt.bad_everywhere => None,
                other => other,
            };
            if let Some(reason) = dead {
                if let Err(e) = self
                    .store
                    .bury(
                        device,
                        reason,
                        self.clock.now_ms(),
                        self.cfg.tombstone_ttl_ms,
                    )
                    .await
                {
                    tracing::warn!(error = %e, "could not remember a dead token");
                }
            }
        }
    }

    /// The retry worker: claims due items from the queue and tries each again until APNs
    /// takes it, refuses it for good, or its staleness window closes. Runs until `stop`.
    pub async fn run_retries(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Sender::Apns(_) = &self.sender else {
            return;
        };
        // Until Redis has answered once, a failing poll would only mark the replica degraded
        // before anyone sent it anything.
        while !self.store.ready() {
            tokio::select! {
                _ = tokio::time::sleep(RETRY_POLL) => {}
                _ = stop.changed() => return,
            }
        }
        let mut last_depth = Instant::now() - RETRY_DEPTH_EVERY;
        // Attempts in flight are bounded, and a worker claims only what it can start at once,
        // so a claimed item never waits out its lease in this replica's backlog.
        let slots = Arc::new(tokio::sync::Semaphore::new(RETRY_CONCURRENCY));
        loop {
            let free = slots.available_permits().min(RETRY_BATCH);
            let now = self.clock.now_ms();
            let items = if free == 0 {
                Vec::new()
            } else {
                self.store
                    .claim(now, now + self.cfg.retry_lease_ms, free)
                    .await
            };
            let idle = items.is_empty();
            for item in items {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    break;
                };
                let relay = self.clone();
                tokio::spawn(async move {
                    relay.retry(item).await;
                    drop(permit);
                });
            }
            if last_depth.elapsed() >= RETRY_DEPTH_EVERY {
                last_depth = Instant::now();
                let depth = self.store.queue_depth().await;
                metrics::gauge!(crate::telemetry::RETRY_QUEUE_DEPTH).set(depth as f64);
            }
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_POLL) => {}
                    _ = stop.changed() => return,
                }
            } else if *stop.borrow() {
                return;
            }
        }
    }

    async fn retry(&self, mut item: Pending) {
        let Sender::Apns(client) = &self.sender else {
            return;
        };
        let Some(device) = DeviceToken::parse(&item.device) else {
            let _ = self.store.ack(&item.id).await;
            return;
        };
        let ticket = item.ticket();
        let now = self.clock.now_ms();
        if now >= item.expires_ms() {
            return self.expire(&device, &item, &ticket).await;
        }
        let n = Notification {
            device: device.clone(),
            apns_id: item.id.clone(),
            collapse_id: item.collapse_id.clone(),
            priority: if item.priority == 10 {
                crate::envelope::Priority::TimeSensitive
            } else {
                crate::envelope::Priority::Passive
            },
            expiration_s: item.expiration_s,
            body: bytes::Bytes::from(item.body.clone()),
        };
        let first = Environment::from_code(&item.env).unwrap_or(Environment::Production);
        let attempt = self.deliver(client, &n, first, Some(first)).await;
        item.attempts += 1;
        let now = self.clock.now_ms();
        if attempt.verdict == Verdict::Delivered {
            metrics::counter!(crate::telemetry::RETRY_ATTEMPTS, "result" => "delivered")
                .increment(1);
            tracing::info!(device = %device.hash8(), attempts = item.attempts, "queued notification delivered");
            if let Err(e) = self.store.ack(&item.id).await {
                tracing::warn!(error = %e, "could not remove a delivered item from the retry queue");
            }
            if let Err(e) = self.store.release(&device, &item.collapse_id, now).await {
                tracing::warn!(error = %e, "could not release a delivered alert");
            }
        } else if attempt.verdict.transient() {
            let due = now + backoff_ms(item.attempts, random_u32());
            if due >= item.expires_ms() {
                return self.expire(&device, &item, &ticket).await;
            }
            metrics::counter!(crate::telemetry::RETRY_ATTEMPTS, "result" => "retry").increment(1);
            if let Err(e) = self.store.enqueue(&item, due).await {
                tracing::warn!(error = %e, "could not reschedule a queued item; its lease will bring it back");
            }
        } else {
            metrics::counter!(crate::telemetry::RETRY_ATTEMPTS, "result" => "failed").increment(1);
            tracing::warn!(device = %device.hash8(), reason = attempt.verdict.reason_label(), "queued notification refused by APNs");
            let _ = self.store.ack(&item.id).await;
            self.settle_refusal(
                &device,
                &item.collapse_id,
                &item.flap_key,
                &ticket,
                &attempt,
            )
            .await;
        }
    }

    /// The staleness window closed: never deliver late. Count it, roll the forward back.
    async fn expire(&self, device: &DeviceToken, item: &Pending, ticket: &Ticket) {
        metrics::counter!(crate::telemetry::RETRY_ATTEMPTS, "result" => "expired").increment(1);
        tracing::warn!(device = %device.hash8(), attempts = item.attempts, "queued notification expired undelivered");
        let _ = self.store.ack(&item.id).await;
        self.rollback(device, &item.collapse_id, &item.flap_key, ticket)
            .await;
    }

    /// Time since `started`, for the request log.
    pub fn elapsed_ms(started: Instant) -> f64 {
        started.elapsed().as_secs_f64() * 1000.0
    }
}
