//! `POST /v2/pushes`, `GET /v2/pushes/<id>` and `GET /v2/pushes/<id>/events`.
//!
//! A push is accepted in SIGNED.md's order, the first failing check answering, after two
//! checks at the door that cost nothing per body ([`crate::admission`], shared with v1): the
//! relay-wide in-flight limit (503 `unavailable`) and the source's bucket (429
//! `rate_limited`, reads too). Then the body's size (413) and schema (400), the signer (403 unknown or revoked), the signature (401),
//! the topic binding (403), freshness (422), the request id (409 with another hash; an exact
//! replay answers 200 with the receipt as it stands and sends nothing), the store (503).
//! A new push then runs every target through the v1 policy and APNs path concurrently and
//! answers 201 once each target has its first outcome.
//!
//! Store round trips: a new one-target push costs three (the receipt created with its
//! lease, the target's admission, the outcomes recorded) and one more per extra target's
//! admission; a replay costs one; the signer comes from the replica's cache
//! ([`super::signers`], read again from the store once an entry is 0.9 s old). A replay that finds the push's lease lapsed with targets still
//! `accepted` takes it over and costs what a new push costs; a replay or read that finds a
//! target abandoned past the bound costs one more, to settle it ([`super::abandoned`]).
//!
//! A store reply lost while the receipt is created is not taken for a command that did not
//! run: the request answers 503 and its replica settles the push in the background
//! ([`Signed::resolve`]), under the same lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::abandoned::Abandonment;
use super::error::{only, ApiError, Code, GET, POST};
use super::receipt;
use super::request::{SignedPush, MAX_BODY_BYTES};
use super::sig::{self, ReadAuthorization};
use super::signers::{Known, Signers};
use crate::admission::Admission;
use crate::body::BodyError;
use crate::delivery::{Context, Delivery};
use crate::metrics;
use crate::store::receipts::{
    self, Begun, Claim, Event, EventKind, Guard, Receipt, State as TargetState, Update, Updated,
};
use crate::store::{Store, StoreError};

/// How often an open event stream sends a `: keepalive` comment.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// An event stream whose client has taken nothing for this long (its buffer of 64 events
/// full) ends: its task and subscription are not held by a client that stopped reading.
/// (The connection itself is cut by the listener's write deadline.)
const STREAM_STALL: Duration = Duration::from_secs(30);
/// How often an open event stream of a pending push checks for abandoned targets.
const ABANDON_CHECK: Duration = Duration::from_secs(1);

/// The signed front-end's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The topic of a push that names none (`APNS_TOPIC`), if any.
    pub default_topic: Option<String>,
    /// Ciphertext cap (`RELAY_MAX_CIPHERTEXT_CHARS`), as for v1.
    pub max_ciphertext_chars: usize,
    /// How long ids and receipts are kept, ms.
    pub receipt_ttl_ms: i64,
    /// Time a client has to send its body.
    pub body_timeout: Duration,
    /// A target `accepted` for longer than this, ms, was left by a replica that stopped
    /// ([`super::abandoned`]): twice `RELAY_RETRY_LEASE_MS`.
    pub abandon_after_ms: i64,
    /// How long the request that accepts a push (or takes it over) holds its lease, ms:
    /// `RELAY_RETRY_LEASE_MS`, which exceeds twice the APNs request timeout.
    pub lease_ms: i64,
    /// Background settlements at once on this replica (`RELAY_SIGNED_MAX_SETTLEMENTS`).
    pub max_settlements: usize,
}

/// The signed front-end.
#[derive(Debug)]
pub struct Signed {
    /// Places for background settlements: beyond them a push is left to replays and
    /// readers, so lost replies cannot pile up tasks of up to the staleness window each.
    settling: Arc<tokio::sync::Semaphore>,
    settings: Settings,
    delivery: Arc<Delivery>,
    signers: Arc<Signers>,
    admission: Arc<Admission>,
    /// Several regions: each signer's pushes and reads decided in its home region.
    regions: Option<Arc<crate::region::Regions>>,
}

impl Signed {
    /// The front-end over the delivery core, with this replica's signer cache, admitting
    /// through the relay-wide `admission` (v1's in-flight limit and source buckets).
    pub(crate) fn new(
        settings: Settings,
        delivery: Arc<Delivery>,
        signers: Arc<Signers>,
        admission: Arc<Admission>,
    ) -> Self {
        Self {
            settling: Arc::new(tokio::sync::Semaphore::new(settings.max_settlements)),
            settings,
            delivery,
            signers,
            admission,
            regions: None,
        }
    }

