//! `POST /v2/pushes`: a signed push accepted, or refused by the first check that fails.
//!
//! A push is accepted in SIGNED.md's order, the first failing check answering, after two
//! checks at the door that cost nothing per body ([`crate::admission`], shared with v1): the
//! relay-wide in-flight limit (503 `unavailable`) and the source's bucket (429
//! `rate_limited`, reads too). Then the body's size (413) and schema (400), the signer (403 unknown or revoked), the signature (401),
//! the topic binding (403), freshness (422), the request id (409 with another hash; an exact
//! replay answers 200 with the receipt as it stands and sends nothing), the store (503).
//! A new push then runs every target through the v1 policy and APNs path concurrently and
//! answers 201 once each target has its first outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, Code};
use super::front::{finish, json, signer, unavailable, verified, Signed};
use super::labels::Route;
use super::receipt;
use super::receipt::lifecycle::{self as receipts, Begun};
use super::request::{SignedPush, MAX_BODY_BYTES};
use super::settle::deliver;
use super::sig::{self};
use crate::body::BodyError;
use crate::metrics;

pub(super) async fn push(State(s): State<Arc<Signed>>, req: Request) -> Response {
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
    // Kept beside the lease, sealed: whoever finds the lease lapsed can deliver the push.
    let kept: Option<Arc<[u8]>> = s.seal_request(&id, &body).map(Arc::from);
    let begun = match s
        .begin(&push, &topic, &owner, &by, now, kept.as_deref())
        .await
    {
        Ok(b) => b,
        Err(e) => {
            // A reply that did not arrive is not a command that did not run: Redis may yet
            // run (or have run) the begin, and with it this request's lease. This replica
            // keeps the push and settles it in the background, so the client's retry (a
            // replay) finds it delivered or being delivered, never abandoned.
            let answer = with_id(unavailable(&e));
            s.resolve_later(push, topic, owner, by, Vec::new(), kept);
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
            s2.resolve_later(push, topic, owner, by, unrecorded, kept);
        }
        r
    })
    .await
    .map_err(|_| ApiError::unavailable().with_push(&id2))?;
    Ok(Accepted::Here(code, json(status, &receipt::render(&r))))
}
