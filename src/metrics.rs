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

/// Intake requests (protocol v1), by `outcome` and `status`.
pub const INTAKE_REQUESTS: &str = "sealrelay_intake_requests_total";
/// Intake request duration, seconds, by `outcome`.
pub const INTAKE_DURATION: &str = "sealrelay_intake_duration_seconds";
/// Intake requests being processed.
pub const INFLIGHT: &str = "sealrelay_inflight_requests";
/// `RELAY_MAX_INFLIGHT`, for saturation panels.
pub const MAX_INFLIGHT: &str = "sealrelay_max_inflight";
/// APNs requests by `environment`, `status` and `reason`.
pub const APNS_REQUESTS: &str = "sealrelay_apns_requests_total";
/// APNs request duration, seconds, by `environment`.
pub const APNS_DURATION: &str = "sealrelay_apns_duration_seconds";
/// Provider tokens signed.
pub const TOKEN_REFRESHES: &str = "sealrelay_provider_token_refreshes_total";
/// Store operation duration, seconds, by `op`.
pub const STORE_DURATION: &str = "sealrelay_store_duration_seconds";
/// Store operation errors, by `op`.
pub const STORE_ERRORS: &str = "sealrelay_store_errors_total";
/// 1 while the replica decides on its in-process store because Redis failed.
pub const DEGRADED: &str = "sealrelay_degraded";
/// Devices held by the in-process store.
pub const MEMORY_DEVICES: &str = "sealrelay_memory_store_devices";
/// Notifications waiting in the retry queue, by `scope`: `shared` (Redis: every replica
/// reports the same number, aggregate with `max`) or `local` (this replica's in-process
/// queue, aggregate with `sum`).
pub const RETRY_QUEUE_DEPTH: &str = "sealrelay_retry_queue_depth";
/// Age of the oldest waiting notification since its acceptance, seconds, by `scope`.
pub const RETRY_QUEUE_OLDEST_AGE: &str = "sealrelay_retry_queue_oldest_age_seconds";
/// Retry-queue attempts by `result` (delivered, retry, failed, expired).
pub const RETRY_ATTEMPTS: &str = "sealrelay_retry_attempts_total";
/// Queued notifications that could not be opened (sealed under another key) and were moved
/// aside.
pub const RETRY_UNOPENABLE: &str = "sealrelay_retry_unopenable_total";
/// Fan-out messages a slow subscriber lost.
pub const FANOUT_LAGGED: &str = "sealrelay_fanout_lagged_total";
/// Fan-out delay from publish to receive, seconds.
pub const FANOUT_DELAY: &str = "sealrelay_fanout_delay_seconds";
/// Signed-push API requests by `route` (push, receipt, events) and `code`.
pub const SIGNED_REQUESTS: &str = "sealrelay_signed_requests_total";
/// Time to answer a signed-push API request, seconds, by `route`.
pub const SIGNED_DURATION: &str = "sealrelay_signed_duration_seconds";
/// Signature verifications by `result` (valid, invalid).
pub const SIGNATURE_VERIFICATIONS: &str = "sealrelay_signature_verifications_total";
/// Exact replays answered 200 (nothing sent).
pub const SIGNED_REPLAYS: &str = "sealrelay_signed_replays_total";
/// Each signed target's first outcome, by `state`.
pub const SIGNED_TARGETS: &str = "sealrelay_signed_targets_total";
/// Receipt reads by `kind` (receipt, events, admin).
pub const RECEIPT_READS: &str = "sealrelay_receipt_reads_total";
/// Open event streams (Server-Sent Events) on this replica.
pub const EVENT_STREAMS_OPEN: &str = "sealrelay_event_streams_open";
/// Admin API requests by `transport` (unix, tcp) and `status`.
pub const ADMIN_REQUESTS: &str = "sealrelay_admin_requests_total";
/// Mailbox requests by `route` and `status`.
pub const MAILBOX_REQUESTS: &str = "sealrelay_mailbox_requests_total";
/// Mailbox requests over a bucket, by `bucket`.
pub const MAILBOX_RATE_LIMITED: &str = "sealrelay_mailbox_rate_limited_total";
/// Mailbox pushes by `service` (apns, fcm) and `outcome`.
pub const MAILBOX_PUSHES: &str = "sealrelay_mailbox_pushes_total";
/// Open mailbox sockets by `kind` (watch, signal).
pub const MAILBOX_SOCKETS_OPEN: &str = "sealrelay_mailbox_sockets_open";
/// OAuth2 access tokens fetched for FCM.
pub const FCM_TOKEN_REFRESHES: &str = "sealrelay_fcm_token_refreshes_total";
/// Signal frames by `result` (relayed, dropped).
pub const SIGNAL_FRAMES: &str = "sealrelay_signal_frames_total";
/// Signal bytes relayed.
pub const SIGNAL_BYTES: &str = "sealrelay_signal_bytes_total";
/// Signal sockets closed by the relay, by close `code`.
pub const SIGNAL_CLOSES: &str = "sealrelay_signal_closes_total";
/// Signal frame delay from one side's replica to the other's, seconds.
pub const SIGNAL_FRAME_DELAY: &str = "sealrelay_signal_frame_delay_seconds";
/// ICE credential requests by `provider` (stun, coturn, cloudflare) and `outcome`.
pub const ICE_REQUESTS: &str = "sealrelay_ice_requests_total";
/// OTLP trace export failures.
pub const TRACE_EXPORT_ERRORS: &str = "sealrelay_trace_export_errors_total";
/// Always 1, labelled with `version` and `git_sha`.
pub const BUILD_INFO: &str = "sealrelay_build_info";