    /// Decides each signer's pushes and reads in its home region (`RELAY_REGION`).
    pub(crate) fn with_regions(mut self, regions: Option<Arc<crate::region::Regions>>) -> Self {
        self.regions = regions;
        self
    }

    /// A signed read sent to its signer's home region: `Ok` with the request when it is
    /// decided here (this region is home, it is a hop, or its Authorization names no key id:
    /// refused here as anywhere), `Err` with the answer to return otherwise (the home's, or
    /// 503 `unavailable` when the home cannot be reached).
    async fn read_at_home(&self, req: Request) -> Result<Request, Response> {
        let Some(regions) = &self.regions else {
            return Ok(req);
        };
        let key_id = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| ReadAuthorization::parse(Some(v.as_bytes())).ok())
            .map(|a| a.key_id().to_owned());
        let Some(key_id) = key_id else {
            return Ok(req);
        };
        match regions
            .relay(
                "signed",
                key_id.as_bytes(),
                req,
                0,
                self.settings.body_timeout,
            )
            .await
        {
            crate::region::Relay::Here(req) => Ok(req),
            crate::region::Relay::Answered(resp) => Err(resp),
            crate::region::Relay::Unreachable | crate::region::Relay::Unreadable(_) => {
                Err(ApiError::unavailable().into_response())
            }
        }
    }

    fn store(&self) -> &Arc<Store> {
        self.delivery.store()
    }

    fn now_ms(&self) -> i64 {
        self.delivery.clock().now_ms()
    }

    /// When a target counts as abandoned.
    pub fn abandonment(&self) -> Abandonment {
        Abandonment {
            after_ms: self.settings.abandon_after_ms,
            ttl_ms: self.settings.receipt_ttl_ms,
        }
    }
}

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

/// The `/v2` routes.
pub fn routes(signed: Arc<Signed>) -> Router {
    Router::new()
        .route("/v2/pushes", post(push).fallback(only(POST)))
        .route("/v2/pushes/{id}", get(read).fallback(only(GET)))
        .route("/v2/pushes/{id}/events", get(events).fallback(only(GET)))
        .with_state(signed)
}

