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
mod common;
pub mod fcm;

use std::sync::Arc;

use bytes::Bytes;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

pub use common::{Generic, Notify, ServiceName, MAX_GENERIC_MEMBERS};

use super::auth::Bearer;
use super::state::Dir;
use crate::push::{Push, Service, VerdictClass};

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

/// A push registration, as checked and as sealed at rest: a service's own, by the rules of
/// its module, when the relay had loaded that module; else the generic rules'.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Registration {
    /// A registration for a service the relay has a module for.
    Module(ByService),
    /// A registration kept under the generic rules.
    Generic(Generic),
}

/// A registration by its service's module's rules, tagged by `service`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "service", rename_all = "lowercase")]
pub enum ByService {
    /// `"service":"apns"`.
    Apns(apns::Registration),
    /// `"service":"fcm"`.
    Fcm(fcm::Registration),
}

impl Registration {
    /// The service the registration names.
    pub fn service(&self) -> &str {
        match self {
            Registration::Module(ByService::Apns(_)) => Service::Apns.as_str(),
            Registration::Module(ByService::Fcm(_)) => Service::Fcm.as_str(),
            Registration::Generic(g) => g.service.as_str(),
        }
    }
}

/// The one member read before the rules are chosen: which service's they are.
#[derive(Deserialize)]
struct Named {
    service: ServiceName,
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
    /// Sends one push for `registration` on the app's `topic` at `now_s` (the injected
    /// clock's, seconds: its expiry counts from it). A registration kept under
    /// the generic rules for this service (registered before its module was loaded) is
    /// not one the service takes: nothing is sent, and it counts as rejected.
    pub async fn send(
        &self,
        registration: &Registration,
        notify: Notify,
        topic: &str,
        now_s: u64,
    ) -> Sent {
        let (env, n) = match (self.service, registration) {
            (Service::Apns, Registration::Module(ByService::Apns(r))) => {
                r.notification(notify, topic, now_s)
            }
            (Service::Fcm, Registration::Module(ByService::Fcm(r))) => {
                r.notification(notify, now_s)
            }
            _ => {
                return Sent {
                    outcome: PushOutcome::Sent(VerdictClass::Rejected).as_str(),
                    forget: false,
                }
            }
        };
        let verdict = self.push.send(env, &n, self.push.request_timeout()).await;
        Sent {
            outcome: PushOutcome::Sent(verdict.class()).as_str(),
            forget: verdict.forgets_registration(),
        }
    }
}

/// A registration's body, checked: by its service's module's rules when that module is
/// loaded (the shared `tag` and optional `alert`, its own members and no other), or
/// without a module at most [`MAX_GENERIC_MEMBERS`] other string members of at most 256
/// characters. The error says what is wrong; it may quote the body, so it is never logged
/// (the answer is a plain 400).
pub fn check(body: &[u8], modules: &Modules) -> Result<Registration, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("the body must be a JSON object".to_owned());
    }
    let named = Named::deserialize(&value).map_err(|e| e.to_string())?;
    if modules.get(named.service.as_str()).is_some() {
        let r = ByService::deserialize(&value).map_err(|e| e.to_string())?;
        return Ok(Registration::Module(r));
    }
    let g = Generic::deserialize(&value).map_err(|e| e.to_string())?;
    if g.others.len() > MAX_GENERIC_MEMBERS {
        return Err(format!(
            "at most {MAX_GENERIC_MEMBERS} members besides service, tag and alert"
        ));
    }
    Ok(Registration::Generic(g))
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

/// The plaintext of a sealed registration is padded with spaces (which JSON ignores) to a
/// multiple of this: every registration a module takes (APNs or FCM, at the longest token,
/// tag and alert allowed, about 1,800 bytes for FCM) seals to one size, so a copy of the
/// store cannot tell the services (or the tokens' lengths) apart. Only a generic
/// registration with long members takes a larger multiple.
pub const SEALED_BLOCK: usize = 2048;

/// Seals a checked registration: nonce (12 bytes) then the AES-256-GCM ciphertext (of the
/// JSON padded to a multiple of [`SEALED_BLOCK`]) and tag.
pub fn seal(bearer: &Bearer, id: &str, dir: Dir, registration: &Registration) -> Bytes {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .expect("the system's random source failed");
    let mut data = serde_json::to_vec(registration).expect("a registration serializes");
    let padded = data.len().div_ceil(SEALED_BLOCK).max(1) * SEALED_BLOCK;
    data.resize(padded, b' ');
    key(bearer, id, dir)
        .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
        .expect("AES-GCM seals any length the store holds");
    let mut out = Vec::with_capacity(NONCE_LEN + data.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&data);
    Bytes::from(out)
}