/// Process CPU time, seconds (user + system).
pub const PROCESS_CPU: &str = "process_cpu_seconds_total";
/// Resident memory, bytes.
pub const PROCESS_RSS: &str = "process_resident_memory_bytes";
/// Virtual memory, bytes.
pub const PROCESS_VSIZE: &str = "process_virtual_memory_bytes";
/// Open file descriptors.
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
/// The file descriptor limit.
pub const PROCESS_MAX_FDS: &str = "process_max_fds";
/// Process start, Unix seconds.
pub const PROCESS_START: &str = "process_start_time_seconds";

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0,
];

/// Buckets for the delays of live messages between replicas, whose targets are in the
/// low milliseconds.
const FINE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The signed API's (route, code) pairs registered at start-up.
const SIGNED_CODES: &[(&str, &str)] = &[
    ("push", "created"),
    ("push", "replayed"),
    ("push", "invalid_request"),
    ("push", "too_large"),
    ("push", "bad_signature"),
    ("push", "unknown_signer"),
    ("push", "revoked_signer"),
    ("push", "topic_not_allowed"),
    ("push", "stale_request"),
    ("push", "request_id_conflict"),
    ("push", "unavailable"),
    ("receipt", "ok"),
    ("receipt", "unauthorized"),
    ("receipt", "not_found"),
    ("events", "ok"),
];

/// The signed API's routes, in the order of [`SIGNED_CODES`] (each once).
fn signed_routes() -> impl Iterator<Item = &'static str> {
    SIGNED_CODES
        .iter()
        .enumerate()
        .filter(|(i, (route, _))| !SIGNED_CODES[..*i].iter().any(|(r, _)| r == route))
        .map(|(_, (route, _))| *route)
}

/// The statuses the admin API answers (200 and 201 served, 400 a bad body, 401 a TCP request
/// without the token, 403 a socket peer of another user, 404 an unknown path or signer, 503
/// the store not answering), registered at zero for every transport.
const ADMIN_STATUSES: &[&str] = &["200", "201", "400", "401", "403", "404", "503"];

/// APNs environments, as labelled.
pub const ENVIRONMENTS: &[&str] = &["production", "sandbox"];
/// Retry results, as labelled.
pub const RETRY_RESULTS: &[&str] = &["delivered", "retry", "failed", "expired"];

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