fn json(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn unavailable(e: &StoreError) -> ApiError {
    tracing::warn!(error = %e, "signed push: the shared store did not answer");
    ApiError::unavailable()
}

fn finish(route: Route, code: Code, started: Instant, resp: Response) -> Response {
    metrics::signed_request(route.as_str(), code.as_str(), started.elapsed());
    resp
}

async fn push(State(s): State<Arc<Signed>>, req: Request) -> Response {
    let started = Instant::now();
    let span = tracing::info_span!(
        "signed_push",
        otel.kind = "server",
        code = tracing::field::Empty
    );
    crate::telemetry::continue_trace(&span, req.headers());
    let (code, resp) = match accept(&s, req).await {
        Ok(Accepted::Here(code, resp)) => (code, resp),
        // Decided in the signer's home region: its answer, as it came.
        Ok(Accepted::Relayed(resp)) => return resp,
        Err(e) => (e.code, e.into_response()),
    };
    span.record("code", code.as_str());
    tracing::info!(parent: &span, code = code.as_str(), status = resp.status().as_u16(), latency_ms = started.elapsed().as_secs_f64() * 1000.0, "signed push");
    finish(Route::Push, code, started, resp)
}

/// The signer of `key_id`, active: 403 when unknown or revoked, 503 when the store fails.
async fn signer(s: &Signed, key_id: &str) -> Result<Arc<Known>, ApiError> {
    let known = s
        .signers
        .get(key_id)
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(ApiError::unknown_signer)?;
    if known.signer.revoked_ms.is_some() {
        return Err(ApiError::revoked_signer());
    }
    Ok(known)
}

fn verified(r: Result<(), sig::SigError>) -> Result<(), ApiError> {
    metrics::signature_verification(r.is_ok());
    r.map_err(ApiError::from)
}

/// What became of a signed push: decided here (with its code), or relayed from the signer's
/// home region.
enum Accepted {
    Here(Code, Response),
    Relayed(Response),
}

async fn accept(s: &Arc<Signed>, req: Request) -> Result<Accepted, ApiError> {
    // At the door, before the body costs a read, a parse, a signer lookup or a
    // verification: the relay-wide in-flight limit (503), the source's bucket (429).
    let _admitted = s.admission.enter()?;
    let (parts, body) = req.into_parts();
    s.admission.take(&parts, s.store(), s.now_ms()).await?;
    // Only with regions: what a hop needs of the request, kept before the body is read.
    let held = s
        .regions
        .as_ref()
        .and_then(|r| r.hold(&parts, || s.admission.source(&parts)));
    let req = Request::from_parts(parts, body);
    let body = crate::body::read(req, MAX_BODY_BYTES, s.settings.body_timeout)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => ApiError::too_large(MAX_BODY_BYTES),
            BodyError::TimedOut => ApiError::invalid("the body did not arrive in time"),
            BodyError::Unreadable => ApiError::invalid("the body could not be read"),
        })?;
    let push = SignedPush::parse(&body, s.settings.max_ciphertext_chars)
        .map_err(|e| ApiError::invalid(e.message()))?;
    // Several regions: a signer's pushes are decided in its home region only (its receipts
    // and replay guard live there); the home unreachable is 503, never a local decision.
    if let (Some(regions), Some(held)) = (&s.regions, held) {
        match regions.route(push.signer_key_id().as_bytes()) {
            crate::region::Route::Here => {}
            crate::region::Route::Down(peer) => {
                metrics::region_hop(&peer.name, "signed", "skipped_down", Duration::ZERO);
                return Err(ApiError::unavailable().with_push(push.request_id()));
            }
            crate::region::Route::Peer(peer) => {
                let out = held.with_body(body.clone());
                return match regions.forward(peer, "signed", out).await {
                    Ok(resp) => Ok(Accepted::Relayed(resp)),
                    Err(crate::region::HopFailure::Failed(why)) => {
                        tracing::warn!(peer = %peer.name, why, "hop to the signer's home region failed");
                        Err(ApiError::unavailable().with_push(push.request_id()))
                    }
                };
            }
        }
    }
    let id = push.request_id().to_owned();
    let with_id = |e: ApiError| e.with_push(&id);
    let known = signer(s, push.signer_key_id()).await.map_err(with_id)?;
    verified(sig::verify_push(&known.key, &push)).map_err(with_id)?;
    let topic = match push.topic().or(s.settings.default_topic.as_deref()) {
        Some(t) => t.to_owned(),
        None => {
            return Err(with_id(ApiError::invalid(
                "topic is required: the relay has no APNS_TOPIC to default to",
            )))
        }
    };
    if !known.signer.topics.contains(&topic) {
        return Err(with_id(ApiError::topic_not_allowed()));
    }
    let now = s.now_ms();
    sig::check_fresh(push.issued_at_ms(), now.max(0) as u64)
        .map_err(|_| with_id(ApiError::stale("issuedAtMs")))?;
    let owner = receipts::owner_token();
    // The receipt records the key the push was verified under, not only its id: a key id
    // enrolled again with another key reads none of the old key's receipts.
    let by = known.recorded.clone();
    let began = Instant::now();
    let begun = match s.begin(&push, &topic, &owner, &by, now).await {
        Ok(b) => b,
        Err(e) => {
            // A reply that did not arrive is not a command that did not run: Redis may yet
            // run (or have run) the begin, and with it this request's lease. This replica
            // keeps the push and settles it in the background, so the client's retry (a
            // replay) finds it delivered or being delivered, never abandoned.
            let answer = with_id(unavailable(&e));
            s.resolve_later(push, topic, owner, by, Vec::new());
            return Err(answer);
        }
    };
    let (code, status, fresh, taken) = match begun {
        Begun::Conflict => return Err(with_id(ApiError::conflict())),
        Begun::Replay {
            receipt: r,
            owned: false,
        } => {
            metrics::signed_replay();
            let r = s.abandonment().settle(s.store(), r, now).await;
            return Ok(Accepted::Here(
                Code::Replayed,
                json(StatusCode::OK, &receipt::render(&r)),
            ));
        }
        Begun::Replay {
            receipt: r,
            owned: true,
        } => {
            metrics::signed_replay();
            metrics::signed_takeover();
            tracing::warn!(
                push_id = %id,
                "a signed push's lease lapsed while targets were still accepted: this replay takes it over and delivers them"
            );
            (Code::Replayed, StatusCode::OK, r, true)
        }
        Begun::New(r) => (Code::Created, StatusCode::CREATED, r, false),
    };
    // Delivered and recorded in a task of its own: a client that hangs up does not cancel
    // the sends half way or leave the receipt without their outcomes.
    let (s2, id2) = (s.clone(), id.clone());
    let r = tokio::spawn(async move {
        let (r, left) = deliver(&s2, &push, &topic, fresh, began, taken).await;
        if let Some(unrecorded) = left {
            s2.resolve_later(push, topic, owner, by, unrecorded);
        }
        r
    })
    .await
    .map_err(|_| ApiError::unavailable().with_push(&id2))?;
    Ok(Accepted::Here(code, json(status, &receipt::render(&r))))
}

