//! `GET /v2/pushes/<id>/events`: a push's receipt events as a server-sent event stream, from a
//! resumption point (`after` or `Last-Event-ID`) until it settles.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::front::{unavailable, Signed};
use super::labels::{ReadKind, Route};
use super::reads::{admit_read, answer_read, receipt_for, resume_point};
use super::receipt;
use super::receipt::lifecycle::{Event, EventKind, Receipt};
use crate::metrics;

/// How often an open event stream sends a `: keepalive` comment.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// An event stream whose client has taken nothing for this long (its buffer of 64 events
/// full) ends: its task and subscription are not held by a client that stopped reading.
/// (The connection itself is cut by the listener's write deadline.)
const STREAM_STALL: Duration = Duration::from_secs(30);
/// How often an open event stream of a pending push checks for abandoned targets.
const ABANDON_CHECK: Duration = Duration::from_secs(1);

pub(super) async fn events(
    State(s): State<Arc<Signed>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    answer_read(&s, Route::Events, req, |req| async {
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
        metrics::receipt_read(ReadKind::Events.as_str());
        let (tx, mut rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
        tokio::spawn(stream_events(
            s.clone(),
            id.clone(),
            receipt,
            after,
            sub,
            tx,
        ));
        let stream = futures_util::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
                .map(|o| o.map(Ok::<_, std::convert::Infallible>))
        });
        Ok(Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(KEEPALIVE).text("keepalive"))
            .into_response())
    })
    .await
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
                    let r = s.recover(r, now).await;
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
