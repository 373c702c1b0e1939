//! Every metric the relay exports: names, labels, and the functions that record them. A leaf
//! module (it imports nothing of the crate), so any layer can record without pulling in
//! another; label values are always drawn from bounded sets passed in as `&'static str`
//! (never a token, a collapse id, a mailbox id or a raw path).
//!
//! Series whose label values are known are registered at zero at start-up
//! ([`register_known`]), so dashboards and `rate()` work before the first event and
//! absent-metric alerts do not misfire.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

mod families;
mod hot;
mod process;

pub use families::*;

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0,
];

/// Buckets for the delays of live messages between replicas, whose targets are in the
/// low milliseconds.
const FINE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(SIGNAL_FRAME_DELAY.into()), FINE_BUCKETS))
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(FANOUT_DELAY.into()), FINE_BUCKETS))
                .expect("static buckets are valid")
                .install_recorder()
                .expect("no other metrics recorder is installed");
            describe();
            gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "git_sha" => option_env!("SEALRELAY_GIT_SHA").unwrap_or("unknown")).set(1.0);
            handle
        })
        .clone()
}

/// The label values of the core series, from the types that own them.
#[derive(Debug, Clone, Copy)]
pub struct CoreLabels<'a> {
    /// The v1 intake's (outcome, status) pairs.
    pub intake: &'a [(&'static str, &'static str)],
    /// The store's operations.
    pub store_ops: &'a [&'static str],
    /// The APNs environments.
    pub environments: &'a [&'static str],
    /// The results of a retry attempt.
    pub retry_results: &'a [&'static str],
    /// The retry queue's scopes.
    pub queue_scopes: &'a [&'static str],
    /// The signed routes.
    pub signed_routes: &'a [&'static str],
    /// The (route, code) pairs the signed routes are registered with.
    pub signed: &'a [(&'static str, &'static str)],
    /// The kinds of receipt read.
    pub receipt_reads: &'a [&'static str],
    /// The results of settling a signed push in the background.
    pub signed_resolutions: &'a [&'static str],
    /// The ICE providers.
    pub ice_providers: &'a [&'static str],
}

/// Registers the core series at zero from the label values their owners list: the
/// intake's (outcome, status) pairs, APNs environments, retry results and queue scopes, the
/// store's operations, the signed routes and codes, receipt reads and ICE providers.
pub fn register_known(l: CoreLabels<'_>) {
    for (outcome, status) in l.intake {
        counter!(INTAKE_REQUESTS, "outcome" => *outcome, "status" => *status).absolute(0);
        let _ = histogram!(INTAKE_DURATION, "outcome" => *outcome);
    }
    for env in l.environments {
        let _ = histogram!(APNS_DURATION, "environment" => *env);
        counter!(APNS_REQUESTS, "environment" => *env, "status" => "200", "reason" => "none")
            .absolute(0);
    }
    for r in l.retry_results {
        counter!(RETRY_ATTEMPTS, "result" => *r).absolute(0);
    }
    for op in l.store_ops {
        counter!(STORE_ERRORS, "op" => *op).absolute(0);
        let _ = histogram!(STORE_DURATION, "op" => *op);
    }
    counter!(TOKEN_REFRESHES).absolute(0);
    counter!(FCM_TOKEN_REFRESHES).absolute(0);
    counter!(RETRY_UNOPENABLE).absolute(0);
    counter!(TRACE_EXPORT_ERRORS).absolute(0);
    counter!(FANOUT_LAGGED).absolute(0);
    counter!(FANOUT_MOVED).absolute(0);
    counter!(SIGNED_REPLAYS).absolute(0);
    counter!(SIGNED_TAKEOVERS).absolute(0);
    for r in l.signed_resolutions {
        counter!(SIGNED_RESOLUTIONS, "result" => *r).absolute(0);
    }
    gauge!(EVENT_STREAMS_OPEN).set(0.0);
    for valid in [true, false] {
        counter!(SIGNATURE_VERIFICATIONS, "result" => verification_result(valid)).absolute(0);
    }
    for (route, code) in l.signed {
        counter!(SIGNED_REQUESTS, "route" => *route, "code" => *code).absolute(0);
    }
    for route in l.signed_routes {
        let _ = histogram!(SIGNED_DURATION, "route" => *route);
    }
    for k in l.receipt_reads {
        counter!(RECEIPT_READS, "kind" => *k).absolute(0);
    }
    for provider in l.ice_providers {
        for ok in [true, false] {
            counter!(ICE_REQUESTS, "provider" => *provider, "outcome" => ice_outcome(ok))
                .absolute(0);
        }
    }
    let _ = histogram!(FANOUT_DELAY);
    gauge!(DEGRADED).set(0.0);
    gauge!(INFLIGHT).set(0.0);
    gauge!(MEMORY_DEVICES).set(0.0);
    for scope in l.queue_scopes {
        gauge!(RETRY_QUEUE_DEPTH, "scope" => *scope).set(0.0);
        gauge!(RETRY_QUEUE_OLDEST_AGE, "scope" => *scope).set(0.0);
    }
}