impl Signed {
    /// Begins `push`'s receipt with `owner` bidding for its lease (see
    /// [`crate::store::receipts::MemoryReceipts::begin`]).
    async fn begin(
        &self,
        push: &SignedPush,
        topic: &str,
        owner: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<Begun, StoreError> {
        let claim = Claim {
            owner,
            lease_ms: self.settings.lease_ms,
        };
        begin_receipt(
            self.store(),
            push,
            topic,
            by,
            &claim,
            now_ms,
            self.settings.receipt_ttl_ms,
        )
        .await
    }

    /// Settles `push` in the background after a store reply was lost: the outcomes not
    /// recorded yet are recorded, then the push is begun again under the same owner (its
    /// own replay renews its lease, or creates the receipt if the first begin never ran)
    /// and its still `accepted` targets are delivered. Tried with backoff (100 ms doubling
    /// to 2 s) until nothing is left, another holder has the push, or the staleness window
    /// closes (then the receipt's readers settle it).
    fn resolve_later(
        self: &Arc<Self>,
        push: SignedPush,
        topic: String,
        owner: String,
        by: String,
        unrecorded: Vec<Update>,
    ) {
        let Ok(place) = self.settling.clone().try_acquire_owned() else {
            tracing::warn!(
                push_id = %push.request_id(),
                "too many signed pushes are being settled in the background: this one is left to its replay and its readers"
            );
            metrics::signed_resolution(Resolution::Left.as_str());
            return;
        };
        metrics::signed_resolution(Resolution::Started.as_str());
        let s = self.clone();
        tokio::spawn(async move {
            let result = s.resolve(&push, &topic, &owner, &by, unrecorded).await;
            metrics::signed_resolution(result.as_str());
            drop(place);
        });
    }

    async fn resolve(
        &self,
        push: &SignedPush,
        topic: &str,
        owner: &str,
        by: &str,
        mut unrecorded: Vec<Update>,
    ) -> Resolution {
        let give_up = Instant::now() + Duration::from_secs(crate::policy::STALENESS_S);
        let mut pause = Duration::from_millis(100);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            if Instant::now() >= give_up {
                tracing::error!(
                    push_id = %push.request_id(),
                    "a signed push could not be settled within the staleness window: its readers settle it"
                );
                return Resolution::Abandoned;
            }
            let now = self.now_ms();
            if !unrecorded.is_empty() {
                let recorded = self
                    .store()
                    .receipts()
                    .update(
                        push.request_id(),
                        &unrecorded,
                        Guard::Always,
                        now,
                        self.settings.receipt_ttl_ms,
                    )
                    .await;
                match recorded {
                    Ok(_) => unrecorded.clear(),
                    Err(_) => continue,
                }
            }
            let began = Instant::now();
            let r = match self.begin(push, topic, owner, by, now).await {
                Err(_) => continue,
                Ok(Begun::New(r))
                | Ok(Begun::Replay {
                    receipt: r,
                    owned: true,
                }) => r,
                // Nothing accepted any more, another holder delivers, or the id was taken.
                Ok(_) => return Resolution::Settled,
            };
            // Its own push: nothing of it was admitted before (the lost reply came first, or
            // too little of the lease was left to send).
            match deliver(self, push, topic, r, began, false).await {
                (_, None) => return Resolution::Delivered,
                (_, Some(left)) => unrecorded = left,
            }
        }
    }
}

