//! The mailbox HTTP handlers. Every request is decided in this order: the path (the relay's
//! one 404 for an unknown app, a malformed id or seq, an unknown path or an extension the
//! app has not enabled), the method (405), the bearer (401), the request's own shape (400,
//! 413), then one store round trip ([`crate::store::Store::mailbox`]) that checks the
//! bearer's hash (404 no such mailbox, 403 another bearer's), takes the bucket's token
//! (429) and does the operation.
//!
//! Store round trips: one per request; a watch or signal upgrade costs one more (the
//! fan-out subscription, taken before the check so nothing published in between is
//! missed); a push after a write costs none unless the service says the token is dead
//! (then one, in the background, to forget the registration).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::auth::{self, Bearer};
use super::error::MailboxError;
use super::path::{self, Route};
use super::push::{self, Notify};
use super::{App, Mailboxes};
use crate::body::BodyError;
use crate::metrics;
use crate::store::mailbox::{Answer, Dir, Name, Op, PushDecision};

/// Time a client has to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest push registration body.
const MAX_REGISTRATION_BYTES: usize = 16 * 1024;
/// Envelopes a list answers by default, and at most.
const LIST_DEFAULT: usize = 64;
const LIST_MAX: usize = 256;

/// Every request under `/v1/`.
pub async fn dispatch(State(m): State<Arc<Mailboxes>>, req: Request) -> Response {
    let started = Instant::now();
    let path = req.uri().path().to_owned();
    let Some((app, id, route)) = path::parse(&path, &m.settings.apps) else {
        metrics::mailbox_request("not_found", 404);
        return MailboxError::NotFound.into_response();
    };
    let (app, id) = (app.clone(), id.to_owned());
    let name = Name::of(&app.name, &id);
    let method = req.method().clone();
    let (label, resp) = match (route, &method) {
        (Route::Mailbox, &Method::PUT) => ("claim", claim(&m, &name, req).await),
        (Route::Mailbox, &Method::DELETE) => ("erase", erase(&m, &name, req).await),
        (Route::Mailbox, _) => (
            "claim",
            MailboxError::MethodNotAllowed("PUT, DELETE").into_response(),
        ),
        (Route::Dir(d), &Method::GET) => ("list", list(&m, &name, d, req).await),
        (Route::Dir(d), &Method::HEAD) => ("head", head(&m, &name, d, req).await),
        (Route::Dir(d), &Method::DELETE) => ("prune", prune(&m, &name, d, req).await),
        (Route::Dir(_), _) => (
            "list",
            MailboxError::MethodNotAllowed("GET, HEAD, DELETE").into_response(),
        ),
        (Route::Envelope(d, seq), &Method::PUT) => {
            ("put", put(&m, &app, &id, &name, d, seq, req).await)
        }
        (Route::Envelope(d, seq), &Method::GET | &Method::HEAD) => {
            ("get", get(&m, &name, d, seq, req).await)
        }
        (Route::Envelope(..), _) => (
            "get",
            MailboxError::MethodNotAllowed("GET, HEAD, PUT").into_response(),
        ),
        (Route::Watch(d), &Method::GET) => (
            "watch",
            super::watch::upgrade(m.clone(), name.clone(), d, req).await,
        ),
        (Route::Watch(_), _) => (
            "watch",
            MailboxError::MethodNotAllowed("GET").into_response(),
        ),
        (Route::Push(d), &Method::PUT) => ("register", register(&m, &id, &name, d, req).await),
        (Route::Push(d), &Method::DELETE) => ("unregister", unregister(&m, &name, d, req).await),
        (Route::Push(_), _) => (
            "register",
            MailboxError::MethodNotAllowed("PUT, DELETE").into_response(),
        ),
        (Route::Ice, &Method::GET) => ("ice", ice(&m, &app, &id, &name, req).await),
        (Route::Ice, _) => ("ice", MailboxError::MethodNotAllowed("GET").into_response()),
        (Route::Signal(side), &Method::GET) => (
            "signal",
            super::signal::upgrade(m.clone(), name.clone(), side, req).await,
        ),
        (Route::Signal(_), _) => (
            "signal",
            MailboxError::MethodNotAllowed("GET").into_response(),
        ),
    };
    let status = resp.status().as_u16();
    metrics::mailbox_request(label, status);
    tracing::info!(
        route = label,
        status,
        mailbox = &name.as_str()[..8],
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        "mailbox"
    );
    resp
}

fn bearer(headers: &HeaderMap) -> Result<Bearer, MailboxError> {
    auth::from_headers(headers).ok_or(MailboxError::Unauthorized)
}

/// One store round trip; the answers every route shares mapped to their errors.
pub(super) async fn run(
    m: &Mailboxes,
    name: &Name,
    bearer: &Bearer,
    op: &Op,
) -> Result<Answer, MailboxError> {
    let answer = m
        .store
        .mailbox(name, bearer.hash(), op, m.now_ms(), m.settings.limits)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "mailbox: the shared store did not answer");
            MailboxError::Unavailable
        })?;
    match answer {
        Answer::NotFound => Err(MailboxError::NotFound),
        Answer::Forbidden => Err(MailboxError::Forbidden),
        Answer::RateLimited(s) => {
            if let Some(b) = op.bucket() {
                metrics::mailbox_rate_limited(b.label());
            }
            Err(MailboxError::RateLimited(s))
        }
        a => Ok(a),
    }
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn answer(r: Result<Response, MailboxError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

async fn claim(m: &Mailboxes, name: &Name, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            Ok(match run(m, name, &b, &Op::Claim).await? {
                Answer::Created => StatusCode::CREATED.into_response(),
                _ => no_content(),
            })
        }
        .await,
    )
}

