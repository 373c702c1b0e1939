//! The admin API (SIGNED.md, "Enrolment and the admin API"), served on the Unix socket and,
//! opt-in, on loopback TCP ([`super::transport`]); never on the public listener.
//!
//! | Request | Answer |
//! | --- | --- |
//! | `PUT /admin/v1/signers/<keyId>` `{"publicKey":..,"topics":[..]}` | 201 enrolled, 200 updated |
//! | `GET /admin/v1/signers` | 200 `{"signers":[..]}` |
//! | `POST /admin/v1/signers/<keyId>/revoke` | 200; 404 for an unknown key id |
//! | `GET /admin/v1/pushes/<pushId>` | 200 any receipt; 404 |
//! | `POST /admin/v1/push` (socket only) | the v1 answer with `Deprecation` (and `Sunset`) |
//!
//! Errors use the `/v2` envelope. Each change is published on the fan-out, so every
//! replica's signer cache drops the entry within the fan-out's delay; this replica's is
//! dropped at once.
//!
//! Store round trips: one per request (an enrolment, a revocation, a list, a receipt); a
//! receipt with a target abandoned by a stopped replica costs one more, to settle it.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Router};
use serde_json::{json, Value};

use super::transport::Transport;
use crate::clock::Clock;
use crate::signed::abandoned::Abandonment;
use crate::signed::enrolment::{Enrolled, Enrolment, Signer};
use crate::signed::error::{only, ApiError, GET, POST, PUT};
use crate::signed::request::is_valid_topic;
use crate::signed::sig::{is_valid_key_id, KeyError, PublicKey};
use crate::signed::signers::Signers;
use crate::store::{Store, StoreError};
use crate::v1::V1;

/// Largest enrolment body.
const MAX_BODY: usize = 64 * 1024;
/// Topics one signer may be bound to.
const MAX_TOPICS: usize = 100;

/// What the admin API works on.
#[derive(Debug, Clone)]
pub struct AdminApi {
    store: Arc<Store>,
    signers: Arc<Signers>,
    v1: Arc<V1>,
    clock: Clock,
    abandonment: Abandonment,
    /// Several regions: signer writes go to the signer's home region.
    regions: Option<Arc<crate::region::Regions>>,
}

impl AdminApi {
    /// The API over the store, this replica's signer cache and the v1 front-end.
    pub fn new(
        store: Arc<Store>,
        signers: Arc<Signers>,
        v1: Arc<V1>,
        clock: Clock,
        abandonment: Abandonment,
    ) -> Self {
        Self {
            store,
            signers,
            v1,
            clock,
            abandonment,
            regions: None,
        }
    }

    /// Sends signer writes to the signer's home region (`RELAY_REGION`).
    pub fn with_regions(mut self, regions: Option<Arc<crate::region::Regions>>) -> Self {
        self.regions = regions;
        self
    }
}

/// A signer write (`/admin/v1/signers/<key id>...`) goes to the signer's home region, where
/// its record lives; the home unreachable is 503 `unavailable`.
async fn at_home(
    State(api): State<Arc<AdminApi>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(regions) = &api.regions else {
        return next.run(req).await;
    };
    let key_id = req
        .uri()
        .path()
        .trim_start_matches("/admin/v1/signers/")
        .split('/')
        .next()
        .unwrap_or("")
        .to_owned();
    match regions
        .relay(
            "admin",
            key_id.as_bytes(),
            req,
            MAX_BODY,
            std::time::Duration::from_secs(30),
        )
        .await
    {
        crate::region::Relay::Here(req) => next.run(req).await,
        crate::region::Relay::Answered(resp) => resp,
        crate::region::Relay::Unreachable => ApiError::unavailable().into_response(),
        crate::region::Relay::Unreadable(_) => ApiError::too_large(MAX_BODY).into_response(),
    }
}

/// The admin API's routes.
pub fn routes(api: AdminApi) -> Router {
    let api = Arc::new(api);
    let homed = |m: axum::routing::MethodRouter<Arc<AdminApi>>| {
        m.route_layer(axum::middleware::from_fn_with_state(api.clone(), at_home))
    };
    Router::new()
        .route("/admin/v1/signers", get(list).fallback(only(GET)))
        .route(
            "/admin/v1/signers/{key_id}",
            homed(put(enroll).fallback(only(PUT))),
        )
        .route(
            "/admin/v1/signers/{key_id}/revoke",
            homed(post(revoke).fallback(only(POST))),
        )
        .route("/admin/v1/pushes/{id}", get(receipt).fallback(only(GET)))
        .route("/admin/v1/push", post(push).fallback(only(POST)))
        .fallback(|| async { ApiError::not_found("no such admin route").into_response() })
        .with_state(api)
}