/// Creates `push`'s receipt on `store` with `claim` bidding for its lease, or finds the one
/// its id has: the one store call that begins a signed push (the benchmark's store part
/// makes the same call). `by` is the signer as the receipt records it
/// ([`receipt::recorded_signer`]).
pub(crate) async fn begin_receipt(
    store: &Store,
    push: &SignedPush,
    topic: &str,
    by: &str,
    claim: &Claim<'_>,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<Begun, StoreError> {
    let targets: Vec<String> = push.targets().iter().map(|t| t.receipt_key()).collect();
    store
        .receipts()
        .begin(
            push.request_id(),
            push.canonical_hash(),
            by,
            topic,
            &targets,
            claim,
            now_ms,
            ttl_ms,
        )
        .await
}

/// The `accepted` targets of `r` through the delivery core at once (the lease held since
/// `began`; `taken` when it was taken over from another owner, see [`Context::retake`]);
/// the receipt with their first outcomes, and `Some(outcomes not recorded)` when something
/// is left for [`Signed::resolve`]: outcomes the store did not take, or targets not sent
/// because too little of the lease was left.
async fn deliver(
    s: &Signed,
    push: &SignedPush,
    topic: &str,
    fresh: Receipt,
    began: Instant,
    taken: bool,
) -> (Receipt, Option<Vec<Update>>) {
    // The receipt holds the targets in request order (the same request: the same hash),
    // with their keys already computed.
    let accepted: Vec<(usize, String)> = fresh
        .targets
        .iter()
        .enumerate()
        .filter(|(i, t)| t.state == TargetState::Accepted && *i < push.targets().len())
        .map(|(i, t)| (i, t.key.clone()))
        .collect();
    if accepted.is_empty() {
        return (fresh, None);
    }
    // A send must end inside the lease, or a taker could send the same target again.
    let lease = Duration::from_millis(s.settings.lease_ms.max(0) as u64);
    if began.elapsed() + s.delivery.send_bound() >= lease {
        return (fresh, Some(Vec::new()));
    }
    let topic = (Some(topic) != s.settings.default_topic.as_deref()).then(|| topic.to_owned());
    let one = |(i, key): (usize, String)| {
        let alert = push.alert(i);
        let ctx = Context {
            topic: topic.clone(),
            receipt: Some((push.request_id().to_owned(), key.clone())),
            shared: true,
            retake: taken,
        };
        let delivery = s.delivery.clone();
        async move { (key, delivery.handle_with(&alert, &ctx).await) }
    };
    let mut done = Vec::with_capacity(accepted.len());
    if let [only] = accepted.as_slice() {
        done.push(one(only.clone()).await);
    } else {
        // Every target at once.
        let mut set = tokio::task::JoinSet::new();
        for target in accepted {
            set.spawn(one(target));
        }
        while let Some(d) = set.join_next().await {
            if let Ok(d) = d {
                done.push(d);
            }
        }
    }
    let mut updates = Vec::with_capacity(done.len());
    for (target, outcome) in done {
        let (state, detail) = receipt::state_of(&outcome);
        metrics::signed_target(state.as_str());
        updates.push(Update {
            target,
            state,
            detail,
        });
    }
    let now = s.now_ms();
    let mut r = fresh;
    let held = r.events.last().map_or(0, |e| e.sequence);
    let mut left = None;
    for attempt in 0..2 {
        match s
            .store()
            .receipts()
            .update(
                push.request_id(),
                &updates,
                Guard::Always,
                now,
                s.settings.receipt_ttl_ms,
            )
            .await
        {
            // The store held the receipt as this replica does: the same changes give the
            // same receipt, so it is rendered here without reading it back.
            Ok(Updated::Applied(before)) if before == held => break,
            // Something else changed it meanwhile (a retry could): read it.
            Ok(Updated::Applied(_)) => {
                match s.store().receipts().get(push.request_id(), now).await {
                    Ok(Some(stored)) => return (stored, None),
                    _ => break,
                }
            }
            Ok(_) => break,
            Err(e) if attempt == 0 => {
                tracing::warn!(error = %e, "recording a signed push's outcomes failed; retrying once")
            }
            Err(e) => {
                tracing::warn!(error = %e, "recording a signed push's outcomes failed: retried in the background until the store takes them");
                left = Some(updates.clone());
            }
        }
    }
    crate::store::receipts::update(&mut r, &updates, now);
    (r, left)
}

