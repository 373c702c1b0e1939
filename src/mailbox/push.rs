//! Push for mailboxes (the spec's "Push"): the core knows no push service. A registration
//! names its service; when the relay has loaded that service's [`Push`], the service's
//! rules here ([`apns`], [`fcm`]) check its fields and turn a write into a service-neutral
//! [`Notification`] sent through the same seam as every other push. Without a loaded
//! service, a registration is kept under the generic rules and nothing is sent.
//!
//! At rest a registration is sealed with AES-256-GCM under
//! `HKDF-SHA256(ikm = the bearer token, salt = "zerobyte-push-v1", info = "<id>/<dir>")`,
//! a random 96-bit nonce per write ([`seal`], [`open`]): the store keeps only the bearer's
//! hash, so a copy of it holds no device token, and the relay can open a registration only
//! while serving a request that presents the bearer (a write with `X-Relay-Notify`).
//!
//! A push is best effort: it is sent after the envelope is stored, the PUT does not wait,
//! and its outcome is counted. The registration is forgotten only when the service says
//! the token is dead (APNs 410 or `BadDeviceToken`, FCM `UNREGISTERED`), and only if it is
//! still the registration the push used.

pub mod apns;
pub mod fcm;

use std::sync::Arc;

use bytes::Bytes;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Map, Value};

use super::auth::Bearer;
use crate::device::Environment;
use crate::push::{Notification, Push, Service, VerdictClass};
use crate::store::mailbox::Dir;

/// A push's `service` label: a service with a module, `other` for a service without one,
/// `none` when no registration was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceLabel {
    /// A service the relay has a module for.
    Module(Service),
    /// A registered service without a module.
    Other,
    /// No registration was opened.
    None,
}

impl ServiceLabel {
    /// Every label, to pre-register metric series.
    pub const ALL: [ServiceLabel; 4] = [
        ServiceLabel::Module(Service::Apns),
        ServiceLabel::Module(Service::Fcm),
        ServiceLabel::Other,
        ServiceLabel::None,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceLabel::Module(s) => s.as_str(),
            ServiceLabel::Other => "other",
            ServiceLabel::None => "none",
        }
    }
}

/// A push's `outcome` label: the service's verdict, or why nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// Sent: the verdict's class.
    Sent(VerdictClass),
    /// Not sent: the reader is watching the mailbox.
    Foreground,
    /// Not sent: the mailbox's push bucket is empty.
    RateLimited,
    /// Not sent: no registration for the direction.
    NoRegistration,
    /// Not sent: the registration's service has no module.
    NoModule,
    /// Not sent: the registration could not be opened with the writer's bearer.
    Unopenable,
}

impl PushOutcome {
    /// Every label, to pre-register metric series.
    pub const ALL: [PushOutcome; 10] = [
        PushOutcome::Sent(VerdictClass::Delivered),
        PushOutcome::Sent(VerdictClass::TokenDead),
        PushOutcome::Sent(VerdictClass::Rejected),
        PushOutcome::Sent(VerdictClass::Misconfigured),
        PushOutcome::Sent(VerdictClass::Retryable),
        PushOutcome::Foreground,
        PushOutcome::RateLimited,
        PushOutcome::NoRegistration,
        PushOutcome::NoModule,
        PushOutcome::Unopenable,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            PushOutcome::Sent(c) => c.as_str(),
            PushOutcome::Foreground => "foreground",
            PushOutcome::RateLimited => "rate_limited",
            PushOutcome::NoRegistration => "no_registration",
            PushOutcome::NoModule => "no_module",
            PushOutcome::Unopenable => "unopenable",
        }
    }
}

/// What the writer asked for (`X-Relay-Notify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// A visible notification (mutable-content, priority 10).
    Alert,
    /// A background push (content-available, priority 5).
    Silent,
}

