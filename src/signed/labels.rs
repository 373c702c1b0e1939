//! What the signed front-end's metrics are labelled with: the route, who read a receipt, and
//! how a background settlement went. Each owns its label values and every value is registered
//! at start-up.

use super::error::Code;

/// A `/v2` route, as labelled in `sealrelay_signed_requests_total{route}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v2/pushes`.
    Push,
    /// `GET /v2/pushes/<id>`.
    Receipt,
    /// `GET /v2/pushes/<id>/events`.
    Events,
}

impl Route {
    /// Every route.
    pub const ALL: [Route; 3] = [Route::Push, Route::Receipt, Route::Events];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Push => "push",
            Route::Receipt => "receipt",
            Route::Events => "events",
        }
    }

    /// The codes this route's series are registered with at zero: every code it answers
    /// but the rare 405.
    pub fn codes(self) -> &'static [Code] {
        match self {
            Route::Push => &[
                Code::Created,
                Code::Replayed,
                Code::InvalidRequest,
                Code::TooLarge,
                Code::BadSignature,
                Code::UnknownSigner,
                Code::RevokedSigner,
                Code::TopicNotAllowed,
                Code::StaleRequest,
                Code::RequestIdConflict,
                Code::RateLimited,
                Code::Unavailable,
            ],
            Route::Receipt => &[Code::Ok, Code::Unauthorized, Code::NotFound],
            Route::Events => &[Code::Ok],
        }
    }
}

/// Who read a receipt, as labelled in `sealrelay_receipt_reads_total{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// `GET /v2/pushes/<id>`.
    Receipt,
    /// An event stream opened.
    Events,
    /// The admin API's receipt read.
    Admin,
}

impl ReadKind {
    /// Every kind.
    pub const ALL: [ReadKind; 3] = [ReadKind::Receipt, ReadKind::Events, ReadKind::Admin];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadKind::Receipt => "receipt",
            ReadKind::Events => "events",
            ReadKind::Admin => "admin",
        }
    }
}

/// How a background settlement of a signed push went, as labelled in
/// `sealrelay_signed_resolutions_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// A store reply was lost: the push is settled in the background.
    Started,
    /// Its accepted targets were delivered (or refused) and recorded.
    Delivered,
    /// Nothing was left for it: recorded, or another holder has the push.
    Settled,
    /// The staleness window closed first; the receipt's readers settle it.
    Abandoned,
    /// Not started: the replica had `RELAY_SIGNED_MAX_SETTLEMENTS` running; the push is
    /// left to its client's replay (which takes over a lapsed lease) and its readers.
    Left,
}

impl Resolution {
    /// Every result.
    pub const ALL: [Resolution; 5] = [
        Resolution::Started,
        Resolution::Delivered,
        Resolution::Settled,
        Resolution::Abandoned,
        Resolution::Left,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Started => "started",
            Resolution::Delivered => "delivered",
            Resolution::Settled => "settled",
            Resolution::Abandoned => "abandoned",
            Resolution::Left => "left",
        }
    }
}
