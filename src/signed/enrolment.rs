//! A signer's record and the rules that change it, as plain types and pure functions (no
//! store, no clock: the caller passes `now_ms`): the record the store keeps per key id
//! ([`Signer`]), an enrolment ([`enroll`]: a new key id, or an update that keeps the creation
//! time and makes a revoked signer active again) and a revocation ([`revoke`]: the first time
//! is kept). The store's backends run these, in process under a lock and in Redis as
//! `signer_enroll.lua` / `signer_revoke.lua`, which mirror them.

use serde::{Deserialize, Serialize};

/// One enrolled signer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signer {
    /// `ed25519:<name>`.
    #[serde(rename = "keyId")]
    pub key_id: String,
    /// The Ed25519 public key, standard base64 of 32 bytes.
    #[serde(rename = "publicKey")]
    pub public_key: String,
    /// APNs topics it may push to.
    pub topics: Vec<String>,
    /// Enrolled, ms.
    #[serde(rename = "createdAtMs")]
    pub created_ms: i64,
    /// Last enrolment or update, ms.
    #[serde(rename = "updatedAtMs")]
    pub updated_ms: i64,
    /// Revoked, ms; `None` while active.
    #[serde(
        rename = "revokedAtMs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub revoked_ms: Option<i64>,
}

impl Signer {
    /// `active` or `revoked`.
    pub fn state(&self) -> &'static str {
        if self.revoked_ms.is_some() {
            "revoked"
        } else {
            "active"
        }
    }
}

/// What enrolling did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enrolled {
    /// A new key id.
    Created,
    /// An existing one, updated (and active again if it was revoked).
    Updated,
}

/// An enrolment, as the admin API checked it.
#[derive(Debug, Clone, Copy)]
pub struct Enrolment<'a> {
    /// The key id, `ed25519:<name>`.
    pub key_id: &'a str,
    /// The public key, standard base64 of 32 bytes.
    pub public_key: &'a str,
    /// The topics it may push to.
    pub topics: &'a [String],
}

/// Applies an enrolment to the current record: the new record and what happened. A
/// re-enrolled revoked signer is active again, keeping its creation time.
pub fn enroll(current: Option<&Signer>, e: &Enrolment<'_>, now_ms: i64) -> (Signer, Enrolled) {
    let created_ms = current.map_or(now_ms, |c| c.created_ms);
    let s = Signer {
        key_id: e.key_id.to_owned(),
        public_key: e.public_key.to_owned(),
        topics: e.topics.to_vec(),
        created_ms,
        updated_ms: now_ms,
        revoked_ms: None,
    };
    let how = if current.is_some() {
        Enrolled::Updated
    } else {
        Enrolled::Created
    };
    (s, how)
}

/// Revokes `signer` at `now_ms`; revoking twice keeps the first time.
pub fn revoke(signer: &mut Signer, now_ms: i64) {
    if signer.revoked_ms.is_none() {
        signer.revoked_ms = Some(now_ms);
        signer.updated_ms = now_ms;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Enrolment of `ed25519:a` with this key and these topics.
    pub(crate) fn with_key<'a>(public_key: &'a str, topics: &'a [String]) -> Enrolment<'a> {
        Enrolment {
            key_id: "ed25519:a",
            public_key,
            topics,
        }
    }

    #[test]
    fn enrol_update_revoke_and_enrol_again() {
        let t = vec!["com.example".to_owned()];
        let (first, how) = enroll(None, &with_key("KEY", &t), 1);
        assert_eq!((how, first.state()), (Enrolled::Created, "active"));
        let (mut s, how) = enroll(Some(&first), &with_key("KEY2", &t), 2);
        assert_eq!((how, s.created_ms, s.updated_ms), (Enrolled::Updated, 1, 2));
        revoke(&mut s, 3);
        assert_eq!(
            (s.state(), s.revoked_ms, s.updated_ms),
            ("revoked", Some(3), 3)
        );
        revoke(&mut s, 9);
        assert_eq!(
            (s.revoked_ms, s.updated_ms),
            (Some(3), 3),
            "the first revocation holds"
        );
        let (again, how) = enroll(Some(&s), &with_key("KEY3", &t), 10);
        assert_eq!(
            (
                how,
                again.state(),
                again.created_ms,
                again.public_key.as_str()
            ),
            (Enrolled::Updated, "active", 1, "KEY3")
        );
        let json = serde_json::to_value(&again).unwrap();
        assert_eq!(json["keyId"], "ed25519:a");
        assert_eq!(json["createdAtMs"], 1);
        assert!(json.get("revokedAtMs").is_none());
    }
}