/// Opens a sealed registration with the bearer that sealed it; `None` otherwise.
pub fn open(bearer: &Bearer, id: &str, dir: Dir, sealed: &[u8]) -> Option<Registration> {
    if sealed.len() < NONCE_LEN {
        return None;
    }
    let (nonce, rest) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut data = rest.to_vec();
    let plain = key(bearer, id, dir)
        .open_in_place(nonce, Aad::empty(), &mut data)
        .ok()?;
    serde_json::from_slice(plain).ok()
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
        let reg: Registration = serde_json::from_value(serde_json::json!({
            "service": "apns", "token": token, "environment": "production", "tag": "t1"
        }))
        .unwrap();
        assert!(matches!(reg, Registration::Module(ByService::Apns(_))));
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
        assert_eq!(sealed.len(), 12 + SEALED_BLOCK + 16);
        let mut tampered = sealed.to_vec();
        tampered[20] ^= 1;
        assert_eq!(open(&b, id, Dir::P2c, &tampered), None);
        assert_eq!(open(&b, id, Dir::P2c, b"short"), None);
    }

    /// Sealed, the shortest APNs registration and the longest FCM one (a 1024-character
    /// token, the longest tag and a 160-character alert of 4-byte characters) are the same
    /// size, and both open.
    #[test]
    fn sealed_registrations_do_not_tell_the_service() {
        let b = bearer("Zq3k8r2mT1u0wQabcdefgh");
        let apns: Registration = serde_json::from_value(serde_json::json!({
            "service": "apns", "token": "ab".repeat(32), "environment": "production", "tag": "t"
        }))
        .unwrap();
        let fcm: Registration = serde_json::from_value(serde_json::json!({
            "service": "fcm", "token": "a".repeat(1024), "tag": "T".repeat(64),
            "alert": "\u{1F600}".repeat(160)
        }))
        .unwrap();
        assert!(matches!(fcm, Registration::Module(ByService::Fcm(_))));
        let (a, f) = (
            seal(&b, "abcdefghijklmnop", Dir::P2c, &apns),
            seal(&b, "abcdefghijklmnop", Dir::P2c, &fcm),
        );
        assert_eq!(a.len(), f.len());
        assert_eq!(open(&b, "abcdefghijklmnop", Dir::P2c, &a), Some(apns));
        assert_eq!(open(&b, "abcdefghijklmnop", Dir::P2c, &f), Some(fcm));
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
        let reg: Registration =
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
        use serde_json::{json, Map, Value};
        let eight: Map<String, Value> = (0..8)
            .map(|i| (format!("f{i}"), Value::from("v")))
            .collect();
        let with = |mut m: Map<String, Value>, extra: &[(&str, &str)]| {
            m.insert("service".into(), "x".into());
            m.insert("tag".into(), "t".into());
            for (k, v) in extra {
                m.insert((*k).into(), (*v).into());
            }
            Value::Object(m)
        };
        let good = [
            (
                "another service",
                json!({"service": "unifiedpush", "tag": "t", "endpoint": "https://x"}),
            ),
            (
                "apns without its module",
                json!({"service": "apns", "tag": "t", "token": "anything"}),
            ),
            ("eight other members", with(eight.clone(), &[])),
            (
                "160 characters of alert",
                json!({"service": "x", "tag": "t", "alert": "é".repeat(160)}),
            ),
        ];
        let bad = [
            ("no service", json!({"tag": "t"})),
            ("upper-case service", json!({"service": "X", "tag": "t"})),
            (
                "service starting with a digit",
                json!({"service": "1x", "tag": "t"}),
            ),
            (
                "service of 17",
                json!({"service": "abcdefghijklmnopq", "tag": "t"}),
            ),
            ("no tag", json!({"service": "x"})),
            (
                "tag with a space",
                json!({"service": "x", "tag": "bad tag"}),
            ),
            ("tag of 65", json!({"service": "x", "tag": "a".repeat(65)})),
            (
                "alert of 161",
                json!({"service": "x", "tag": "t", "alert": "a".repeat(161)}),
            ),
            (
                "alert not a string",
                json!({"service": "x", "tag": "t", "alert": 1}),
            ),
            (
                "member not a string",
                json!({"service": "x", "tag": "t", "n": 1}),
            ),
            (
                "member of 257",
                json!({"service": "x", "tag": "t", "long": "a".repeat(257)}),
            ),
            ("nine other members", with(eight, &[("f8", "v")])),
            ("not an object", json!([1])),
        ];
        let m = Modules::default();
        for (name, v) in good {
            let r = check(v.to_string().as_bytes(), &m);
            assert!(matches!(r, Ok(Registration::Generic(_))), "{name}: {r:?}");
        }
        for (name, v) in bad {
            assert!(check(v.to_string().as_bytes(), &m).is_err(), "{name}");
        }
    }

    /// A service that is loaded but never called: what `check` reads is which are loaded.
    #[derive(Debug)]
    struct Loaded(Service);

    impl Push for Loaded {
        fn service(&self) -> Service {
            self.0
        }
        fn render(&self, _: &crate::push::Notification) -> Bytes {
            Bytes::new()
        }
        fn send<'a>(
            &'a self,
            _: crate::device::Environment,
            _: &'a crate::push::Notification,
            _: std::time::Duration,
        ) -> crate::push::BoxFuture<'a, crate::push::Verdict> {
            Box::pin(async { crate::push::Verdict::UNREACHABLE })
        }
        fn request_timeout(&self) -> std::time::Duration {
            std::time::Duration::from_secs(1)
        }
    }

    #[test]
    fn a_loaded_module_takes_its_own_members_only() {
        use serde_json::json;
        let m = Modules::new(vec![
            Arc::new(Loaded(Service::Apns)),
            Arc::new(Loaded(Service::Fcm)),
        ]);
        let apns = "ab".repeat(32);
        let fcm = "f".repeat(40);
        let good = [
            (
                "apns",
                json!({"service": "apns", "tag": "t", "token": apns}),
                Service::Apns,
            ),
            (
                "apns sandbox",
                json!({"service": "apns", "tag": "t", "token": apns, "environment": "development"}),
                Service::Apns,
            ),
            (
                "fcm",
                json!({"service": "fcm", "tag": "t", "token": fcm, "alert": "hi"}),
                Service::Fcm,
            ),
            (
                "a long fcm token",
                json!({"service": "fcm", "tag": "t", "token": "f".repeat(1024)}),
                Service::Fcm,
            ),
        ];
        for (name, v, service) in good {
            let r = check(v.to_string().as_bytes(), &m);
            assert!(matches!(r, Ok(Registration::Module(_))), "{name}: {r:?}");
            assert_eq!(r.unwrap().service(), service.as_str(), "{name}");
        }
        let bad = [
            (
                "apns, another member",
                json!({"service": "apns", "tag": "t", "token": apns, "x": "y"}),
            ),
            (
                "apns, a token that is not one",
                json!({"service": "apns", "tag": "t", "token": "anything"}),
            ),
            (
                "fcm, an environment",
                json!({"service": "fcm", "tag": "t", "token": fcm, "environment": "production"}),
            ),
            (
                "fcm, a bad tag",
                json!({"service": "fcm", "tag": "a b", "token": fcm}),
            ),
        ];
        for (name, v) in bad {
            assert!(check(v.to_string().as_bytes(), &m).is_err(), "{name}");
        }
    }

    /// A registration kept generic for a service whose module is loaded later is read as
    /// that service's when its members fit the module's rules, and stays generic (never
    /// sent) otherwise; any other service's round-trips as it was.
    #[test]
    fn stored_registrations_read_back() {
        use serde_json::json;
        let read = |v: serde_json::Value| -> Registration {
            serde_json::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap()
        };
        let fits = read(json!({"service": "apns", "tag": "t", "token": "ab".repeat(32)}));
        assert!(matches!(fits, Registration::Module(ByService::Apns(_))));
        let odd = read(json!({"service": "apns", "tag": "t", "token": "anything"}));
        assert!(matches!(odd, Registration::Generic(_)));
        assert_eq!(odd.service(), "apns");
        let other = check(
            json!({"service": "unifiedpush", "tag": "t", "endpoint": "https://x"})
                .to_string()
                .as_bytes(),
            &Modules::default(),
        )
        .unwrap();
        let again: Registration =
            serde_json::from_slice(&serde_json::to_vec(&other).unwrap()).unwrap();
        assert_eq!(again, other);
        assert_eq!(
            serde_json::to_value(&again).unwrap(),
            json!({"service": "unifiedpush", "tag": "t", "endpoint": "https://x"})
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