fn verification_result(valid: bool) -> &'static str {
    if valid {
        "valid"
    } else {
        "invalid"
    }
}

fn ice_outcome(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "error"
    }
}

/// Registers at zero the series whose label values the caller's types own: every receipt
/// `state` a signed target's first outcome is counted under, and every admin API
/// `transport` with each status it answers. (The signed routes' duration histograms are
/// registered by [`register_known`]: a registered histogram renders its buckets, sum and
/// count at zero before its first observation.)
pub fn register_front_ends(
    target_states: impl IntoIterator<Item = &'static str>,
    admin_transports: impl IntoIterator<Item = &'static str>,
    admin_statuses: &[u16],
) {
    for state in target_states {
        counter!(SIGNED_TARGETS, "state" => state).absolute(0);
    }
    for transport in admin_transports {
        for status in admin_statuses {
            counter!(ADMIN_REQUESTS, "transport" => transport, "status" => status_label(*status))
                .absolute(0);
        }
    }
}

/// The status as a bounded label.
pub fn status_label(status: u16) -> &'static str {
    match status {
        0 => "0",
        200 => "200",
        201 => "201",
        202 => "202",
        204 => "204",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        408 => "408",
        409 => "409",
        410 => "410",
        413 => "413",
        422 => "422",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        507 => "507",
        s if s < 300 => "2xx",
        s if s < 500 => "4xx",
        _ => "5xx",
    }
}

/// One finished intake request.
pub fn intake(outcome: &'static str, status: u16, elapsed: Duration) {
    let status = status_label(status);
    hot::with(
        INTAKE_REQUESTS,
        &[outcome, status],
        || counter!(INTAKE_REQUESTS, "outcome" => outcome, "status" => status),
        |c| c.increment(1),
    );
    hot::with(
        INTAKE_DURATION,
        &[outcome],
        || histogram!(INTAKE_DURATION, "outcome" => outcome),
        |h| h.record(elapsed.as_secs_f64()),
    );
}

/// One APNs exchange: `status` 0 when unreachable, `reason` already bounded.
pub fn apns_request(
    environment: &'static str,
    status: u16,
    reason: &'static str,
    elapsed: Duration,
) {
    let status = status_label(status);
    hot::with(
        APNS_REQUESTS,
        &[environment, status, reason],
        || counter!(APNS_REQUESTS, "environment" => environment, "status" => status, "reason" => reason),
        |c| c.increment(1),
    );
    hot::with(
        APNS_DURATION,
        &[environment],
        || histogram!(APNS_DURATION, "environment" => environment),
        |h| h.record(elapsed.as_secs_f64()),
    );
}

/// One store operation.
pub fn store_op(op: &'static str, elapsed: Duration, ok: bool) {
    hot::with(
        STORE_DURATION,
        &[op],
        || histogram!(STORE_DURATION, "op" => op),
        |h| h.record(elapsed.as_secs_f64()),
    );
    if !ok {
        counter!(STORE_ERRORS, "op" => op).increment(1);
    }
}

/// A provider token was signed.
pub fn provider_token_refreshed() {
    counter!(TOKEN_REFRESHES).increment(1);
}

/// An FCM access token was fetched.
pub fn fcm_token_refreshed() {
    counter!(FCM_TOKEN_REFRESHES).increment(1);
}

/// The replica entered (true) or left (false) degraded mode.
pub fn degraded(on: bool) {
    gauge!(DEGRADED).set(if on { 1.0 } else { 0.0 });
}

/// Devices in the in-process store.
pub fn memory_devices(n: usize) {
    gauge!(MEMORY_DEVICES).set(n as f64);
}