impl Notify {
    /// `X-Relay-Notify`'s value: `alert`, `silent`; anything else is `Err` (400).
    pub fn parse(v: &[u8]) -> Result<Self, ()> {
        match v {
            b"alert" => Ok(Notify::Alert),
            b"silent" => Ok(Notify::Silent),
            _ => Err(()),
        }
    }
}

/// What one push came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The verdict's class, as [`PushOutcome::Sent`] labels it.
    pub outcome: &'static str,
    /// The token is dead: forget the registration.
    pub forget: bool,
}

/// The loaded push services, one per [`Service`] at most.
#[derive(Clone, Default)]
pub struct Modules {
    modules: Vec<Arc<dyn Push>>,
}

impl Modules {
    /// With these services.
    pub fn new(modules: Vec<Arc<dyn Push>>) -> Self {
        Self { modules }
    }

    /// The service called `service`, if loaded.
    pub fn get(&self, service: &str) -> Option<Module<'_>> {
        let service = Service::parse(service)?;
        self.modules
            .iter()
            .find(|p| p.service() == service)
            .map(|push| Module { service, push })
    }
}

/// A loaded service, as a registration finds it.
#[derive(Clone, Copy)]
pub struct Module<'a> {
    service: Service,
    push: &'a Arc<dyn Push>,
}

impl Module<'_> {
    /// Checks a registration's fields by the service's rules (all of them: an unknown
    /// field is refused).
    pub fn check(&self, registration: &Map<String, Value>) -> Result<(), &'static str> {
        match self.service {
            Service::Apns => apns::check(registration),
            Service::Fcm => fcm::check(registration),
        }
    }

    /// Sends one push for `registration` (already checked) on the app's `topic`.
    pub async fn send(
        &self,
        registration: &Map<String, Value>,
        notify: Notify,
        topic: &str,
    ) -> Sent {
        let n: Option<(Environment, Notification)> = match self.service {
            Service::Apns => apns::notification(registration, notify, topic),
            Service::Fcm => fcm::notification(registration, notify),
        };
        let Some((env, n)) = n else {
            return Sent {
                outcome: PushOutcome::Sent(VerdictClass::Rejected).as_str(),
                forget: false,
            };
        };
        let verdict = self.push.send(env, &n, self.push.request_timeout()).await;
        Sent {
            outcome: PushOutcome::Sent(verdict.class()).as_str(),
            forget: verdict.forgets_registration(),
        }
    }
}

/// `service`: 1 to 16 of `a-z 0-9 -`, starting with a letter.
fn is_service(s: &str) -> bool {
    (1..=16).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `tag`: 1 to 64 of `A-Z a-z 0-9 _ -`.
pub fn is_tag(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The alert text a push shows: the registration's `alert`, else `New message`.
pub fn alert_text(registration: &Map<String, Value>) -> &str {
    registration
        .get("alert")
        .and_then(Value::as_str)
        .unwrap_or("New message")
}

/// The registration's tag.
fn tag(registration: &Map<String, Value>) -> &str {
    registration
        .get("tag")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The neutral wake-up every service renders in its shape: the tag, and for an alert
/// its text.
fn wake(registration: &Map<String, Value>, notify: Notify) -> crate::push::Payload {
    crate::push::Payload::Wake {
        tag: tag(registration).to_owned(),
        alert: (notify == Notify::Alert).then(|| alert_text(registration).to_owned()),
    }
}

/// A registration's body, checked: the members every service shares (`service`, `tag`,
/// optional `alert`), then the service's module's rules, or without a module at most 8
/// other string members of at most 256 characters. The error says what is wrong (the
/// answer is a plain 400).
pub fn check(body: &[u8], modules: &Modules) -> Result<Map<String, Value>, &'static str> {
    let Ok(Value::Object(reg)) = serde_json::from_slice::<Value>(body) else {
        return Err("the body must be a JSON object");
    };
    match reg.get("service") {
        Some(Value::String(s)) if is_service(s) => {}
        _ => return Err("service must be 1 to 16 of a-z 0-9 -, starting with a letter"),
    }
    match reg.get("tag") {
        Some(Value::String(t)) if is_tag(t) => {}
        _ => return Err("tag must be 1 to 64 of A-Z a-z 0-9 _ -"),
    }
    match reg.get("alert") {
        None => {}
        Some(Value::String(a)) if a.chars().count() <= 160 => {}
        _ => return Err("alert must be a string of at most 160 characters"),
    }
    let service = reg["service"].as_str().unwrap_or_default();
    match modules.get(service) {
        Some(m) => m.check(&reg)?,
        None => {
            let others: Vec<&Value> = reg
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "service" | "tag" | "alert"))
                .map(|(_, v)| v)
                .collect();
            if others.len() > 8 {
                return Err("at most 8 members besides service, tag and alert");
            }
            if !others
                .iter()
                .all(|v| v.as_str().is_some_and(|s| s.chars().count() <= 256))
            {
                return Err("every other member must be a string of at most 256 characters");
            }
        }
    }
    Ok(reg)
}

