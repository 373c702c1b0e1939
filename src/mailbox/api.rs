//! The mailbox router and its HTTP handlers. Every request is decided in this order: the
//! path (the relay's one 404 for an unknown app, a malformed id or seq, an unknown path or
//! an extension the app has not enabled), the method (405), the bearer (401), the
//! request's own shape (400, 413), then one store round trip ([`Mailboxes::run`]) that
//! checks the bearer's hash (404 no such mailbox, 403 another bearer's), takes the bucket's
//! token (429) and does the operation.
//!
//! The router picks a handler by the path's shape and the method; a layer on every handler
//! (and on every path's 405) checks the path first ([`path::read`]), then counts and logs
//! the request under its [`Route`]. The handlers' extractors are the remaining checks, in
//! order: [`Target`], [`Bearer`], then the query ([`Query`]) or the headers and the body.
//!
//! Store round trips: one per request; a watch or signal upgrade costs one more (the
//! fan-out subscription, taken before the check so nothing published in between is
//! missed); a push after a write costs none unless the service says the token is dead
//! (then one, in the background, to forget the registration).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any_service, delete, get, head, put, MethodRouter};
use axum::Router;
use base64::Engine;

use super::auth::Bearer;
use super::error::MailboxError;
use super::front::Mailboxes;
use super::path::{self, Place, Target};
use super::push::{self, Notify};
use super::query::{ListQuery, PruneQuery, Query};
use super::route::{self, Route};
use super::state::{Answer, Dir, Name, Op, PushDecision};
use super::{signal, watch};
use crate::body::BodyError;
use crate::metrics;

/// Time a client has to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest push registration body.
const MAX_REGISTRATION_BYTES: usize = 16 * 1024;

/// The mailbox paths: one per shape, under `/v1/<app>/mailbox/<id>`.
const MAILBOX: &str = "/v1/{app}/mailbox/{id}";
const DIRECTION: &str = "/v1/{app}/mailbox/{id}/{dir}";
const ENVELOPE: &str = "/v1/{app}/mailbox/{id}/{dir}/{seq}";
const WATCH: &str = "/v1/{app}/mailbox/{id}/{dir}/watch";
const PUSH: &str = "/v1/{app}/mailbox/{id}/{dir}/push";
const SIGNAL: &str = "/v1/{app}/mailbox/{id}/signal/{side}";
const ICE: &str = "/v1/{app}/mailbox/{id}/ice";

type S = Arc<Mailboxes>;

/// Every route under `/v1/`; any other path there is the one 404. (The routes are a router
/// of their own behind `/v1/{*rest}`: a catch-all cannot sit beside `{app}` in one router,
/// and the relay's own 404 answers every path outside `/v1/`.)
pub fn router(m: Arc<Mailboxes>) -> Router {
    Router::new().route("/v1/{*rest}", any_service(mailbox_paths(m)))
}

fn mailbox_paths(m: Arc<Mailboxes>) -> Router {
    let on = |route, methods| checked::<path::Whole>(&m, route, methods);
    let mailbox = on(Route::Claim, put(claim).fallback(refused("PUT, DELETE")))
        .merge(on(Route::Erase, delete(erase)));
    let on = |route, methods| checked::<path::Direction>(&m, route, methods);
    let direction = on(
        Route::List,
        get(list).fallback(refused("GET, HEAD, DELETE")),
    )
    .merge(on(Route::Head, head(head_of)))
    .merge(on(Route::Prune, delete(prune)));
    let on = |route, methods| checked::<path::Envelope>(&m, route, methods);
    // HEAD is the GET's, without the body.
    let envelope = on(Route::Get, get(get_one).fallback(refused("GET, HEAD, PUT")))
        .merge(on(Route::Put, put(store)));
    let on = |route, methods| checked::<path::Push>(&m, route, methods);
    let push = on(
        Route::Register,
        put(register).fallback(refused("PUT, DELETE")),
    )
    .merge(on(Route::Unregister, delete(unregister)));
    // The GET-only paths refuse HEAD too (axum would answer it with the GET).
    let get_only = |h: MethodRouter<S>| h.head(refused("GET")).fallback(refused("GET"));
    let watch = checked::<path::Watch>(&m, Route::Watch, get_only(get(watch::upgrade)));
    let signal = checked::<path::Signal>(&m, Route::Signal, get_only(get(signal::upgrade)));
    let ice = checked::<path::Ice>(&m, Route::Ice, get_only(get(ice)));
    Router::new()
        .route(MAILBOX, mailbox)
        .route(DIRECTION, direction)
        .route(ENVELOPE, envelope)
        .route(WATCH, watch)
        .route(PUSH, push)
        .route(SIGNAL, signal)
        .route(ICE, ice)
        .fallback(not_found)
        .with_state(m)
}