/// `RELAY_MAX_INFLIGHT`.
pub fn max_inflight(n: usize) {
    gauge!(MAX_INFLIGHT).set(n as f64);
}

/// The retry queue's depth and oldest age for one scope (`shared` or `local`).
pub fn retry_queue(scope: &'static str, depth: usize, oldest_age_s: f64) {
    gauge!(RETRY_QUEUE_DEPTH, "scope" => scope).set(depth as f64);
    gauge!(RETRY_QUEUE_OLDEST_AGE, "scope" => scope).set(oldest_age_s.max(0.0));
}

/// One retry attempt's result.
pub fn retry_attempt(result: &'static str) {
    counter!(RETRY_ATTEMPTS, "result" => result).increment(1);
}

/// Queued items that could not be opened.
pub fn retry_unopenable(n: u64) {
    counter!(RETRY_UNOPENABLE).increment(n);
}

/// Registers at zero the decode failures the store counts, one series per `kind` it owns.
pub fn register_store_decode_errors(kinds: &[&'static str]) {
    for kind in kinds {
        counter!(STORE_DECODE_ERRORS, "kind" => *kind).absolute(0);
    }
}

/// Stored or published data of `kind` could not be read.
pub fn store_decode_error(kind: &'static str) {
    counter!(STORE_DECODE_ERRORS, "kind" => kind).increment(1);
}

/// A subscriber lost `n` fan-out messages.
pub fn fanout_lagged(n: u64) {
    counter!(FANOUT_LAGGED).increment(n);
}

/// A fan-out channel of a moved Cluster slot was subscribed again on its new owner.
pub fn fanout_moved() {
    counter!(FANOUT_MOVED).increment(1);
}

/// One fan-out message arrived this long after it was published.
pub fn fanout_delay(d: Duration) {
    hot::with(
        FANOUT_DELAY,
        &[],
        || histogram!(FANOUT_DELAY),
        |h| h.record(d.as_secs_f64()),
    );
}

/// One answered signed-push API request.
pub fn signed_request(route: &'static str, code: &'static str, elapsed: Duration) {
    hot::with(
        SIGNED_REQUESTS,
        &[route, code],
        || counter!(SIGNED_REQUESTS, "route" => route, "code" => code),
        |c| c.increment(1),
    );
    hot::with(
        SIGNED_DURATION,
        &[route],
        || histogram!(SIGNED_DURATION, "route" => route),
        |h| h.record(elapsed.as_secs_f64()),
    );
}

/// One signature checked.
pub fn signature_verification(valid: bool) {
    counter!(SIGNATURE_VERIFICATIONS, "result" => verification_result(valid)).increment(1);
}

/// An exact replay answered (nothing sent).
pub fn signed_replay() {
    counter!(SIGNED_REPLAYS).increment(1);
}

/// A replay took over a push whose lease had lapsed.
pub fn signed_takeover() {
    counter!(SIGNED_TAKEOVERS).increment(1);
}

/// A background settlement of a signed push started or ended with `result`.
pub fn signed_resolution(result: &'static str) {
    counter!(SIGNED_RESOLUTIONS, "result" => result).increment(1);
}

/// A signed target's first outcome.
pub fn signed_target(state: &'static str) {
    counter!(SIGNED_TARGETS, "state" => state).increment(1);
}

/// One receipt read, by `kind` (receipt, events, admin).
pub fn receipt_read(kind: &'static str) {
    counter!(RECEIPT_READS, "kind" => kind).increment(1);
}

/// One ICE provider's part of an ICE answer, labelled `outcome` ok or error (only
/// cloudflare can fail; its error makes the answer 502).
pub fn ice_request(provider: &'static str, ok: bool) {
    counter!(ICE_REQUESTS, "provider" => provider, "outcome" => ice_outcome(ok)).increment(1);
}

/// One admin API request.
pub fn admin_request(transport: &'static str, status: u16) {
    counter!(ADMIN_REQUESTS, "transport" => transport, "status" => status_label(status))
        .increment(1);
}

/// Counts an open event stream for as long as it lives.
pub struct EventStreamGuard(());

impl EventStreamGuard {
    /// One more stream open.
    pub fn open() -> Self {
        gauge!(EVENT_STREAMS_OPEN).increment(1.0);
        EventStreamGuard(())
    }
}

impl Drop for EventStreamGuard {
    fn drop(&mut self) {
        gauge!(EVENT_STREAMS_OPEN).decrement(1.0);
    }
}

/// The label values of the mailbox series, from the types that own them.
#[derive(Debug, Clone, Copy)]
pub struct MailboxLabels<'a> {
    /// Every route.
    pub routes: &'a [&'static str],
    /// The statuses each route is registered with at zero (those it answers most).
    pub statuses: &'a [u16],
    /// Every rate-limit bucket.
    pub buckets: &'a [&'static str],
    /// Every push service.
    pub services: &'a [&'static str],
    /// Every push outcome.
    pub outcomes: &'a [&'static str],
    /// Every kind of socket.
    pub sockets: &'a [&'static str],
    /// Every close code the relay closes a signal socket with.
    pub closes: &'a [&'static str],
    /// Every cap a socket can be refused by.
    pub caps: &'a [&'static str],
}

