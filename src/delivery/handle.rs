//! [`Delivery`]: admit one alert through the store, push it, settle the outcome; and the
//! service-neutral notification an alert becomes ([`notification`], [`notification_id`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::Instrument;

use super::alert::{self, Alert};
use super::outcome::Outcome;
use super::settlement::{Reference, Settlement};

use crate::clock::Clock;
use crate::device::{hex, DeviceToken, Environment};
use crate::policy::{DeadReason, Decision, Ticket, STALENESS_S};
use crate::push::{
    EnvironmentMode, Kind, Notification, Payload, Priority, Push, Verdict, VerdictClass,
};
use crate::secret::Secret;
use crate::store::queue::{backoff_ms, random_u32, Pending};
use crate::store::{Admission, AlertKey, Mark, Store};

/// The delivery core's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which of the service's environments to use.
    pub environment: EnvironmentMode,
    /// How long a dead token is remembered, ms (0: never).
    pub tombstone_ttl_ms: i64,
    /// A claimed retry-queue item is due again after this lease, ms.
    pub retry_lease_ms: i64,
    /// The alert stub's title (shown only if the app's extension never runs).
    pub alert_title: String,
    /// The alert stub's body.
    pub alert_body: String,
}

/// What one delivery is for, beyond the alert itself.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The topic when the sender names its own; `None`: the service's configured one.
    pub topic: Option<String>,
    /// The front-end's reference to what this delivery settles, told with its ending if it
    /// is queued ([`Settlement`]).
    pub settles: Option<Reference>,
    /// The admission must be decided in the shared store, never in this replica's memory
    /// (signed pushes: SIGNED.md answers 503 in the degrade mode rather than send on a
    /// per-replica decision). A store failure is then [`Outcome::StoreUnavailable`].
    pub shared: bool,
    /// The notification was taken over from a replica that stopped after accepting it,
    /// perhaps after admitting and even sending it. A coalesced admission is then most
    /// likely that replica's own forward, which may never have left: it is sent again
    /// (at least once rather than lost), under the same collapse id, so a device
    /// that got both shows one notification.
    pub retake: bool,
}

/// Renders a notification in a service's shape, for a dry run's log line.
pub type Render = fn(&Notification) -> Bytes;

/// Where forwards go.
#[derive(Debug, Clone)]
pub enum Sender {
    /// A push service (or a test's stand-in).
    Push(Arc<dyn Push>),
    /// Logged with the size of the body the service would get (rendered by the service's
    /// renderer), answered forwarded (`RELAY_DRY_RUN=true` without credentials).
    DryRun(Render),
    /// Answered 502 not configured.
    Unconfigured,
}

/// One delivery's result.
#[derive(Debug)]
pub(super) struct Attempt {
    pub(super) verdict: Verdict,
    /// `BadDeviceToken` on every environment tried: the token is dead, not misplaced.
    pub(super) bad_everywhere: bool,
    /// The environment the verdict came from: where the next attempt goes.
    pub(super) env: Environment,
}

/// The delivery core.
#[derive(Debug)]
pub struct Delivery {
    pub(super) settings: Settings,
    pub(super) store: Arc<Store>,
    pub(super) sender: Sender,
    pub(super) clock: Clock,
    pub(super) settlement: Option<Arc<dyn Settlement>>,
    /// Admissions whose reply was lost, to roll back ([`super::lost`]).
    lost: Arc<super::lost::LostAdmissions>,
}

/// A UUID derived from the alert (SHA-256 of device, collapseId and ciphertext), so every
/// attempt of one notification, on any replica, carries the same id (a service that
/// deduplicates, as APNs does with `apns-id`, sees one notification).
pub fn notification_id(alert: &Alert) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(alert.device.expose().as_bytes());
    ctx.update(b"\n");
    ctx.update(alert.collapse_id.as_str().as_bytes());
    ctx.update(b"\n");
    ctx.update(alert.ciphertext.as_bytes());
    let d = ctx.finish();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d.as_ref()[..16]);
    // RFC 9562 version 8 (custom) with the RFC variant bits.
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    let mut id = String::with_capacity(36);
    for (i, part) in [&h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            id.push('-');
        }
        id.push_str(part);
    }
    id
}

