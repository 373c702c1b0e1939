//! `GET /v2/pushes/<id>`: a receipt read by the signer that created it, in SIGNED.md's order of
//! checks.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, Code};
use super::front::{finish, json, signer, unavailable, verified, Signed};
use super::labels::{ReadKind, Route};
use super::receipt;
use super::receipt::lifecycle::Receipt;
use super::sig::{self, ReadAuthorization};
use crate::metrics;

/// The checks of a signed read, in SIGNED.md's order: the header (401 `unauthorized`), the
/// signer (403), the signature (401 `bad_signature`), freshness (422), the push (404), its
/// signer (403 `forbidden`).
/// The signer a read is signed by (its key id and key, as receipts record them), checked:
/// one well-formed `Authorization`, an
/// active signer, a signature that verifies, a fresh `ts`. Costs no store round trip while
/// the signer is cached, so an unauthenticated read never reaches the receipt or a
/// subscription.
pub(super) async fn authenticate_read(
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
/// another key, created it), with abandoned targets taken over or settled
/// ([`Signed::recover`]).
pub(super) async fn receipt_for(s: &Arc<Signed>, by: &str, id: &str) -> Result<Receipt, ApiError> {
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
    Ok(s.recover(r, now).await)
}

/// A read's admission and authentication: the source's bucket (429), then
/// [`authenticate_read`].
pub(super) async fn admit_read(s: &Signed, req: Request) -> Result<(Request, String), ApiError> {
    let (parts, body) = req.into_parts();
    s.admission.take(&parts, s.store(), s.now_ms()).await?;
    let req = Request::from_parts(parts, body);
    let key_id = authenticate_read(s, req.headers(), &path_and_query(&req)).await?;
    Ok((req, key_id))
}

pub(super) fn path_and_query(req: &Request) -> String {
    req.uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned())
}

/// Answers a signed read on `route`: sent to its signer's home region first (whose answer
/// comes back as it is), then `answer`, timed and counted under `route` with its code.
pub(super) async fn answer_read<F, Fut>(
    s: &Signed,
    route: Route,
    req: Request,
    answer: F,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Result<Response, ApiError>>,
{
    let req = match s.read_at_home(req).await {
        Ok(req) => req,
        Err(resp) => return resp,
    };
    let started = Instant::now();
    match answer(req).await {
        Ok(resp) => finish(route, Code::Ok, started, resp),
        Err(e) => finish(route, e.code, started, e.into_response()),
    }
}

pub(super) async fn read(
    State(s): State<Arc<Signed>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    answer_read(&s, Route::Receipt, req, |req| async {
        let (_, key_id) = admit_read(&s, req).await?;
        let r = receipt_for(&s, &key_id, &id).await?;
        metrics::receipt_read(ReadKind::Receipt.as_str());
        Ok(json(StatusCode::OK, &receipt::render(&r)))
    })
    .await
}

/// Where a stream starts: `after=` in the query wins over `Last-Event-ID`; default 0.
pub(super) fn resume_point(req: &Request) -> Result<u64, ApiError> {
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