/// Registers the mailbox series at zero: every route with its usual statuses, every bucket,
/// every push outcome of each service, every socket kind, signal result and close code.
pub fn register_mailbox(l: MailboxLabels<'_>) {
    for route in l.routes {
        for status in l.statuses {
            counter!(MAILBOX_REQUESTS, "route" => *route, "status" => status_label(*status))
                .absolute(0);
        }
    }
    for b in l.buckets {
        counter!(MAILBOX_RATE_LIMITED, "bucket" => *b).absolute(0);
    }
    for s in l.services {
        for o in l.outcomes {
            counter!(MAILBOX_PUSHES, "service" => *s, "outcome" => *o).absolute(0);
        }
    }
    for kind in l.sockets {
        gauge!(MAILBOX_SOCKETS_OPEN, "kind" => *kind).set(0.0);
    }
    for cap in l.caps {
        counter!(MAILBOX_SOCKETS_REFUSED, "cap" => *cap).absolute(0);
    }
    for relayed in [true, false] {
        counter!(SIGNAL_FRAMES, "result" => frame_result(relayed)).absolute(0);
    }
    counter!(SIGNAL_BYTES).absolute(0);
    for close in l.closes {
        counter!(SIGNAL_CLOSES, "code" => *close).absolute(0);
    }
    let _ = histogram!(SIGNAL_FRAME_DELAY);
}

/// A signal socket closed by the relay, by its close code's label.
pub fn signal_close(code: &'static str) {
    counter!(SIGNAL_CLOSES, "code" => code).increment(1);
}

fn frame_result(relayed: bool) -> &'static str {
    if relayed {
        "relayed"
    } else {
        "dropped"
    }
}

/// A signal frame from a client: relayed (the other side was there) or dropped.
pub fn signal_frame(relayed: bool, bytes: usize) {
    let result = frame_result(relayed);
    hot::with(
        SIGNAL_FRAMES,
        &[result],
        || counter!(SIGNAL_FRAMES, "result" => result),
        |c| c.increment(1),
    );
    if relayed {
        hot::with(
            SIGNAL_BYTES,
            &[],
            || counter!(SIGNAL_BYTES),
            |c| c.increment(bytes as u64),
        );
    }
}

/// A frame's delay from the sending side's replica to the receiving side's.
pub fn signal_frame_delay(d: Duration) {
    hot::with(
        SIGNAL_FRAME_DELAY,
        &[],
        || histogram!(SIGNAL_FRAME_DELAY),
        |h| h.record(d.as_secs_f64()),
    );
}

/// One finished mailbox request.
pub fn mailbox_request(route: &'static str, status: u16) {
    let status = status_label(status);
    hot::with(
        MAILBOX_REQUESTS,
        &[route, status],
        || counter!(MAILBOX_REQUESTS, "route" => route, "status" => status),
        |c| c.increment(1),
    );
}

/// One mailbox request over its bucket.
pub fn mailbox_rate_limited(bucket: &'static str) {
    counter!(MAILBOX_RATE_LIMITED, "bucket" => bucket).increment(1);
}

/// One push asked for on a mailbox write, by service and outcome.
pub fn mailbox_push(service: &'static str, outcome: &'static str) {
    counter!(MAILBOX_PUSHES, "service" => service, "outcome" => outcome).increment(1);
}