/// The checks of a signed read, in SIGNED.md's order: the header (401 `unauthorized`), the
/// signer (403), the signature (401 `bad_signature`), freshness (422), the push (404), its
/// signer (403 `forbidden`).
/// The signer a read is signed by (its key id and key, as receipts record them), checked:
/// one well-formed `Authorization`, an
/// active signer, a signature that verifies, a fresh `ts`. Costs no store round trip while
/// the signer is cached, so an unauthenticated read never reaches the receipt or a
/// subscription.
async fn authenticate_read(
    s: &Signed,
    headers: &HeaderMap,
    path_and_query: &str,
) -> Result<String, ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().map(|v| v.as_bytes());
    if values.next().is_some() {
        return Err(ApiError::unauthorized(
            "one Authorization header is expected",
        ));
    }
    let auth =
        ReadAuthorization::parse(value).map_err(|e| ApiError::unauthorized(e.to_string()))?;
    let known = signer(s, auth.key_id()).await?;
    verified(auth.verify(&known.key, "GET", path_and_query))?;
    let now = s.now_ms();
    sig::check_fresh(auth.ts_ms(), now.max(0) as u64).map_err(|_| ApiError::stale("ts"))?;
    Ok(known.recorded.clone())
}

/// Push `id`'s receipt, for the signer `by` (as [`receipt::recorded_signer`] writes it) that
/// created it (404 when there is none, 403 when another signer, or the same key id under
/// another key, created it), with abandoned targets settled.
async fn receipt_for(s: &Signed, by: &str, id: &str) -> Result<Receipt, ApiError> {
    let now = s.now_ms();
    let r = s
        .store()
        .receipts()
        .get(id, now)
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(|| ApiError::not_found("no such push").with_push(id))?;
    if !receipt::same_signer(&r.signer, by) {
        return Err(ApiError::forbidden("another signer created this push").with_push(id));
    }
    Ok(s.abandonment().settle(s.store(), r, now).await)
}

/// A read's admission and authentication: the source's bucket (429), then
/// [`authenticate_read`].
async fn admit_read(s: &Signed, req: Request) -> Result<(Request, String), ApiError> {
    let (parts, body) = req.into_parts();
    s.admission.take(&parts, s.store(), s.now_ms()).await?;
    let req = Request::from_parts(parts, body);
    let key_id = authenticate_read(s, req.headers(), &path_and_query(&req)).await?;
    Ok((req, key_id))
}

fn path_and_query(req: &Request) -> String {
    req.uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned())
}

async fn read(State(s): State<Arc<Signed>>, Path(id): Path<String>, req: Request) -> Response {
    let req = match s.read_at_home(req).await {
        Ok(req) => req,
        Err(resp) => return resp,
    };
    let started = Instant::now();
    let read = async {
        let (_, key_id) = admit_read(&s, req).await?;
        receipt_for(&s, &key_id, &id).await
    };
    match read.await {
        Ok(r) => {
            metrics::receipt_read(ReadKind::Receipt.as_str());
            finish(
                Route::Receipt,
                Code::Ok,
                started,
                json(StatusCode::OK, &receipt::render(&r)),
            )
        }
        Err(e) => finish(Route::Receipt, e.code, started, e.into_response()),
    }
}

/// Where a stream starts: `after=` in the query wins over `Last-Event-ID`; default 0.
fn resume_point(req: &Request) -> Result<u64, ApiError> {
    let from_query = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("after="))
            .map(str::to_owned)
    });
    let from_header = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match from_query.or(from_header) {
        None => Ok(0),
        Some(v) => v.trim().parse().map_err(|_| {
            ApiError::invalid("after (or Last-Event-ID) must be an event sequence number")
        }),
    }
}

async fn events(State(s): State<Arc<Signed>>, Path(id): Path<String>, req: Request) -> Response {
    let req = match s.read_at_home(req).await {
        Ok(req) => req,
        Err(resp) => return resp,
    };
    let started = Instant::now();
    let opened = async {
        let (req, key_id) = admit_read(&s, req).await?;
        let after = resume_point(&req)?;
        // Authenticated, then subscribed, then read: nothing published in between is
        // missed, and an unauthenticated caller never costs a subscription.
        let sub = s
            .store()
            .fanout()
            .subscribe(&s.store().receipts().events_channel(&id))
            .await
            .map_err(|e| unavailable(&e))?;
        let receipt = receipt_for(&s, &key_id, &id).await?;
        Ok::<_, ApiError>((after, sub, receipt))
    };
    let (after, sub, receipt) = match opened.await {
        Ok(o) => o,
        Err(e) => return finish(Route::Events, e.code, started, e.into_response()),
    };
    metrics::receipt_read(ReadKind::Events.as_str());
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    tokio::spawn(stream_events(s.clone(), id, receipt, after, sub, tx));
    let mut rx = rx;
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|o| o.map(Ok::<_, std::convert::Infallible>))
    });
    let resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEPALIVE).text("keepalive"))
        .into_response();
    finish(Route::Events, Code::Ok, started, resp)
}