fn key(bearer: &Bearer, id: &str, dir: Dir) -> LessSafeKey {
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"zerobyte-push-v1");
    let info = format!("{id}/{}", dir.as_str());
    let info = [info.as_bytes()];
    let prk = salt.extract(bearer.token_bytes());
    let okm = prk
        .expand(&info, &AES_256_GCM)
        .expect("32 bytes is a valid HKDF-SHA256 length");
    LessSafeKey::new(UnboundKey::from(okm))
}

/// Seals a checked registration: nonce (12 bytes) then the AES-256-GCM ciphertext and tag.
pub fn seal(bearer: &Bearer, id: &str, dir: Dir, registration: &Map<String, Value>) -> Bytes {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .expect("the system's random source failed");
    let mut data = serde_json::to_vec(registration).expect("a JSON map serializes");
    key(bearer, id, dir)
        .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
        .expect("AES-GCM seals any length the store holds");
    let mut out = Vec::with_capacity(NONCE_LEN + data.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&data);
    Bytes::from(out)
}

/// Opens a sealed registration with the bearer that sealed it; `None` otherwise.
pub fn open(bearer: &Bearer, id: &str, dir: Dir, sealed: &[u8]) -> Option<Map<String, Value>> {
    if sealed.len() < NONCE_LEN {
        return None;
    }
    let (nonce, rest) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut data = rest.to_vec();
    let plain = key(bearer, id, dir)
        .open_in_place(nonce, Aad::empty(), &mut data)
        .ok()?;
    match serde_json::from_slice(plain).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// The service label of a registration's service.
pub fn service_label(service: &str) -> &'static str {
    ServiceLabel::ALL
        .into_iter()
        .map(ServiceLabel::as_str)
        .find(|s| *s == service)
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{header, HeaderMap, HeaderValue};
    use proptest::prelude::*;

    fn bearer(t: &str) -> Bearer {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
        super::super::auth::from_headers(&h).unwrap()
    }

    #[test]
    fn sealed_registrations_open_only_with_their_bearer_and_direction() {
        let b = bearer("Zq3k8r2mT1u0wQabcdefgh");
        let token = "ab".repeat(32);
        let reg: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "service": "apns", "token": token, "environment": "production", "tag": "t1"
        }))
        .unwrap();
        let id = "abcdefghijklmnop";
        let sealed = seal(&b, id, Dir::P2c, &reg);
        assert!(!sealed.windows(token.len()).any(|w| w == token.as_bytes()));
        assert_ne!(
            sealed,
            seal(&b, id, Dir::P2c, &reg),
            "a fresh nonce per write"
        );
        assert_eq!(open(&b, id, Dir::P2c, &sealed), Some(reg.clone()));
        assert_eq!(open(&b, id, Dir::C2p, &sealed), None);
        assert_eq!(open(&b, "abcdefghijklmnoq", Dir::P2c, &sealed), None);
        assert_eq!(
            open(&bearer("Zq3k8r2mT1u0wQabcdefgX"), id, Dir::P2c, &sealed),
            None
        );
        let mut tampered = sealed.to_vec();
        tampered[20] ^= 1;
        assert_eq!(open(&b, id, Dir::P2c, &tampered), None);
        assert_eq!(open(&b, id, Dir::P2c, b"short"), None);
    }

    /// The key is HKDF-SHA256 exactly as the spec writes it: checked against an HMAC-based
    /// computation of RFC 5869 by hand.
    #[test]
    fn the_key_is_the_specs_hkdf() {
        use ring::hmac;
        let token = "Zq3k8r2mT1u0wQabcdefgh";
        let prk = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, b"zerobyte-push-v1"),
            token.as_bytes(),
        );
        let mut t1_input = b"abcdefghijklmnop/c2p".to_vec();
        t1_input.push(1);
        let okm = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, prk.as_ref()), &t1_input);
        // Seal with the hand-made key; the relay's open must read it.
        let reg: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"service": "x", "tag": "t"})).unwrap();
        let k = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, okm.as_ref()).unwrap());
        let mut data = serde_json::to_vec(&reg).unwrap();
        let nonce = [7u8; 12];
        k.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
            .unwrap();
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&data);
        assert_eq!(
            open(&bearer(token), "abcdefghijklmnop", Dir::C2p, &sealed),
            Some(reg)
        );
    }

    #[test]
    fn generic_rules_without_a_module() {
        let m = Modules::default();
        let ok = |v: serde_json::Value| check(v.to_string().as_bytes(), &m);
        assert!(ok(
            serde_json::json!({"service": "unifiedpush", "tag": "t", "endpoint": "https://x"})
        )
        .is_ok());
        assert!(
            ok(serde_json::json!({"service": "apns", "tag": "t", "token": "anything"})).is_ok()
        );
        let eight: Map<String, Value> = (0..8)
            .map(|i| (format!("f{i}"), Value::from("v")))
            .collect();
        let mut v = Value::Object(eight);
        v["service"] = "x".into();
        v["tag"] = "t".into();
        assert!(ok(v.clone()).is_ok());
        v["f8"] = "v".into();
        assert!(ok(v).is_err());
        for bad in [
            serde_json::json!({"tag": "t"}),
            serde_json::json!({"service": "X", "tag": "t"}),
            serde_json::json!({"service": "1x", "tag": "t"}),
            serde_json::json!({"service": "abcdefghijklmnopq", "tag": "t"}),
            serde_json::json!({"service": "x"}),
            serde_json::json!({"service": "x", "tag": "bad tag"}),
            serde_json::json!({"service": "x", "tag": "a".repeat(65)}),
            serde_json::json!({"service": "x", "tag": "t", "alert": "a".repeat(161)}),
            serde_json::json!({"service": "x", "tag": "t", "alert": 1}),
            serde_json::json!({"service": "x", "tag": "t", "n": 1}),
            serde_json::json!({"service": "x", "tag": "t", "long": "a".repeat(257)}),
            serde_json::json!([1]),
        ] {
            assert!(ok(bad.clone()).is_err(), "{bad}");
        }
        assert!(
            ok(serde_json::json!({"service": "x", "tag": "t", "alert": "é".repeat(160)})).is_ok()
        );
    }

    #[test]
    fn service_labels_stay_bounded() {
        assert_eq!(service_label("apns"), "apns");
        assert_eq!(service_label("fcm"), "fcm");
        assert_eq!(service_label("unifiedpush"), "other");
        assert_eq!(service_label("none"), "none");
        let outcomes: Vec<_> = PushOutcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(
            outcomes,
            [
                "delivered",
                "token_dead",
                "rejected",
                "misconfigured",
                "retryable",
                "foreground",
                "rate_limited",
                "no_registration",
                "no_module",
                "unopenable",
            ]
        );
    }

    proptest! {
        #[test]
        fn no_registration_body_panics(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = check(&body, &Modules::default());
        }
    }
}
