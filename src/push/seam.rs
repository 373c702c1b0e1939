//! The push seam: what the core hands a push service ([`Notification`]), the service
//! trait ([`Push`]) and what a service says back ([`Verdict`]), all in no service's terms.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

use crate::device::Environment;
use crate::policy::DeadReason;
use crate::secret::Secret;

/// A boxed future, for the object-safe [`Push`] trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The push services the relay has a module for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Apple Push Notification service.
    Apns,
    /// Firebase Cloud Messaging.
    Fcm,
}

impl Service {
    /// Every service with a module.
    pub const ALL: [Service; 2] = [Service::Apns, Service::Fcm];

    /// The service's name, as registrations and labels spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Apns => "apns",
            Service::Fcm => "fcm",
        }
    }

    /// The service named `s`, if the relay has a module for it.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// What the core does about an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictClass {
    /// The service accepted the notification.
    Delivered,
    /// A later attempt may succeed (no answer, overload, throttling): queue and retry.
    Retryable,
    /// The device token is dead or belongs elsewhere: the sender should forget it.
    TokenDead,
    /// The service refuses the relay itself (credentials, topic): every request fails until
    /// an operator fixes the configuration. Never retried.
    Misconfigured,
    /// This request cannot succeed as it is (a payload the service refuses). Never retried.
    Rejected,
}

impl VerdictClass {
    /// Every class, to pre-register metric series.
    pub const ALL: [VerdictClass; 5] = [
        VerdictClass::Delivered,
        VerdictClass::TokenDead,
        VerdictClass::Rejected,
        VerdictClass::Misconfigured,
        VerdictClass::Retryable,
    ];

    /// The class's label, the one spelling every counter and log line uses.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictClass::Delivered => "delivered",
            VerdictClass::TokenDead => "token_dead",
            VerdictClass::Retryable => "retryable",
            VerdictClass::Misconfigured => "misconfigured",
            VerdictClass::Rejected => "rejected",
        }
    }
}

/// Why a service answered as it did, in no service's terms: the bounded name the service's
/// module gives it and what it tells the core. Each module builds it from the typed reason
/// enum of its own service; the core never reads a service's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reason {
    label: &'static str,
    named: bool,
    buries: Option<DeadReason>,
    other_environment: bool,
    bad_token: bool,
    forgets: bool,
}

impl Reason {
    /// The service gave no reason (a 200, or an error without a body).
    pub const NONE: Reason = Reason::unnamed("none");

    /// No answer: the connection failed or the budget ran out.
    pub const UNREACHABLE: Reason = Reason::unnamed("unreachable");

    const fn unnamed(label: &'static str) -> Reason {
        Reason {
            label,
            named: false,
            buries: None,
            other_environment: false,
            bad_token: false,
            forgets: false,
        }
    }

    /// A reason the service named; `label` is the module's bounded spelling of it (the
    /// service's documented name, or `other`), quoted in answers and used as a label.
    pub const fn named(label: &'static str) -> Reason {
        Reason {
            named: true,
            ..Reason::unnamed(label)
        }
    }

    /// The same reason, saying the token will never work again and earns `dead`.
    pub const fn burying(self, dead: DeadReason) -> Reason {
        Reason {
            buries: Some(dead),
            ..self
        }
    }

    /// The same reason, saying the token may belong to the service's other environment;
    /// `malformed` when it is not even a token of the environment that answered.
    pub const fn other_environment(self, malformed: bool) -> Reason {
        Reason {
            other_environment: true,
            bad_token: malformed,
            ..self
        }
    }

    /// The same reason, saying the device's registration must be forgotten.
    pub const fn forgetting(self) -> Reason {
        Reason {
            forgets: true,
            ..self
        }
    }

    /// A bounded label for metrics and receipts: the module's name for the reason (`other`
    /// for one the service does not document), `none`, or `unreachable`.
    pub fn label(self) -> &'static str {
        self.label
    }

    /// The tombstone a token refused for this reason earns: `Some` only for the reasons
    /// that say the token will never work again.
    pub fn buries(self) -> Option<DeadReason> {
        self.buries
    }

    /// The reason as answers quote it: the service's name for it, `""` when it gave none.
    pub fn text(self) -> &'static str {
        if self.named {
            self.label
        } else {
            ""
        }
    }
}

/// What a service said about one notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// What the core does about it.
    pub class: VerdictClass,
    /// HTTP status of the answer, 0 when there was none.
    pub status: u16,
    /// The service's reason.
    pub reason: Reason,
}

impl Verdict {
    /// The service accepted the notification (HTTP 200, no reason).
    pub const DELIVERED: Verdict = Verdict {
        class: VerdictClass::Delivered,
        status: 200,
        reason: Reason::NONE,
    };

    /// No answer (connection failure, timeout): transient.
    pub const UNREACHABLE: Verdict = Verdict {
        class: VerdictClass::Retryable,
        status: 0,
        reason: Reason::UNREACHABLE,
    };

    /// The class the core acts on.
    pub fn class(&self) -> VerdictClass {
        self.class
    }