async fn erase(m: &Mailboxes, name: &Name, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            run(m, name, &b, &Op::Erase).await?;
            Ok(no_content())
        }
        .await,
    )
}

/// The query's `key=value` pairs; a repeated key is `Err`.
fn query(req: &Request) -> Result<Vec<(&str, &str)>, MailboxError> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for kv in req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|s| !s.is_empty())
    {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(MailboxError::BadRequest);
        }
        out.push((k, v));
    }
    Ok(out)
}

fn param<'a>(q: &[(&'a str, &'a str)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

async fn list(m: &Mailboxes, name: &Name, dir: Dir, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            let (after, limit) = {
                let q = query(&req)?;
                let after = match param(&q, "after") {
                    None => 0,
                    Some(v) => path::parse_seq_or_zero(v).ok_or(MailboxError::BadRequest)?,
                };
                let limit = match param(&q, "limit") {
                    None => LIST_DEFAULT,
                    Some(v) => v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=LIST_MAX).contains(n) && !v.starts_with('0'))
                        .ok_or(MailboxError::BadRequest)?,
                };
                (after, limit)
            };
            let Answer::Listed {
                envelopes,
                last,
                more,
            } = run(m, name, &b, &Op::List { dir, after, limit }).await?
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
            let mut r = (StatusCode::OK, body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok(r)
        }
        .await,
    )
}

async fn head(m: &Mailboxes, name: &Name, dir: Dir, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            let Answer::Head { last, count } = run(m, name, &b, &Op::Head { dir }).await? else {
                return Err(MailboxError::Unavailable);
            };
            let mut r = no_content();
            r.headers_mut()
                .insert("x-relay-last-seq", HeaderValue::from(last));
            r.headers_mut()
                .insert("x-relay-count", HeaderValue::from(count));
            Ok(r)
        }
        .await,
    )
}

async fn prune(m: &Mailboxes, name: &Name, dir: Dir, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            let upto = param(&query(&req)?, "upto")
                .and_then(path::parse_seq_or_zero)
                .ok_or(MailboxError::BadRequest)?;
            run(m, name, &b, &Op::Prune { dir, upto }).await?;
            Ok(no_content())
        }
        .await,
    )
}

async fn get(m: &Mailboxes, name: &Name, dir: Dir, seq: u64, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            let Answer::Got(data) = run(m, name, &b, &Op::Get { dir, seq }).await? else {
                return Err(MailboxError::Unavailable);
            };
            let data = data.ok_or(MailboxError::NotFound)?;
            let mut r = (StatusCode::OK, data).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            Ok(r)
        }
        .await,
    )
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

async fn put(
    m: &Arc<Mailboxes>,
    app: &App,
    id: &str,
    name: &Name,
    dir: Dir,
    seq: u64,
    req: Request,
) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            let notify = match req.headers().get("x-relay-notify") {
                None => None,
                Some(v) => Some(Notify::parse(v.as_bytes()).map_err(|_| MailboxError::BadRequest)?),
            };
            let data = body(req, m.settings.max_envelope_bytes).await?;
            if data.is_empty() {
                return Err(MailboxError::BadRequest);
            }
            // Without push= the header is accepted and ignored.
            let asked = notify.filter(|_| app.push.is_some());
            let op = Op::Put {
                dir,
                seq,
                data,
                notify: asked.is_some(),
            };
            match run(m, name, &b, &op).await? {
                Answer::Stored(decision) => {
                    if let (Some(notify), Some(topic)) = (asked, &app.push) {
                        after_write(m, topic, id, name, dir, &b, notify, decision);
                    }
                    Ok(StatusCode::CREATED.into_response())
                }
                Answer::Same => Ok(no_content()),
                Answer::Conflict => Err(MailboxError::Conflict),
                Answer::Full => Err(MailboxError::Full),
                _ => Err(MailboxError::Unavailable),
            }
        }
        .await,
    )
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
        let service = reg
            .get("service")
            .and_then(|s| s.as_str())
            .unwrap_or_default();
        let label = push::service_label(service);
        let Some(module) = m.modules.get(service) else {
            metrics::mailbox_push(label, "no_module");
            return;
        };
        let sent = module.send(&reg, notify, &topic).await;
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
                .mailbox(&name, bearer.hash(), &op, m.now_ms(), m.settings.limits)
                .await
            {
                tracing::warn!(error = %e, "mailbox push: could not forget a dead token's registration");
            }
        }
    });
}

async fn register(m: &Mailboxes, id: &str, name: &Name, dir: Dir, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            let data = body(req, MAX_REGISTRATION_BYTES).await?;
            let reg = push::check(&data, &m.modules).map_err(|_| MailboxError::BadRequest)?;
            let sealed = push::seal(&b, id, dir, &reg);
            run(m, name, &b, &Op::Register { dir, sealed }).await?;
            Ok(no_content())
        }
        .await,
    )
}

async fn unregister(m: &Mailboxes, name: &Name, dir: Dir, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            run(m, name, &b, &Op::Unregister { dir }).await?;
            Ok(no_content())
        }
        .await,
    )
}

async fn ice(m: &Mailboxes, app: &App, id: &str, name: &Name, req: Request) -> Response {
    answer(
        async move {
            let b = bearer(req.headers())?;
            // The path exists only for apps with `ice`, and start-up refuses `ice` without a
            // provider: `m.ice` is there.
            let ice = m.ice.as_ref().ok_or(MailboxError::NotFound)?;
            run(m, name, &b, &Op::Ice).await?;
            let now_s = (m.now_ms() / 1000).max(0) as u64;
            let v = ice
                .servers(&app.name, id, now_s)
                .await
                .map_err(|_| MailboxError::Upstream)?;
            let mut r = (StatusCode::OK, v.to_string()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok(r)
        }
        .await,
    )
}