fn json(status: StatusCode, v: &Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn unavailable(e: &StoreError) -> ApiError {
    tracing::warn!(error = %e, "admin API: the store did not answer");
    ApiError::unavailable()
}

/// A signer as the API shows it.
fn render(s: &Signer) -> Value {
    let mut v = json!({
        "keyId": s.key_id,
        "publicKey": s.public_key,
        "topics": s.topics,
        "state": s.state(),
        "createdAtMs": s.created_ms,
        "updatedAtMs": s.updated_ms,
    });
    if let Some(at) = s.revoked_ms {
        v["revokedAtMs"] = Value::from(at);
    }
    v
}

/// An enrolment request's body, as read (the key id is the path's).
struct EnrolmentBody {
    public_key: String,
    topics: Vec<String>,
}

/// The enrolment body, checked: exactly `publicKey` (a 32-byte key in standard base64) and
/// `topics` (1 to 100 distinct topics). Messages name the member, never echo a value.
fn enrolment(body: &[u8]) -> Result<EnrolmentBody, ApiError> {
    const SHAPE: &str =
        "the body must be {\"publicKey\":\"<base64 of 32 bytes>\",\"topics\":[\"<topic>\",...]}";
    let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else {
        return Err(ApiError::invalid(SHAPE));
    };
    if let Some(other) = o.keys().find(|k| *k != "publicKey" && *k != "topics") {
        let name: String = other.chars().take(64).collect();
        return Err(ApiError::invalid(format!(
            "unknown member {name:?}: {SHAPE}"
        )));
    }
    const KEY_SHAPE: &str =
        "publicKey must be standard base64 (with padding) of a 32-byte Ed25519 public key";
    let public_key = match o.get("publicKey") {
        Some(Value::String(k)) => match PublicKey::from_base64(k) {
            Ok(_) => k.clone(),
            Err(e @ KeyError::PublicKeyWeak) => return Err(ApiError::invalid(e.to_string())),
            Err(_) => return Err(ApiError::invalid(KEY_SHAPE)),
        },
        _ => return Err(ApiError::invalid(KEY_SHAPE)),
    };
    let topics: Vec<String> = match o.get("topics") {
        Some(Value::Array(a)) if (1..=MAX_TOPICS).contains(&a.len()) => a
            .iter()
            .map(|t| match t {
                Value::String(t) if is_valid_topic(t) => Ok(t.clone()),
                _ => Err(ApiError::invalid(
                    "each topic must be a string of 1 to 255 characters without whitespace",
                )),
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::invalid(
                "topics must be an array of 1 to 100 topics",
            ))
        }
    };
    let mut seen = std::collections::HashSet::new();
    if !topics.iter().all(|t| seen.insert(t.as_str())) {
        return Err(ApiError::invalid("topics must be distinct"));
    }
    Ok(EnrolmentBody { public_key, topics })
}

fn key_id(key_id: &str) -> Result<(), ApiError> {
    if is_valid_key_id(key_id) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "the key id must be ed25519: then 1 to 64 of A-Z a-z 0-9 . _ -",
        ))
    }
}

/// A body that could not be read: 413 when it ran over the limit, 400 when the client broke
/// it off or sent it malformed.
fn body_error(e: axum::Error) -> ApiError {
    let over =
        std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
    if over {
        ApiError::too_large(MAX_BODY)
    } else {
        ApiError::invalid("the request body could not be read")
    }
}

async fn enroll(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    key_id(&id)?;
    let body = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(body_error)?;
    let e = enrolment(&body)?;
    let (signer, how) = api
        .store
        .signers()
        .enroll(
            &Enrolment {
                key_id: &id,
                public_key: &e.public_key,
                topics: &e.topics,
            },
            api.clock.now_ms(),
        )
        .await
        .map_err(|e| unavailable(&e))?;
    api.signers.invalidate(&id);
    tracing::info!(key_id = %id, topics = signer.topics.len(), created = how == Enrolled::Created, "signer enrolled");
    let status = match how {
        Enrolled::Created => StatusCode::CREATED,
        Enrolled::Updated => StatusCode::OK,
    };
    Ok(json(status, &render(&signer)))
}