    /// Whether the service accepted the notification.
    pub fn delivered(&self) -> bool {
        self.class == VerdictClass::Delivered
    }

    /// Whether a later attempt may succeed: such a notification is queued for retry.
    pub fn transient(&self) -> bool {
        self.class == VerdictClass::Retryable
    }

    /// Whether trying the service's other environment could help (APNs's auto mode).
    pub fn wrong_environment(&self) -> bool {
        self.reason.other_environment
    }

    /// Whether the token is malformed for the environment that answered (it may still
    /// be good in the other one).
    pub fn bad_token(&self) -> bool {
        self.reason.bad_token
    }

    /// Whether the device's registration must be forgotten: the service says the token
    /// is dead for good.
    pub fn forgets_registration(&self) -> bool {
        self.reason.forgets
    }

    /// A bounded label for metrics: the service's reason when it documents it.
    pub fn reason_label(&self) -> &'static str {
        self.reason.label()
    }
}

/// The kind of a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A visible alert.
    Alert,
    /// A background wake-up (APNs content-available).
    Background,
    /// Data the app handles itself, shown or not as it decides (FCM data-only).
    Data,
}

/// How urgently the service should deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// At once, waking the device (APNs 10, FCM `high`).
    High,
    /// When convenient for the device's power (APNs 5, FCM `normal`).
    Normal,
}

/// What a notification carries, as fields the service's module renders in its shape.
#[derive(Debug, Clone)]
pub enum Payload {
    /// A still-sealed alert (relay protocol v1 and signed pushes): the stub texts shown
    /// only if the app's extension never runs, and the sealed ciphertext.
    Sealed {
        /// The stub alert's title.
        title: String,
        /// The stub alert's body.
        body: String,
        /// The envelope's suite.
        suite: String,
        /// The sealed ciphertext.
        ciphertext: String,
    },
    /// A mailbox wake-up: the registration's tag and, for an alert, the text to show.
    Wake {
        /// The registration's tag.
        tag: String,
        /// The alert text; `None` for a silent push.
        alert: Option<String>,
    },
    /// A body the module rendered earlier, verbatim (a queued notification's).
    Rendered(Bytes),
}

/// One notification to one device, in no service's shape.
#[derive(Clone)]
pub struct Notification {
    /// Who: the device's address at the service (an APNs device token, an FCM
    /// registration token).
    pub to: Secret,
    /// The same for every attempt of this notification (APNs's `apns-id`).
    pub id: String,
    /// The app's topic at the service; `None` uses the module's configured one.
    pub topic: Option<String>,
    /// What kind of notification.
    pub kind: Kind,
    /// How urgent.
    pub priority: Priority,
    /// When the service may drop it undelivered, Unix seconds.
    pub expiration_s: u64,
    /// Notifications with the same key replace each other on the device.
    pub collapse_key: Option<String>,
    /// What it carries.
    pub payload: Payload,
}

impl std::fmt::Debug for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The address and the payload never print.
        f.debug_struct("Notification")
            .field("id", &self.id)
            .field("topic", &self.topic)
            .field("kind", &self.kind)
            .field("priority", &self.priority)
            .field("expiration_s", &self.expiration_s)
            .finish_non_exhaustive()
    }
}

/// Which of a service's environments a delivery tries (`APNS_ENVIRONMENT`; a service with
/// one endpoint has one environment, and every mode reaches it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvironmentMode {
    /// Always production.
    Production,
    /// Always sandbox.
    Sandbox,
    /// The environment the device last worked on (production at first), then the other
    /// once when the service says the token belongs there ([`Verdict::wrong_environment`]).
    Auto,
}

/// A push service the core sends through. Object-safe so tests can stand in a fake and the
/// core holds `Arc<dyn Push>`.
pub trait Push: Send + Sync + std::fmt::Debug {
    /// Which service this is.
    fn service(&self) -> Service;

    /// The body the service would be sent for `n`, in the service's shape.
    fn render(&self, n: &Notification) -> Bytes;

    /// Sends one notification to one environment of the service (services with one
    /// endpoint ignore it), within `budget` (connection set-up included). A service whose
    /// credentials expire mid-flight refreshes them and retries once, within the same
    /// budget.
    fn send<'a>(
        &'a self,
        env: Environment,
        n: &'a Notification,
        budget: Duration,
    ) -> BoxFuture<'a, Verdict>;

    /// The longest one request may take.
    fn request_timeout(&self) -> Duration;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_labels_are_distinct() {
        let labels: std::collections::HashSet<_> =
            VerdictClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(labels.len(), VerdictClass::ALL.len());
    }

    #[test]
    fn a_reason_the_service_did_not_name_is_never_quoted() {
        assert_eq!(Reason::NONE.text(), "");
        assert_eq!(Reason::UNREACHABLE.text(), "");
        assert_eq!(Reason::UNREACHABLE.label(), "unreachable");
        assert_eq!(Reason::named("BadTopic").text(), "BadTopic");
        assert_eq!(Verdict::DELIVERED.reason.buries(), None);
        assert!(!Verdict::UNREACHABLE.forgets_registration());
    }
}