fn sse(e: &Event) -> SseEvent {
    SseEvent::default()
        .id(e.sequence.to_string())
        .event(e.kind.as_str())
        .data(receipt::event(e).to_string())
}

/// Sends the events after `after`, then new ones as any replica produces them, until the
/// `settled` event has gone out or the client leaves. A gap in the sequence, or a resync of
/// the fan-out, re-reads the receipt, so no event is skipped.
async fn stream_events(
    s: Arc<Signed>,
    id: String,
    first: Receipt,
    after: u64,
    mut sub: crate::store::fanout::Subscription,
    tx: tokio::sync::mpsc::Sender<SseEvent>,
) {
    let _open = metrics::EventStreamGuard::open();
    let mut last = after;
    match send_from(&tx, &first, &mut last).await {
        Sent::Ended => return,
        Sent::More => {}
    }
    if first.settled {
        // Resumed after the settled event: nothing more will come.
        return;
    }
    let mut resyncs = s.store().fanout().resyncs();
    // Only reconnects from now on count.
    resyncs.borrow_and_update();
    let mut resyncing = true;
    // A target a stopped replica left `accepted` is settled once its bound has passed
    // ([`super::abandoned`]); until then the check costs no store round trip.
    let abandonment = s.abandonment();
    let mut abandoned_at = abandonment.deadline(&first);
    let mut check = tokio::time::interval(ABANDON_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let reread = tokio::select! {
            m = sub.recv() => match m {
                None => return,
                Some(payload) => {
                    let text = String::from_utf8_lossy(&payload);
                    let events: Vec<Event> = text.lines().filter_map(Event::decode).collect();
                    let mut gap = false;
                    let mut done = false;
                    let from = last;
                    for e in events.iter().filter(|e| e.sequence > from) {
                        if e.sequence != last + 1 {
                            gap = true;
                            break;
                        }
                        if tx.send_timeout(sse(e), STREAM_STALL).await.is_err() {
                            return;
                        }
                        last = e.sequence;
                        if e.kind == EventKind::Settled {
                            done = true;
                            break;
                        }
                    }
                    if done {
                        return;
                    }
                    gap
                }
            },
            r = resyncs.changed(), if resyncing => match r {
                Ok(()) => true,
                Err(_) => { resyncing = false; false }
            },
            _ = check.tick(), if abandoned_at.is_some() => {
                if abandoned_at.is_some_and(|at| s.now_ms() > at) {
                    let now = s.now_ms();
                    let Ok(Some(r)) = s.store().receipts().get(&id, now).await else {
                        continue;
                    };
                    let r = abandonment.settle(s.store(), r, now).await;
                    abandoned_at = abandonment.deadline(&r);
                    if let Sent::Ended = send_from(&tx, &r, &mut last).await {
                        return;
                    }
                }
                false
            },
            _ = tx.closed() => return,
        };
        if reread {
            let Ok(Some(r)) = s.store().receipts().get(&id, s.now_ms()).await else {
                continue;
            };
            if let Sent::Ended = send_from(&tx, &r, &mut last).await {
                return;
            }
        }
    }
}

enum Sent {
    /// The settled event went out, or the client left.
    Ended,
    /// More may come.
    More,
}

/// Sends the receipt's events after `last`.
async fn send_from(tx: &tokio::sync::mpsc::Sender<SseEvent>, r: &Receipt, last: &mut u64) -> Sent {
    let from = *last;
    for e in r.events.iter().filter(|e| e.sequence > from) {
        if tx.send_timeout(sse(e), STREAM_STALL).await.is_err() {
            return Sent::Ended;
        }
        *last = e.sequence;
        if e.kind == EventKind::Settled {
            return Sent::Ended;
        }
    }
    Sent::More
}