async fn list(
    State(api): State<Arc<AdminApi>>,
    hop: Option<Extension<crate::region::Hop>>,
) -> Result<Response, ApiError> {
    let signers = api
        .store
        .signers()
        .list()
        .await
        .map_err(|e| unavailable(&e))?;
    let mut list: Vec<Value> = signers.iter().map(render).collect();
    // Several regions: each keeps its own signers; the list is every region's.
    if let (Some(regions), None) = (&api.regions, hop) {
        for answer in regions.ask_every_peer("admin", "/admin/v1/signers").await {
            let Some((200, body)) = answer else {
                return Err(ApiError::unavailable());
            };
            let theirs: Value =
                serde_json::from_slice(&body).map_err(|_| ApiError::unavailable())?;
            if let Some(more) = theirs["signers"].as_array() {
                list.extend(more.iter().cloned());
            }
        }
        list.sort_by(|a, b| a["keyId"].as_str().cmp(&b["keyId"].as_str()));
    }
    Ok(json(StatusCode::OK, &json!({ "signers": list })))
}

async fn revoke(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    key_id(&id)?;
    let signer = api
        .store
        .signers()
        .revoke(&id, api.clock.now_ms())
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(|| ApiError::not_found("no such signer"))?;
    api.signers.invalidate(&id);
    tracing::info!(key_id = %id, "signer revoked");
    Ok(json(StatusCode::OK, &render(&signer)))
}

async fn receipt(
    State(api): State<Arc<AdminApi>>,
    Path(id): Path<String>,
    hop: Option<Extension<crate::region::Hop>>,
) -> Result<Response, ApiError> {
    let now = api.clock.now_ms();
    let found = api
        .store
        .receipts()
        .get(&id, now)
        .await
        .map_err(|e| unavailable(&e).with_push(&id))?;
    // Several regions: a receipt lives in its signer's home, which its id does not name;
    // not here, the peers are asked (a hop is answered from its own store only).
    let r = match (found, &api.regions, hop) {
        (Some(r), _, _) => r,
        (None, Some(regions), None) => {
            let path = format!("/admin/v1/pushes/{id}");
            let mut unreachable = false;
            for answer in regions.ask_every_peer("admin", &path).await {
                match answer {
                    Some((200, body)) => {
                        let mut resp = (StatusCode::OK, body).into_response();
                        resp.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        );
                        return Ok(resp);
                    }
                    Some((404, _)) => {}
                    _ => unreachable = true,
                }
            }
            return Err(if unreachable {
                ApiError::unavailable().with_push(&id)
            } else {
                ApiError::not_found("no such push").with_push(&id)
            });
        }
        (None, _, _) => return Err(ApiError::not_found("no such push").with_push(&id)),
    };
    let r = api.abandonment.settle(&api.store, r, now).await;
    crate::metrics::receipt_read(crate::signed::labels::ReadKind::Admin.as_str());
    Ok(json(StatusCode::OK, &crate::signed::receipt::render(&r)))
}

async fn push(
    State(api): State<Arc<AdminApi>>,
    transport: Option<Extension<Transport>>,
    req: Request,
) -> Response {
    match transport.map(|t| t.0) {
        Some(Transport::Socket) => crate::v1::intake::local(&api.v1, req).await,
        _ => ApiError::forbidden(
            "unsigned pushes are taken on the admin socket only; over TCP, send signed pushes to /v2/pushes",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    async fn read(body: Body) -> Result<axum::body::Bytes, ApiError> {
        axum::body::to_bytes(body, MAX_BODY)
            .await
            .map_err(body_error)
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_and_a_broken_one_400() {
        assert!(read(Body::from(vec![b'x'; MAX_BODY])).await.is_ok());

        let e = read(Body::from(vec![b'x'; MAX_BODY + 1]))
            .await
            .unwrap_err();
        assert_eq!(e.into_response().status(), StatusCode::PAYLOAD_TOO_LARGE);

        // A client that breaks off mid-body: the stream fails, it is not over the limit.
        let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> = vec![
            Ok(axum::body::Bytes::from_static(b"{\"publicKey\"")),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset",
            )),
        ];
        let broken = Body::from_stream(futures_util::stream::iter(chunks));
        let e = read(broken).await.unwrap_err();
        assert_eq!(e.into_response().status(), StatusCode::BAD_REQUEST);
    }
}
