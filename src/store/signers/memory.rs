//! Signers in process: [`MemorySigners`] under a lock, running the enrolment's rules, and
//! [`InProcessSigners`], which publishes each change on the in-process fan-out.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::backend::{signers_channel, SignerBackend};
use crate::signed::enrolment::{enroll, revoke, Enrolled, Enrolment, Signer};
use crate::store::concern::InProcess;
use crate::store::error::StoreResult;

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
    pub fn enroll(&self, e: &Enrolment<'_>, now_ms: i64) -> (Signer, Enrolled) {
        let mut map = self.lock();
        let (s, how) = enroll(map.get(e.key_id), e, now_ms);
        map.insert(e.key_id.to_owned(), s.clone());
        (s, how)
    }

    /// Revokes; `None` for an unknown key id. Revoking twice keeps the first time.
    pub fn revoke(&self, key_id: &str, now_ms: i64) -> Option<Signer> {
        let mut map = self.lock();
        let s = map.get_mut(key_id)?;
        revoke(s, now_ms);
        Some(s.clone())
    }

    /// Every signer, by key id.
    pub fn list(&self) -> Vec<Signer> {
        self.lock().values().cloned().collect()
    }
}

/// Signers in process, publishing their changes on the in-process fan-out.
pub type InProcessSigners = InProcess<MemorySigners>;

#[async_trait::async_trait]
impl SignerBackend for InProcessSigners {
    async fn get(&self, key_id: &str) -> StoreResult<Option<Signer>> {
        Ok(self.memory.get(key_id))
    }

    async fn enroll(&self, e: &Enrolment<'_>, now_ms: i64) -> StoreResult<(Signer, Enrolled)> {
        let r = self.memory.enroll(e, now_ms);
        self.fanout
            .publish(&signers_channel(""), e.key_id.as_bytes(), now_ms)
            .await?;
        Ok(r)
    }

    async fn revoke(&self, key_id: &str, now_ms: i64) -> StoreResult<Option<Signer>> {
        let r = self.memory.revoke(key_id, now_ms);
        if r.is_some() {
            self.fanout
                .publish(&signers_channel(""), key_id.as_bytes(), now_ms)
                .await?;
        }
        Ok(r)
    }

    async fn list(&self) -> StoreResult<Vec<Signer>> {
        Ok(self.memory.list())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signed::enrolment::tests::with_key;

    #[test]
    fn enrol_update_revoke_and_enrol_again() {
        let m = MemorySigners::default();
        let t = vec!["com.example".to_owned()];
        assert_eq!(m.enroll(&with_key("KEY", &t), 1).1, Enrolled::Created);
        assert_eq!(m.enroll(&with_key("KEY2", &t), 2).1, Enrolled::Updated);
        let r = m.revoke("ed25519:a", 3).unwrap();
        assert_eq!(
            (r.state(), r.revoked_ms, r.created_ms),
            ("revoked", Some(3), 1)
        );
        assert_eq!(m.revoke("ed25519:a", 9).unwrap().revoked_ms, Some(3));
        assert!(m.revoke("ed25519:zz", 9).is_none());
        let (again, how) = m.enroll(&with_key("KEY3", &t), 10);
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