/// `methods` behind the path's check, counted and logged as `route`.
fn checked<P: Place>(
    m: &Arc<Mailboxes>,
    route: Route,
    methods: MethodRouter<S>,
) -> MethodRouter<S> {
    methods.layer(middleware::from_fn_with_state(
        (m.clone(), route),
        observe::<P>,
    ))
}

/// The path's check (the one 404, counted as `not_found`, never logged), then the request,
/// counted and logged under `route` with its status and latency. The checked [`Target`] is
/// left on the request for the handler.
async fn observe<P: Place>(
    State((m, route)): State<(Arc<Mailboxes>, Route)>,
    mut req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let Some(target) = path::read::<P>(req.uri().path(), &m.settings.apps) else {
        metrics::mailbox_request(route::NOT_FOUND, 404);
        return MailboxError::NotFound.into_response();
    };
    // The log names the mailbox by a prefix of its name (a hash): never the id.
    let mailbox = target.name.as_str().get(..8).unwrap_or_default().to_owned();
    req.extensions_mut().insert(target);
    // Several regions: a mailbox is decided in its home region, or not at all.
    if let Some(regions) = &m.regions {
        let key = home_key(req.uri().path());
        // A watch or signal socket: upgraded at home first, then joined here.
        let is_hop = req.extensions().get::<crate::region::Hop>().is_some();
        if !is_hop && is_upgrade(&req) {
            match regions.route(key.as_bytes()) {
                crate::region::Route::Here => {}
                crate::region::Route::Down(peer) => {
                    metrics::region_hop(&peer.name, "mailbox", "skipped_down", Duration::ZERO);
                    metrics::mailbox_request(route.as_str(), 503);
                    return MailboxError::Unavailable.into_response();
                }
                crate::region::Route::Peer(peer) => {
                    return match regions.proxy_socket(peer, "mailbox", req).await {
                        Some(resp) => resp,
                        None => {
                            metrics::mailbox_request(route.as_str(), 503);
                            MailboxError::Unavailable.into_response()
                        }
                    };
                }
            }
        }
        let max = m.settings.max_envelope_bytes.max(MAX_REGISTRATION_BYTES);
        match regions
            .relay("mailbox", key.as_bytes(), req, max, BODY_TIMEOUT)
            .await
        {
            crate::region::Relay::Here(r) => req = r,
            crate::region::Relay::Answered(resp) => return resp,
            crate::region::Relay::Unreachable => {
                metrics::mailbox_request(route.as_str(), 503);
                return MailboxError::Unavailable.into_response();
            }
            crate::region::Relay::Unreadable(e) => {
                let e = match e {
                    BodyError::TooLarge => MailboxError::TooLarge,
                    BodyError::TimedOut | BodyError::Unreadable => MailboxError::BadRequest,
                };
                metrics::mailbox_request(route.as_str(), e.status().as_u16());
                return e.into_response();
            }
        }
    }
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    metrics::mailbox_request(route.as_str(), status);
    tracing::info!(
        route = route.as_str(),
        status,
        mailbox,
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        "mailbox"
    );
    resp
}

