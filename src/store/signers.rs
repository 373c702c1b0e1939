//! Enrolled signers as the store keeps them: one record per key id (the public key, the
//! topics it may push to, when it was enrolled, updated and revoked). Every replica caches
//! them (`crate::signed::signers`) and drops an entry when the fan-out says it changed.

use std::collections::BTreeMap;
use std::sync::Mutex;

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

/// Applies an enrolment to the current record: the new record and what happened. A
/// re-enrolled revoked signer is active again, keeping its creation time.
pub fn enroll(
    current: Option<&Signer>,
    key_id: &str,
    public_key: &str,
    topics: &[String],
    now_ms: i64,
) -> (Signer, Enrolled) {
    let created_ms = current.map_or(now_ms, |c| c.created_ms);
    let s = Signer {
        key_id: key_id.to_owned(),
        public_key: public_key.to_owned(),
        topics: topics.to_vec(),
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

/// Signers in process memory.
#[derive(Debug, Default)]
pub struct MemorySigners {
    map: Mutex<BTreeMap<String, Signer>>,
}

impl MemorySigners {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Signer>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One signer.
    pub fn get(&self, key_id: &str) -> Option<Signer> {
        self.lock().get(key_id).cloned()
    }

    /// Enrols or updates.
    pub fn enroll(
        &self,
        key_id: &str,
        public_key: &str,
        topics: &[String],
        now_ms: i64,
    ) -> (Signer, Enrolled) {
        let mut map = self.lock();
        let (s, how) = enroll(map.get(key_id), key_id, public_key, topics, now_ms);
        map.insert(key_id.to_owned(), s.clone());
        (s, how)
    }

    /// Revokes; `None` for an unknown key id. Revoking twice keeps the first time.
    pub fn revoke(&self, key_id: &str, now_ms: i64) -> Option<Signer> {
        let mut map = self.lock();
        let s = map.get_mut(key_id)?;
        if s.revoked_ms.is_none() {
            s.revoked_ms = Some(now_ms);
            s.updated_ms = now_ms;
        }
        Some(s.clone())
    }

    /// Every signer, by key id.
    pub fn list(&self) -> Vec<Signer> {
        self.lock().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enrol_update_revoke_and_enrol_again() {
        let m = MemorySigners::default();
        let t = vec!["com.example".to_owned()];
        assert_eq!(m.enroll("ed25519:a", "KEY", &t, 1).1, Enrolled::Created);
        assert_eq!(m.enroll("ed25519:a", "KEY2", &t, 2).1, Enrolled::Updated);
        let r = m.revoke("ed25519:a", 3).unwrap();
        assert_eq!(
            (r.state(), r.revoked_ms, r.created_ms),
            ("revoked", Some(3), 1)
        );
        assert_eq!(m.revoke("ed25519:a", 9).unwrap().revoked_ms, Some(3));
        assert!(m.revoke("ed25519:zz", 9).is_none());
        let (again, how) = m.enroll("ed25519:a", "KEY3", &t, 10);
        assert_eq!(
            (how, again.state(), again.created_ms),
            (Enrolled::Updated, "active", 1)
        );
        assert_eq!(m.list().len(), 1);
        let json = serde_json::to_value(&again).unwrap();
        assert_eq!(json["keyId"], "ed25519:a");
        assert!(json.get("revokedAtMs").is_none());
    }
}