/// Registers every series whose label values are known, at zero: the intake's
/// (outcome, status) pairs, APNs environments, retry results, the store's operations.
pub fn register_known(intake: &[(&'static str, &'static str)], store_ops: &[&'static str]) {
    for (outcome, status) in intake {
        counter!(INTAKE_REQUESTS, "outcome" => *outcome, "status" => *status).absolute(0);
        let _ = histogram!(INTAKE_DURATION, "outcome" => *outcome);
    }
    for env in ENVIRONMENTS {
        let _ = histogram!(APNS_DURATION, "environment" => *env);
        counter!(APNS_REQUESTS, "environment" => *env, "status" => "200", "reason" => "none")
            .absolute(0);
    }
    for r in RETRY_RESULTS {
        counter!(RETRY_ATTEMPTS, "result" => *r).absolute(0);
    }
    for op in store_ops {
        counter!(STORE_ERRORS, "op" => *op).absolute(0);
        let _ = histogram!(STORE_DURATION, "op" => *op);
    }
    counter!(TOKEN_REFRESHES).absolute(0);
    counter!(FCM_TOKEN_REFRESHES).absolute(0);
    counter!(RETRY_UNOPENABLE).absolute(0);
    counter!(TRACE_EXPORT_ERRORS).absolute(0);
    counter!(FANOUT_LAGGED).absolute(0);
    counter!(SIGNED_REPLAYS).absolute(0);
    gauge!(EVENT_STREAMS_OPEN).set(0.0);
    for r in ["valid", "invalid"] {
        counter!(SIGNATURE_VERIFICATIONS, "result" => r).absolute(0);
    }
    for (route, code) in SIGNED_CODES {
        counter!(SIGNED_REQUESTS, "route" => *route, "code" => *code).absolute(0);
    }
    for route in signed_routes() {
        let _ = histogram!(SIGNED_DURATION, "route" => route);
    }
    for k in ["receipt", "events", "admin"] {
        counter!(RECEIPT_READS, "kind" => k).absolute(0);
    }
    for provider in ["stun", "coturn", "cloudflare"] {
        for outcome in ["ok", "error"] {
            counter!(ICE_REQUESTS, "provider" => provider, "outcome" => outcome).absolute(0);
        }
    }
    let _ = histogram!(FANOUT_DELAY);
    gauge!(DEGRADED).set(0.0);
    gauge!(INFLIGHT).set(0.0);
    gauge!(MEMORY_DEVICES).set(0.0);
    for scope in ["shared", "local"] {
        gauge!(RETRY_QUEUE_DEPTH, "scope" => scope).set(0.0);
        gauge!(RETRY_QUEUE_OLDEST_AGE, "scope" => scope).set(0.0);
    }
}

/// Registers at zero the series whose label values the caller's types own: every receipt
/// `state` a signed target's first outcome is counted under, and every admin API
/// `transport` with each of [`ADMIN_STATUSES`]. (The signed routes' duration histograms are
/// registered by [`register_known`]: a registered histogram renders its buckets, sum and
/// count at zero before its first observation.)
pub fn register_front_ends(
    target_states: impl IntoIterator<Item = &'static str>,
    admin_transports: impl IntoIterator<Item = &'static str>,
) {
    for state in target_states {
        counter!(SIGNED_TARGETS, "state" => state).absolute(0);
    }
    for transport in admin_transports {
        for status in ADMIN_STATUSES {
            counter!(ADMIN_REQUESTS, "transport" => transport, "status" => *status).absolute(0);
        }
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        INTAKE_REQUESTS,
        "Intake requests (protocol v1) by outcome and HTTP status."
    );
    describe_histogram!(
        INTAKE_DURATION,
        Unit::Seconds,
        "Intake request duration by outcome."
    );
    describe_gauge!(INFLIGHT, "Intake requests being processed.");
    describe_gauge!(
        MAX_INFLIGHT,
        "Intake requests processed at once before shedding (RELAY_MAX_INFLIGHT)."
    );
    describe_counter!(
        APNS_REQUESTS,
        "APNs requests by environment, HTTP status and reason."
    );
    describe_histogram!(
        APNS_DURATION,
        Unit::Seconds,
        "APNs request duration by environment."
    );
    describe_counter!(TOKEN_REFRESHES, "APNs provider tokens signed.");
    describe_histogram!(
        STORE_DURATION,
        Unit::Seconds,
        "Store operation duration by operation."
    );
    describe_counter!(STORE_ERRORS, "Store operation errors by operation.");
    describe_gauge!(
        DEGRADED,
        "1 while this replica decides on its in-process store because Redis failed."
    );
    describe_gauge!(
        MEMORY_DEVICES,
        "Devices held by the in-process policy store."
    );
    describe_gauge!(
        RETRY_QUEUE_DEPTH,
        "Notifications waiting in the retry queue; scope=shared is the Redis queue (same on every replica: use max), scope=local this replica's in-process queue (use sum)."
    );
    describe_gauge!(
        RETRY_QUEUE_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest waiting notification since its acceptance."
    );
    describe_counter!(RETRY_ATTEMPTS, "Retry-queue attempts by result.");
    describe_counter!(
        RETRY_UNOPENABLE,
        "Queued notifications that could not be opened (sealed under another key) and were moved aside."
    );
    describe_counter!(TRACE_EXPORT_ERRORS, "OTLP trace export failures.");
    describe_counter!(
        FANOUT_LAGGED,
        "Fan-out messages lost by subscribers that fell behind."
    );
    describe_histogram!(
        FANOUT_DELAY,
        Unit::Seconds,
        "Fan-out delay from publish on one replica to receipt on another."
    );
    describe_gauge!(BUILD_INFO, "Build information; always 1.");
    describe_counter!(
        SIGNED_REQUESTS,
        "Signed-push API requests (/v2) by route (push, receipt, events) and outcome code."
    );
    describe_histogram!(
        SIGNED_DURATION,
        Unit::Seconds,
        "Time to answer a signed-push API request, by route."
    );
    describe_counter!(
        SIGNATURE_VERIFICATIONS,
        "Ed25519 signature verifications by result (valid, invalid)."
    );
    describe_counter!(
        SIGNED_REPLAYS,
        "Exact replays of signed pushes answered 200 with the stored receipt (nothing sent)."
    );
    describe_counter!(
        SIGNED_TARGETS,
        "Each signed target's first outcome, by receipt state."
    );
    describe_counter!(
        RECEIPT_READS,
        "Receipt reads by kind (receipt, events, admin)."
    );
    describe_gauge!(
        EVENT_STREAMS_OPEN,
        "Open receipt event streams (Server-Sent Events) on this replica."
    );
    describe_counter!(
        ADMIN_REQUESTS,
        "Admin API requests by transport (unix, tcp) and HTTP status."
    );
    describe_counter!(
        MAILBOX_REQUESTS,
        "Mailbox requests by route and HTTP status."
    );
    describe_counter!(
        MAILBOX_RATE_LIMITED,
        "Mailbox requests refused 429 (or sockets closed 1008) by bucket."
    );
    describe_counter!(
        MAILBOX_PUSHES,
        "Pushes asked for by mailbox writes, by service and outcome (sent ones by the service's answer; skipped ones by why)."
    );
    describe_gauge!(
        MAILBOX_SOCKETS_OPEN,
        "Open mailbox WebSockets on this replica by kind (watch, signal)."
    );
    describe_counter!(FCM_TOKEN_REFRESHES, "OAuth2 access tokens fetched for FCM.");
    describe_counter!(
        SIGNAL_FRAMES,
        "Signal frames from clients by result (relayed: the other side was connected; dropped)."
    );
    describe_counter!(SIGNAL_BYTES, "Signal frame bytes relayed.");
    describe_counter!(
        SIGNAL_CLOSES,
        "Signal sockets closed by the relay, by WebSocket close code."
    );
    describe_histogram!(
        SIGNAL_FRAME_DELAY,
        Unit::Seconds,
        "Signal frame delay from the sending side's replica to the receiving side's."
    );
    describe_counter!(
        ICE_REQUESTS,
        "ICE credentials handed out by provider (stun, coturn, cloudflare) and outcome (ok, error)."
    );
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
    counter!(INTAKE_REQUESTS, "outcome" => outcome, "status" => status_label(status)).increment(1);
    histogram!(INTAKE_DURATION, "outcome" => outcome).record(elapsed.as_secs_f64());
}

/// One APNs exchange: `status` 0 when unreachable, `reason` already bounded.
pub fn apns_request(
    environment: &'static str,
    status: u16,
    reason: &'static str,
    elapsed: Duration,
) {
    counter!(APNS_REQUESTS, "environment" => environment, "status" => status_label(status), "reason" => reason).increment(1);
    histogram!(APNS_DURATION, "environment" => environment).record(elapsed.as_secs_f64());
}

/// One store operation.
pub fn store_op(op: &'static str, elapsed: Duration, ok: bool) {
    histogram!(STORE_DURATION, "op" => op).record(elapsed.as_secs_f64());
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

/// A subscriber lost `n` fan-out messages.
pub fn fanout_lagged(n: u64) {
    counter!(FANOUT_LAGGED).increment(n);
}

/// One fan-out message arrived this long after it was published.
pub fn fanout_delay(d: Duration) {
    histogram!(FANOUT_DELAY).record(d.as_secs_f64());
}

/// One answered signed-push API request.
pub fn signed_request(route: &'static str, code: &'static str, elapsed: Duration) {
    counter!(SIGNED_REQUESTS, "route" => route, "code" => code).increment(1);
    histogram!(SIGNED_DURATION, "route" => route).record(elapsed.as_secs_f64());
}

/// One signature checked.
pub fn signature_verification(valid: bool) {
    let result = if valid { "valid" } else { "invalid" };
    counter!(SIGNATURE_VERIFICATIONS, "result" => result).increment(1);
}

/// An exact replay answered (nothing sent).
pub fn signed_replay() {
    counter!(SIGNED_REPLAYS).increment(1);
}

/// A signed target's first outcome.
pub fn signed_target(state: &'static str) {
    counter!(SIGNED_TARGETS, "state" => state).increment(1);
}

/// One receipt read, by `kind` (receipt, events, admin).
pub fn receipt_read(kind: &'static str) {
    counter!(RECEIPT_READS, "kind" => kind).increment(1);
}

/// One ICE provider's part of an ICE answer: `provider` stun, coturn or cloudflare,
/// `outcome` ok or error (only cloudflare can fail; its error makes the answer 502).
pub fn ice_request(provider: &'static str, outcome: &'static str) {
    counter!(ICE_REQUESTS, "provider" => provider, "outcome" => outcome).increment(1);
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

/// Mailbox routes, as labelled.
pub const MAILBOX_ROUTES: &[&str] = &[
    "claim",
    "erase",
    "put",
    "list",
    "get",
    "head",
    "prune",
    "register",
    "unregister",
    "watch",
    "signal",
    "ice",
];

/// Registers the mailbox series at zero: every route with the statuses it answers most,
/// every bucket, every push outcome of each service.
pub fn register_mailbox(
    buckets: &[&'static str],
    services: &[crate::mailbox::push::ServiceLabel],
    outcomes: &[crate::mailbox::push::PushOutcome],
) {
    for route in MAILBOX_ROUTES {
        for status in ["200", "201", "204", "429", "503"] {
            counter!(MAILBOX_REQUESTS, "route" => *route, "status" => status).absolute(0);
        }
    }
    for b in buckets {
        counter!(MAILBOX_RATE_LIMITED, "bucket" => *b).absolute(0);
    }
    for s in services {
        for o in outcomes {
            counter!(MAILBOX_PUSHES, "service" => s.as_str(), "outcome" => o.as_str()).absolute(0);
        }
    }
    for kind in ["watch", "signal"] {
        gauge!(MAILBOX_SOCKETS_OPEN, "kind" => kind).set(0.0);
    }
    for result in ["relayed", "dropped"] {
        counter!(SIGNAL_FRAMES, "result" => result).absolute(0);
    }
    counter!(SIGNAL_BYTES).absolute(0);
    for code in SIGNAL_CLOSE_CODES {
        counter!(SIGNAL_CLOSES, "code" => *code).absolute(0);
    }
    let _ = histogram!(SIGNAL_FRAME_DELAY);
}

/// The close codes a signal socket is closed with by the relay, as labelled.
pub const SIGNAL_CLOSE_CODES: &[&str] = &["1000", "1001", "1003", "1008", "1009", "4000"];

/// A signal socket closed by the relay with `code`.
pub fn signal_close(code: u16) {
    let label = match code {
        1000 => "1000",
        1001 => "1001",
        1003 => "1003",
        1008 => "1008",
        1009 => "1009",
        4000 => "4000",
        _ => "other",
    };
    counter!(SIGNAL_CLOSES, "code" => label).increment(1);
}

/// A signal frame from a client: relayed (the other side was there) or dropped.
pub fn signal_frame(relayed: bool, bytes: usize) {
    let result = if relayed { "relayed" } else { "dropped" };
    counter!(SIGNAL_FRAMES, "result" => result).increment(1);
    if relayed {
        counter!(SIGNAL_BYTES).increment(bytes as u64);
    }
}

/// A frame's delay from the sending side's replica to the receiving side's.
pub fn signal_frame_delay(d: Duration) {
    histogram!(SIGNAL_FRAME_DELAY).record(d.as_secs_f64());
}

/// One finished mailbox request.
pub fn mailbox_request(route: &'static str, status: u16) {
    counter!(MAILBOX_REQUESTS, "route" => route, "status" => status_label(status)).increment(1);
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

/// One failed trace export.
pub fn trace_export_error() {
    counter!(TRACE_EXPORT_ERRORS).increment(1);
}

/// Tracks in-flight intake requests for as long as the guard lives.
pub struct InflightGuard(());

impl InflightGuard {
    /// Counts one request in.
    pub fn enter() -> Self {
        gauge!(INFLIGHT).increment(1.0);
        InflightGuard(())
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        gauge!(INFLIGHT).decrement(1.0);
    }
}

/// The exposition text for a scrape: everything recorded, plus the process's own numbers
/// read now (written here rather than through the recorder, whose counters are integers:
/// CPU seconds need their fraction).
pub fn render(handle: &PrometheusHandle) -> String {
    let mut out = handle.render();
    if let Some(p) = process::read() {
        use std::fmt::Write;
        let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            );
        };
        metric(
            PROCESS_CPU,
            "counter",
            "Total user and system CPU time spent in seconds.",
            p.cpu_s,
        );
        metric(
            PROCESS_RSS,
            "gauge",
            "Resident memory size in bytes.",
            p.rss_bytes as f64,
        );
        metric(
            PROCESS_VSIZE,
            "gauge",
            "Virtual memory size in bytes.",
            p.vsize_bytes as f64,
        );
        metric(
            PROCESS_OPEN_FDS,
            "gauge",
            "Number of open file descriptors.",
            p.open_fds as f64,
        );
        if let Some(m) = p.max_fds {
            metric(
                PROCESS_MAX_FDS,
                "gauge",
                "Maximum number of open file descriptors.",
                m as f64,
            );
        }
        metric(
            PROCESS_START,
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            process::start_time_s(),
        );
    }
    out
}

/// The process's own numbers, read from `/proc/self` (Linux; elsewhere nothing is exported).
mod process {
    /// One reading.
    pub(super) struct Reading {
        pub cpu_s: f64,
        pub rss_bytes: u64,
        pub vsize_bytes: u64,
        pub open_fds: usize,
        pub max_fds: Option<u64>,
    }

    /// Clock ticks per second and page size: the values every Linux on the platforms this
    /// runs on uses (sysconf would need libc).
    const TICKS_PER_S: f64 = 100.0;
    const PAGE_SIZE: u64 = 4096;

    /// Fields of `/proc/self/stat` after the command name: (utime, stime, starttime,
    /// vsize, rss pages).
    pub(super) fn parse_stat(stat: &str) -> Option<(u64, u64, u64, u64, u64)> {
        // The command name is in parentheses and may hold spaces: split after its end.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3 (state); utime is field 14, stime 15, starttime 22,
        // vsize 23, rss 24.
        let get = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
        Some((get(14)?, get(15)?, get(22)?, get(23)?, get(24)?))
    }

    pub(super) fn read() -> Option<Reading> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (utime, stime, _start, vsize, rss) = parse_stat(&stat)?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| {
                l.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3))
                    .and_then(|v| v.parse().ok())
            });
        Some(Reading {
            cpu_s: (utime + stime) as f64 / TICKS_PER_S,
            rss_bytes: rss * PAGE_SIZE,
            vsize_bytes: vsize,
            open_fds,
            max_fds,
        })
    }

    /// The process start time, Unix seconds (0 when unknown).
    pub(super) fn start_time_s() -> f64 {
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        let start = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_stat(&s))
            .map(|f| f.2 as f64 / TICKS_PER_S);
        match (boot, start) {
            (Some(b), Some(s)) => b + s,
            _ => 0.0,
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn stat_fields_are_read_past_a_command_name_with_spaces() {
            let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 12345 987654321 2048 18446744073709551615";
            assert_eq!(
                super::parse_stat(stat),
                Some((250, 50, 12345, 987654321, 2048))
            );
            assert_eq!(super::parse_stat("garbage"), None);
        }

        #[test]
        fn this_process_can_be_read() {
            let r = super::read().expect("/proc/self is readable on Linux");
            assert!(r.rss_bytes > 0 && r.open_fds > 0);
            assert!(super::start_time_s() > 1.0e9);
        }
    }
}