/// Whether a request asks for a WebSocket.
fn is_upgrade(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A mailbox's key for its home region, `<app>/<id>`, from a path the route's check accepted
/// (`/v1/<app>/mailbox/<id>/...`).
fn home_key(path: &str) -> String {
    let mut parts = path.trim_start_matches('/').split('/');
    let (_, app, _, id) = (parts.next(), parts.next(), parts.next(), parts.next());
    format!("{}/{}", app.unwrap_or(""), id.unwrap_or(""))
}

/// A path under `/v1/` of no route.
async fn not_found() -> MailboxError {
    metrics::mailbox_request(route::NOT_FOUND, 404);
    MailboxError::NotFound
}

/// The 405 of a path that takes `allow` (its check comes first, in the layer).
fn refused(allow: &'static str) -> impl Handler<((),), S> {
    move || async move { MailboxError::MethodNotAllowed(allow) }
}

/// `X-Relay-Notify` of a store, if given (400 if malformed).
struct NotifyHeader(Option<Notify>);

impl<T: Send + Sync> FromRequestParts<T> for NotifyHeader {
    type Rejection = MailboxError;

    async fn from_request_parts(parts: &mut Parts, _: &T) -> Result<Self, Self::Rejection> {
        match parts.headers.get("x-relay-notify") {
            None => Ok(NotifyHeader(None)),
            Some(v) => Notify::parse(v.as_bytes())
                .map(|n| NotifyHeader(Some(n)))
                .map_err(|_| MailboxError::BadRequest),
        }
    }
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn with_type(mut r: Response, content_type: &'static str) -> Response {
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

type Answered = Result<Response, MailboxError>;

async fn claim(State(m): State<S>, t: Target<path::Whole>, b: Bearer) -> Answered {
    Ok(match m.run(&t.name, &b, &Op::Claim).await? {
        Answer::Created => StatusCode::CREATED.into_response(),
        _ => no_content(),
    })
}

async fn erase(State(m): State<S>, t: Target<path::Whole>, b: Bearer) -> Answered {
    m.run(&t.name, &b, &Op::Erase).await?;
    Ok(no_content())
}

async fn list(
    State(m): State<S>,
    t: Target<path::Direction>,
    b: Bearer,
    Query(q): Query<ListQuery>,
) -> Answered {
    let path::Direction(dir) = t.place;
    let op = Op::List {
        dir,
        after: q.after(),
        limit: q.limit(),
    };
    let Answer::Listed {
        envelopes,
        last,
        more,
    } = m.run(&t.name, &b, &op).await?
    else {
        return Err(MailboxError::Unavailable);
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut body = String::with_capacity(
        64 + envelopes
            .iter()
            .map(|e| e.data.len() * 4 / 3 + 32)
            .sum::<usize>(),
    );
    body.push_str(r#"{"envelopes":["#);
    for (i, e) in envelopes.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(r#"{{"seq":{},"data":""#, e.seq));
        b64.encode_string(&e.data, &mut body);
        body.push_str(r#""}"#);
    }
    body.push_str(&format!(r#"],"last":{last},"more":{more}}}"#));
    Ok(with_type(
        (StatusCode::OK, body).into_response(),
        "application/json",
    ))
}

async fn head_of(State(m): State<S>, t: Target<path::Direction>, b: Bearer) -> Answered {
    let path::Direction(dir) = t.place;
    let Answer::Head { last, count } = m.run(&t.name, &b, &Op::Head { dir }).await? else {
        return Err(MailboxError::Unavailable);
    };
    let mut r = no_content();
    r.headers_mut()
        .insert("x-relay-last-seq", HeaderValue::from(last));
    r.headers_mut()
        .insert("x-relay-count", HeaderValue::from(count));
    Ok(r)
}

async fn prune(
    State(m): State<S>,
    t: Target<path::Direction>,
    b: Bearer,
    Query(q): Query<PruneQuery>,
) -> Answered {
    let path::Direction(dir) = t.place;
    let upto = q.upto();
    // In batches (one script call per PRUNE_BATCH envelopes): a large prune never holds
    // the store long. The first call pays the bucket's token.
    let mut answer = m.run(&t.name, &b, &Op::Prune { dir, upto }).await?;
    while answer == Answer::More {
        answer = m.run(&t.name, &b, &Op::PruneMore { dir, upto }).await?;
    }
    Ok(no_content())
}

async fn get_one(State(m): State<S>, t: Target<path::Envelope>, b: Bearer) -> Answered {
    let path::Envelope(dir, seq) = t.place;
    let Answer::Got(data) = m.run(&t.name, &b, &Op::Get { dir, seq }).await? else {
        return Err(MailboxError::Unavailable);
    };
    let data = data.ok_or(MailboxError::NotFound)?;
    Ok(with_type(
        (StatusCode::OK, data).into_response(),
        "application/octet-stream",
    ))
}

/// Reads a body of at most `max` bytes within the body timeout.
async fn body(req: Request, max: usize) -> Result<Bytes, MailboxError> {
    crate::body::read(req, max, BODY_TIMEOUT)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => MailboxError::TooLarge,
            BodyError::TimedOut | BodyError::Unreadable => MailboxError::BadRequest,
        })
}

async fn store(
    State(m): State<S>,
    t: Target<path::Envelope>,
    b: Bearer,
    NotifyHeader(notify): NotifyHeader,
    req: Request,
) -> Answered {
    let path::Envelope(dir, seq) = t.place;
    let data = body(req, m.settings.max_envelope_bytes).await?;
    if data.is_empty() {
        return Err(MailboxError::BadRequest);
    }
    // Without push= the header is accepted and ignored.
    let asked = notify.filter(|_| t.app.push.is_some());
    let op = Op::Put {
        dir,
        seq,
        data,
        notify: asked.is_some(),
    };
    match m.run(&t.name, &b, &op).await? {
        Answer::Stored(decision) => {
            if let (Some(notify), Some(topic)) = (asked, &t.app.push) {
                after_write(&m, topic, &t.id, &t.name, dir, &b, notify, decision);
            }
            Ok(StatusCode::CREATED.into_response())
        }
        Answer::Same => Ok(no_content()),
        Answer::Conflict => Err(MailboxError::Conflict),
        Answer::Full => Err(MailboxError::Full),
        _ => Err(MailboxError::Unavailable),
    }
}

/// The push a stored envelope asked for: counted when skipped, else sent in the background
/// (the PUT does not wait); a dead token's registration is forgotten.
#[allow(clippy::too_many_arguments)]
fn after_write(
    m: &Arc<Mailboxes>,
    topic: &str,
    id: &str,
    name: &Name,
    dir: Dir,
    bearer: &Bearer,
    notify: Notify,
    decision: PushDecision,
) {
    let PushDecision::Send(sealed) = decision else {
        metrics::mailbox_push("none", decision.label());
        return;
    };
    let (m, topic, id, name, bearer) = (
        m.clone(),
        topic.to_owned(),
        id.to_owned(),
        name.clone(),
        bearer.clone(),
    );
    tokio::spawn(async move {
        let Some(reg) = push::open(&bearer, &id, dir, &sealed) else {
            metrics::mailbox_push("none", "unopenable");
            return;
        };
        let label = push::service_label(reg.service());
        let Some(module) = m.modules.get(reg.service()) else {
            metrics::mailbox_push(label, "no_module");
            return;
        };
        let now_s = (m.clock.now_ms().max(0) / 1000) as u64;
        let sent = module.send(&reg, notify, &topic, now_s).await;
        metrics::mailbox_push(label, sent.outcome);
        tracing::info!(
            service = label,
            outcome = sent.outcome,
            mailbox = &name.as_str()[..8],
            "mailbox push"
        );
        if sent.forget {
            let op = Op::Forget { dir, sealed };
            if let Err(e) = m
                .store
                .mailboxes()
                .apply(
                    &super::state::Request {
                        name: &name,
                        bearer: bearer.hash(),
                        op: &op,
                        limits: m.settings.limits,
                    },
                    m.now_ms(),
                )
                .await
            {
                tracing::warn!(error = %e, "mailbox push: could not forget a dead token's registration");
            }
        }
    });
}

async fn register(State(m): State<S>, t: Target<path::Push>, b: Bearer, req: Request) -> Answered {
    let path::Push(dir) = t.place;
    let data = body(req, MAX_REGISTRATION_BYTES).await?;
    let reg = push::check(&data, &m.modules).map_err(|_| MailboxError::BadRequest)?;
    let sealed = push::seal(&b, &t.id, dir, &reg);
    m.run(&t.name, &b, &Op::Register { dir, sealed }).await?;
    Ok(no_content())
}

async fn unregister(State(m): State<S>, t: Target<path::Push>, b: Bearer) -> Answered {
    let path::Push(dir) = t.place;
    m.run(&t.name, &b, &Op::Unregister { dir }).await?;
    Ok(no_content())
}

async fn ice(State(m): State<S>, t: Target<path::Ice>, b: Bearer) -> Answered {
    // The path exists only for apps with `ice`, and start-up refuses `ice` without a
    // provider: `m.ice` is there.
    let ice = m.ice.as_ref().ok_or(MailboxError::NotFound)?;
    m.run(&t.name, &b, &Op::Ice).await?;
    let now_s = (m.now_ms() / 1000).max(0) as u64;
    let v = ice
        .servers(&t.app.name, &t.id, now_s)
        .await
        .map_err(|_| MailboxError::Upstream)?;
    Ok(with_type(
        (StatusCode::OK, v.to_string()).into_response(),
        "application/json",
    ))
}