/// Counts an open mailbox socket (`watch` or `signal`) for as long as it lives.
pub struct SocketGuard(&'static str);

impl SocketGuard {
    /// One more socket of `kind` open.
    pub fn open(kind: &'static str) -> Self {
        gauge!(MAILBOX_SOCKETS_OPEN, "kind" => kind).increment(1.0);
        SocketGuard(kind)
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        gauge!(MAILBOX_SOCKETS_OPEN, "kind" => self.0).decrement(1.0);
    }
}

/// Every region series of these peers, at zero (and the peers down until probed).
pub fn register_regions(
    peers: &[String],
    surfaces: &[&'static str],
    outcomes: &[&'static str],
    received: &[&'static str],
) {
    for peer in peers {
        gauge!(REGION_PEER_UP, "peer" => peer.clone()).set(0.0);
        counter!(REGION_FALLBACKS, "peer" => peer.clone()).absolute(0);
        let _ = histogram!(REGION_HOP_DURATION, "peer" => peer.clone());
        for surface in surfaces {
            for outcome in outcomes {
                counter!(REGION_HOPS, "peer" => peer.clone(), "surface" => *surface, "outcome" => *outcome)
                    .absolute(0);
            }
        }
        for outcome in received {
            counter!(REGION_HOPS_RECEIVED, "peer" => peer.clone(), "outcome" => *outcome)
                .absolute(0);
        }
    }
}

/// One hop to `peer` for `surface`, ended as `outcome`, after `elapsed`.
pub fn region_hop(peer: &str, surface: &'static str, outcome: &'static str, elapsed: Duration) {
    counter!(REGION_HOPS, "peer" => peer.to_owned(), "surface" => surface, "outcome" => outcome)
        .increment(1);
    if outcome == "answered" {
        histogram!(REGION_HOP_DURATION, "peer" => peer.to_owned()).record(elapsed.as_secs_f64());
    }
}

/// Whether `peer` is up, as this replica's probes say.
pub fn region_peer_up(peer: &str, up: bool) {
    gauge!(REGION_PEER_UP, "peer" => peer.to_owned()).set(if up { 1.0 } else { 0.0 });
}

/// A v1 alert decided here although `peer` is its home.
pub fn region_fallback(peer: &str) {
    counter!(REGION_FALLBACKS, "peer" => peer.to_owned()).increment(1);
}

/// A hop received from `peer` (a configured region name, or `unknown`), ended as `outcome`.
pub fn region_hop_received(peer: &str, outcome: &'static str) {
    counter!(REGION_HOPS_RECEIVED, "peer" => peer.to_owned(), "outcome" => outcome).increment(1);
}

/// A mailbox socket refused by `cap` (`mailbox` or `replica`).
pub fn socket_refused(cap: &'static str) {
    counter!(MAILBOX_SOCKETS_REFUSED, "cap" => cap).increment(1);
}

/// One failed trace export.
pub fn trace_export_error() {
    counter!(TRACE_EXPORT_ERRORS).increment(1);
}

/// Tracks in-flight intake requests for as long as the guard lives.
#[derive(Debug)]
pub struct InflightGuard(());

impl InflightGuard {
    /// Counts one request in.
    pub fn enter() -> Self {
        hot::with(INFLIGHT, &[], || gauge!(INFLIGHT), |g| g.increment(1.0));
        InflightGuard(())
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        hot::with(INFLIGHT, &[], || gauge!(INFLIGHT), |g| g.decrement(1.0));
    }
}

/// The exposition text for a scrape: everything recorded, plus the process's own numbers
/// read now (written here rather than through the recorder, whose counters are integers:
/// CPU seconds need their fraction).
pub fn render(handle: &PrometheusHandle) -> String {
    let mut out = handle.render();
    if let Some(p) = process::read() {
        use std::fmt::Write;
        let mut metric = |name: &str, value: f64| {
            if let Some((_, kind, help)) = FAMILIES.iter().find(|(n, _, _)| *n == name) {
                let _ = write!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
                );
            }
        };
        metric(PROCESS_CPU, p.cpu_s);
        metric(PROCESS_RSS, p.rss_bytes as f64);
        metric(PROCESS_VSIZE, p.vsize_bytes as f64);
        metric(PROCESS_OPEN_FDS, p.open_fds as f64);
        if let Some(m) = p.max_fds {
            metric(PROCESS_MAX_FDS, m as f64);
        }
        metric(PROCESS_START, process::start_time_s());
    }
    out
}