/// The push priority of an alert: time-sensitive alerts go at once.
fn priority(p: alert::Priority) -> Priority {
    match p {
        alert::Priority::TimeSensitive => Priority::High,
        alert::Priority::Passive => Priority::Normal,
    }
}

/// The queue's stored priority code of a push priority (10 or 5, as queued items have
/// always stored it).
fn stored_priority(p: Priority) -> u8 {
    match p {
        Priority::High => 10,
        Priority::Normal => 5,
    }
}

/// The push priority of a queued item's stored code.
pub(super) fn from_stored_priority(code: u8) -> Priority {
    if code >= 10 {
        Priority::High
    } else {
        Priority::Normal
    }
}

/// The notification of an alert accepted at `now_ms`, with the stub `title` and `body`.
pub fn notification(alert: &Alert, title: &str, body: &str, now_ms: i64) -> Notification {
    Notification {
        to: Secret::new(alert.device.expose()),
        id: notification_id(alert),
        topic: None,
        kind: Kind::Alert,
        priority: priority(alert.priority),
        collapse_key: Some(alert.collapse_id.as_str().to_owned()),
        expiration_s: (now_ms / 1000).max(0) as u64 + STALENESS_S,
        payload: Payload::Sealed {
            title: title.to_owned(),
            body: body.to_owned(),
            suite: alert.suite.clone(),
            ciphertext: alert.ciphertext.clone(),
        },
    }
}

impl Delivery {
    /// The core over this store and sender.
    pub fn new(settings: Settings, store: Arc<Store>, sender: Sender, clock: Clock) -> Self {
        Self {
            settings,
            store,
            sender,
            clock,
            settlement: None,
            lost: Arc::default(),
        }
    }

