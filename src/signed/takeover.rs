//! A push whose replica stopped, taken over by whoever reads it.
//!
//! The request that accepts a push keeps it, sealed under the retry queue's key, beside the
//! push's lease for the staleness window (`<prefix>{r:<push id>}:kept`, written by the same
//! script that creates the receipt). A reader (a signed read, an event stream) that finds a
//! target still `accepted` past twice the lease ([`super::abandoned`]) then does not settle
//! it as `relay_interrupted` at once: while the window is open and the request is kept, its
//! replica opens the request, checks it is the receipt's (the same canonical hash), bids for
//! the lapsed lease as a replay would ([`super::receipt::lifecycle::begin`]) and, holding it,
//! delivers the targets still `accepted` in the background, as a client's replay would
//! (at least once: the stopped replica may have sent them, under the same collapse id).
//! The read answers at once with the receipt as it was; the outcomes follow as events.
//! Past the window, or with nothing kept, the reader settles the targets as before.
//!
//! Store round trips: none while no target is past the bound; one GET of the kept request
//! when one is, then, in the background, what a replay that takes a push over costs.

use std::sync::Arc;
use std::time::Instant;

use super::front::Signed;
use super::receipt::lifecycle::{self as receipts, Begun, Receipt};
use super::request::SignedPush;
use super::settle::{deliver, kept_aad};
use crate::metrics;

impl Signed {
    /// `r` as a reader found it at `now_ms`, its abandoned targets dealt with: taken over in
    /// the background when the request is kept and the window open (`r` is returned as it
    /// was), else settled as `failed` ([`super::abandoned::Abandonment::settle`]).
    pub(super) async fn recover(self: &Arc<Self>, r: Receipt, now_ms: i64) -> Receipt {
        let abandonment = self.abandonment();
        if abandonment.updates(&r, now_ms).is_empty() {
            return r;
        }
        let open = now_ms - r.created_ms < crate::policy::STALENESS_S as i64 * 1000;
        if open && self.keeper.is_some() {
            if let Ok(Some(sealed)) = self.store().receipts().kept(&r.push_id, now_ms).await {
                if let Some(push) = self.open_kept(&r, &sealed) {
                    let s = self.clone();
                    let receipt = r.clone();
                    tokio::spawn(async move { s.take_over(push, receipt).await });
                    return r;
                }
            }
        }
        abandonment.settle(self.store(), r, now_ms).await
    }

    /// The kept request of `r`, opened and checked to be the one `r` records.
    fn open_kept(&self, r: &Receipt, sealed: &[u8]) -> Option<SignedPush> {
        let raw = self
            .keeper
            .as_ref()?
            .open_bytes(&kept_aad(&r.push_id), sealed)?;
        let push = SignedPush::parse(&raw, self.settings.max_ciphertext_chars).ok()?;
        (push.canonical_hash() == r.hash && push.request_id() == r.push_id).then_some(push)
    }

    /// Bids for `push`'s lapsed lease and, holding it, delivers its targets still
    /// `accepted`; outcomes the store does not take are settled in the background.
    async fn take_over(self: Arc<Self>, push: SignedPush, r: Receipt) {
        let owner = receipts::owner_token();
        let began = Instant::now();
        let now = self.now_ms();
        let fresh = match self
            .begin(&push, &r.topic, &owner, &r.signer, now, None)
            .await
        {
            Ok(Begun::Replay {
                receipt,
                owned: true,
            }) => receipt,
            // Another holder has it, nothing is left, or the store did not answer: the next
            // reader looks again.
            _ => return,
        };
        metrics::signed_takeover();
        tracing::warn!(
            push_id = %push.request_id(),
            "a signed push's lease lapsed while targets were still accepted and its client has not come back: a reader's replica takes it over and delivers them"
        );
        let (_, left) = deliver(&self, &push, &r.topic, fresh, began, true).await;
        if let Some(unrecorded) = left {
            self.resolve_later(
                push,
                r.topic.clone(),
                owner,
                r.signer.clone(),
                unrecorded,
                None,
            );
        }
    }
}
