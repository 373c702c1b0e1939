//! What a hop carries on the wire: its headers, the mark a received hop gets, and the region
//! listener's refusals.

/// The header naming the region a hop comes from.
pub const HOP: &str = "x-relay-hop";
/// The client's address as the edge saw it.
pub const CLIENT: &str = "x-relay-client";
/// The digest of the sender's region set.
pub const SET: &str = "x-relay-region-set";
/// The hop's authentication.
pub const AUTH: &str = "x-relay-region-auth";

/// Marks a refusal by the region listener itself (not an answer of the home's protocols), so
/// the sender counts it `refused`; removed before an answer is relayed.
pub const REFUSAL_HEADER: &str = "x-relay-region-refused";

/// How a received hop ended (a metric label).
pub const RECEIVED: [&str; 3] = ["accepted", "unauthorized", "region_set_mismatch"];

/// The mark of a request that arrived over the region listener from `from`.
#[derive(Debug, Clone)]
pub struct Hop {
    /// The sending region.
    pub from: String,
}

/// Why a hop is refused.
#[derive(Debug)]
pub enum Refused {
    /// 401: unknown sender, or a missing, stale or wrong signature (the reason).
    Unauthorized(&'static str),
    /// 409 `region_set_mismatch`: the sender (named) lists another set of regions.
    SetMismatch(String),
}