    /// Telling `settlement` how queued deliveries end (those whose context names what they
    /// settle).
    pub fn with_settlement(mut self, settlement: Arc<dyn Settlement>) -> Self {
        self.settlement = Some(settlement);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The longest one inline delivery spends with the push service: one request timeout
    /// per environment it may try (zero when nothing is sent).
    pub fn send_bound(&self) -> Duration {
        match &self.sender {
            Sender::Push(p) => p.request_timeout() * 2,
            _ => Duration::ZERO,
        }
    }

    /// Whether forwards are really sent (the retry worker runs only then).
    pub fn sends(&self) -> bool {
        matches!(self.sender, Sender::Push(_))
    }

    /// The notification for an alert accepted at `now_ms`.
    fn message(&self, alert: &Alert, now_ms: i64) -> Notification {
        notification(
            alert,
            &self.settings.alert_title,
            &self.settings.alert_body,
            now_ms,
        )
    }

    /// Admits, forwards and settles one alert (protocol v1).
    pub async fn handle(&self, alert: &Alert) -> Outcome {
        self.handle_with(alert, &Context::default()).await
    }

    /// Admits, forwards and settles one alert, for `ctx`.
    pub async fn handle_with(&self, alert: &Alert, ctx: &Context) -> Outcome {
        let now_ms = self.clock.now_ms();
        let key = alert.key();
        let admission_span = tracing::info_span!(
            "admission",
            store = self.store.kind(),
            decision = tracing::field::Empty
        );
        // An earlier admission of this alert here got no reply: its forward is undone first,
        // so this one is not coalesced away as the duplicate of a page never sent.
        if let Err(e) = self.lost.settle(&self.store, alert).await {
            tracing::error!(error = %e, "policy store failed");
            return Outcome::StoreUnavailable;
        }
        let admitted = self
            .store
            .policy()
            .admit_in(ctx.shared, key, now_ms)
            .instrument(admission_span.clone())
            .await;
        let Admission { decision, env } = match admitted {
            Ok(a) => {
                admission_span.record("decision", a.decision.label());
                a
            }
            Err(e) => {
                tracing::error!(error = %e, "policy store failed");
                self.lost.lost(&self.store, alert, now_ms, &e);
                return Outcome::StoreUnavailable;
            }
        };
        let ticket = match decision {
            Decision::Coalesced if ctx.retake => Ticket {
                at_ms: now_ms,
                kind: crate::policy::TicketKind::Counted { cooled: false },
            },
            Decision::Coalesced => return Outcome::Coalesced,
            Decision::Suppressed => return Outcome::Suppressed,
            Decision::RateLimited { retry_after_s } => {
                return Outcome::RateLimited { retry_after_s }
            }
            Decision::Dead(reason) => return Outcome::Remembered(reason),
            Decision::Forward(ticket) => ticket,
        };

        let push = match &self.sender {
            Sender::Push(p) => p.clone(),
            Sender::DryRun(render) => {
                let size = render(&self.message(alert, now_ms)).len();
                tracing::info!(
                    device = %alert.device.hash8(),
                    collapse = alert.collapse_id.prefix8(),
                    payload_bytes = size,
                    "dry run: would forward"
                );
                return Outcome::DryRun;
            }
            Sender::Unconfigured => {
                self.rollback(key, &ticket).await;
                return Outcome::NotConfigured;
            }
        };
        let mut m = self.message(alert, now_ms);
        m.topic = ctx.topic.clone();
        let first = self.first_env(env);
        // Inline, each environment may take one request timeout.
        let deadline = Instant::now() + push.request_timeout() * 2;
        let attempt = self
            .deliver(&*push, &alert.device, &m, first, env, deadline)
            .await;
        if attempt.verdict.delivered() {
            return Outcome::Forwarded;
        }
        if attempt.verdict.transient() {
            // Delivery past a 2xx is the relay's job: retry from the queue inside the
            // staleness window; duplicates keep coalescing meanwhile.
            match self
                .queue(&*push, &m, alert, key.flap_key, &ticket, attempt.env, ctx)
                .await
            {
                Ok(()) => {
                    tracing::info!(
                        device = %alert.device.hash8(),
                        collapse = alert.collapse_id.prefix8(),
                        reason = attempt.verdict.reason_label(),
                        service = push.service().as_str(),
                        "the push service failed transiently; queued for retry"
                    );
                    return Outcome::Queued;
                }
                Err(e) => tracing::error!(error = %e, "could not queue a notification for retry"),
            }
        }
        self.settle_refusal(key, &ticket, &attempt).await;
        Outcome::of(attempt.verdict)
    }

    #[allow(clippy::too_many_arguments)]
    async fn queue(
        &self,
        push: &dyn Push,
        m: &Notification,
        alert: &Alert,
        flap_key: &str,
        ticket: &Ticket,
        env: Environment,
        ctx: &Context,
    ) -> Result<(), crate::store::StoreError> {
        let item = Pending {
            id: m.id.clone(),
            device: alert.device.expose().to_owned(),
            collapse_id: alert.collapse_id.as_str().to_owned(),
            flap_key: flap_key.to_owned(),
            priority: stored_priority(m.priority),
            expiration_s: m.expiration_s,
            body: String::from_utf8_lossy(&push.render(m)).into_owned(),
            env,
            attempts: 1,
            ticket: *ticket,
            topic: ctx.topic.clone(),
            settles: ctx.settles.clone(),
        };
        let now = self.clock.now_ms();
        self.store
            .policy()
            .mark(
                &alert.device,
                Mark::Hold {
                    collapse_id: &item.collapse_id,
                    until_ms: item.expires_ms(),
                },
                now,
            )
            .await?;
        self.store
            .queue()
            .enqueue(&item, now + backoff_ms(1, random_u32()), now)
            .await
    }

    fn first_env(&self, remembered: Option<Environment>) -> Environment {
        match self.settings.environment {
            EnvironmentMode::Production => Environment::Production,
            EnvironmentMode::Sandbox => Environment::Sandbox,
            EnvironmentMode::Auto => remembered.unwrap_or(Environment::Production),
        }
    }

    /// One delivery before `deadline`: `first`, then in auto mode the other environment once
    /// when the token belongs there; remembers the environment that worked.
    pub(super) async fn deliver(
        &self,
        push: &dyn Push,
        device: &DeviceToken,
        m: &Notification,
        first: Environment,
        remembered: Option<Environment>,
        deadline: Instant,
    ) -> Attempt {
        let budget = |now: Instant| {
            push.request_timeout()
                .min(deadline.saturating_duration_since(now))
        };
        // The deadline holds whatever the service does with its budget.
        let send = |env: Environment, budget: Duration| async move {
            tokio::time::timeout(budget, push.send(env, m, budget))
                .await
                .unwrap_or(Verdict::UNREACHABLE)
        };
        let reply = send(first, budget(Instant::now())).await;
        if self.settings.environment != EnvironmentMode::Auto || !reply.wrong_environment() {
            return Attempt {
                verdict: reply,
                bad_everywhere: reply.bad_token(),
                env: first,
            };
        }
        let first_bad = reply.bad_token();
        let second = first.other();
        let left = budget(Instant::now());
        if left.is_zero() {
            // No time for the other environment: a transient failure, retried there.
            return Attempt {
                verdict: Verdict::UNREACHABLE,
                bad_everywhere: false,
                env: second,
            };
        }
        let reply = send(second, left).await;
        if reply.delivered() && remembered != Some(second) {
            let left = deadline.saturating_duration_since(Instant::now());
            let remembered = tokio::time::timeout(
                left.max(Duration::from_millis(1)),
                self.store
                    .policy()
                    .mark(device, Mark::Env(second), self.clock.now_ms()),
            )
            .await;
            if !matches!(remembered, Ok(Ok(()))) {
                tracing::warn!("could not remember the device's environment");
            }
        }
        let bad_everywhere = first_bad && reply.bad_token();
        Attempt {
            verdict: reply,
            bad_everywhere,
            env: second,
        }
    }

    pub(super) async fn rollback(&self, key: AlertKey<'_>, t: &Ticket) {
        if let Err(e) = self
            .store
            .policy()
            .rollback(key, t, self.clock.now_ms())
            .await
        {
            tracing::error!(error = %e, "rolling back a refused forward failed");
        }
    }

    /// The service refused for good (or the retries ran out): roll the forward back so the
    /// alert is eligible again, and remember a dead token.
    pub(super) async fn settle_refusal(
        &self,
        key: AlertKey<'_>,
        ticket: &Ticket,
        attempt: &Attempt,
    ) {
        self.rollback(key, ticket).await;
        if attempt.verdict.class() != VerdictClass::TokenDead {
            return;
        }
        let dead = match attempt.verdict.reason.buries() {
            Some(DeadReason::Foreign) if !attempt.bad_everywhere => None,
            other => other,
        };
        if let (Some(reason), ttl) = (dead, self.settings.tombstone_ttl_ms) {
            if ttl == 0 {
                return;
            }
            if let Err(e) = self
                .store
                .policy()
                .mark(
                    key.device,
                    Mark::Dead {
                        reason,
                        ttl_ms: ttl,
                    },
                    self.clock.now_ms(),
                )
                .await
            {
                tracing::warn!(error = %e, "could not remember a dead token");
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn the_notification_id_is_a_stable_uuid() {
        let a = Alert {
            device: DeviceToken::parse(&"ab".repeat(32)).unwrap(),
            suite: "x25519".into(),
            ciphertext: "A".repeat(68),
            collapse_id: alert::Id32::parse("93bc5d02dc2a24b5365347573b6f5115").unwrap(),
            flap_id: None,
            priority: alert::Priority::Passive,
            event: true,
        };
        let id = notification_id(&a);
        assert_eq!(id, notification_id(&a));
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "8");
        let parts: Vec<_> = id.split('-').map(str::len).collect();
        assert_eq!(parts, vec![8, 4, 4, 4, 12]);
    }
}
