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

/// Declares the metric families once: each family's constant (documented by its help
/// text), its help and type for the exposition, and [`FAMILIES`]. `recorded` families go
/// through the `metrics` recorder and are described to it at install; `process` families
/// are written by [`render`] itself.
macro_rules! families {
    (
        recorded { $( $id:ident = $name:literal, $kind:ident $(($unit:ident))?, $help:literal; )* }
        process { $( $pid:ident = $pname:literal, $pkind:ident, $phelp:literal; )* }
    ) => {
        $( #[doc = $help] pub const $id: &str = $name; )*
        $( #[doc = $phelp] pub const $pid: &str = $pname; )*

        /// Every family the relay exports: (name, Prometheus type, help).
        pub const FAMILIES: &[(&str, &str, &str)] = &[
            $( ($name, families!(@type $kind), $help), )*
            $( ($pname, families!(@type $pkind), $phelp), )*
        ];

        /// Describes the recorded families to the recorder (their `# HELP` and unit).
        fn describe() {
            $( families!(@describe $kind, $id, $help $(, $unit)?); )*
        }
    };
    (@type counter) => { "counter" };
    (@type gauge) => { "gauge" };
    (@type histogram) => { "histogram" };
    (@describe counter, $id:ident, $help:literal) => { metrics::describe_counter!($id, $help) };
    (@describe gauge, $id:ident, $help:literal) => { metrics::describe_gauge!($id, $help) };
    (@describe gauge, $id:ident, $help:literal, $unit:ident) => {
        metrics::describe_gauge!($id, metrics::Unit::$unit, $help)
    };
    (@describe histogram, $id:ident, $help:literal, $unit:ident) => {
        metrics::describe_histogram!($id, metrics::Unit::$unit, $help)
    };
}

families! {
    recorded {
        INTAKE_REQUESTS = "sealrelay_intake_requests_total", counter,
            "Intake requests (protocol v1) by outcome and HTTP status.";
        INTAKE_DURATION = "sealrelay_intake_duration_seconds", histogram(Seconds),
            "Intake request duration by outcome.";
        INFLIGHT = "sealrelay_inflight_requests", gauge,
            "Intake requests being processed.";
        MAX_INFLIGHT = "sealrelay_max_inflight", gauge,
            "Intake requests processed at once before shedding (RELAY_MAX_INFLIGHT).";
        APNS_REQUESTS = "sealrelay_apns_requests_total", counter,
            "APNs requests by environment, HTTP status and reason.";
        APNS_DURATION = "sealrelay_apns_duration_seconds", histogram(Seconds),
            "APNs request duration by environment.";
        TOKEN_REFRESHES = "sealrelay_provider_token_refreshes_total", counter,
            "APNs provider tokens signed.";
        STORE_DURATION = "sealrelay_store_duration_seconds", histogram(Seconds),
            "Store operation duration by operation.";
        STORE_ERRORS = "sealrelay_store_errors_total", counter,
            "Store operation errors by operation.";
        DEGRADED = "sealrelay_degraded", gauge,
            "1 while this replica decides on its in-process store because Redis failed.";
        MEMORY_DEVICES = "sealrelay_memory_store_devices", gauge,
            "Devices held by the in-process policy store.";
        RETRY_QUEUE_DEPTH = "sealrelay_retry_queue_depth", gauge,
            "Notifications waiting in the retry queue; scope=shared is the Redis queue (same on every replica: use max), scope=local this replica's in-process queue (use sum).";
        RETRY_QUEUE_OLDEST_AGE = "sealrelay_retry_queue_oldest_age_seconds", gauge(Seconds),
            "Age of the oldest waiting notification since its acceptance.";
        RETRY_ATTEMPTS = "sealrelay_retry_attempts_total", counter,
            "Retry-queue attempts by result.";
        RETRY_UNOPENABLE = "sealrelay_retry_unopenable_total", counter,
            "Queued notifications that could not be opened (sealed under another key) and were moved aside.";
        STORE_DECODE_ERRORS = "sealrelay_store_decode_errors_total", counter,
            "Stored or published data this version could not read, by kind: counted instead of read as a default.";
        FANOUT_LAGGED = "sealrelay_fanout_lagged_total", counter,
            "Fan-out messages lost by subscribers that fell behind.";
        FANOUT_DELAY = "sealrelay_fanout_delay_seconds", histogram(Seconds),
            "Fan-out delay from publish on one replica to receipt on another.";
        SIGNED_REQUESTS = "sealrelay_signed_requests_total", counter,
            "Signed-push API requests (/v2) by route (push, receipt, events) and outcome code.";
        SIGNED_DURATION = "sealrelay_signed_duration_seconds", histogram(Seconds),
            "Time to answer a signed-push API request, by route.";
        SIGNATURE_VERIFICATIONS = "sealrelay_signature_verifications_total", counter,
            "Ed25519 signature verifications by result (valid, invalid).";
        SIGNED_REPLAYS = "sealrelay_signed_replays_total", counter,
            "Exact replays of signed pushes answered 200 with the stored receipt (nothing sent).";
        SIGNED_TAKEOVERS = "sealrelay_signed_takeovers_total", counter,
            "Replays of signed pushes that found the push's lease lapsed with targets still accepted, took it over and delivered them.";
        SIGNED_RESOLUTIONS = "sealrelay_signed_resolutions_total", counter,
            "Signed pushes settled in the background after a lost store reply, by result (started, delivered, settled, abandoned).";
        SIGNED_TARGETS = "sealrelay_signed_targets_total", counter,
            "Each signed target's first outcome, by receipt state.";
        RECEIPT_READS = "sealrelay_receipt_reads_total", counter,
            "Receipt reads by kind (receipt, events, admin).";
        EVENT_STREAMS_OPEN = "sealrelay_event_streams_open", gauge,
            "Open receipt event streams (Server-Sent Events) on this replica.";
        ADMIN_REQUESTS = "sealrelay_admin_requests_total", counter,
            "Admin API requests by transport (unix, tcp) and HTTP status.";
        MAILBOX_REQUESTS = "sealrelay_mailbox_requests_total", counter,
            "Mailbox requests by route and HTTP status.";
        MAILBOX_RATE_LIMITED = "sealrelay_mailbox_rate_limited_total", counter,
            "Mailbox requests refused 429 (or sockets closed 1008) by bucket.";
        MAILBOX_PUSHES = "sealrelay_mailbox_pushes_total", counter,
            "Pushes asked for by mailbox writes, by service and outcome (sent ones by the service's answer; skipped ones by why).";
        MAILBOX_SOCKETS_OPEN = "sealrelay_mailbox_sockets_open", gauge,
            "Open mailbox WebSockets on this replica by kind (watch, signal).";
        MAILBOX_SOCKETS_REFUSED = "sealrelay_mailbox_sockets_refused_total", counter,
            "Mailbox WebSocket upgrades refused for want of a place, by cap (mailbox: RELAY_MAILBOX_MAX_SOCKETS, 429; replica: RELAY_MAX_SOCKETS, 503).";
        REGION_HOPS = "sealrelay_region_hops_total", counter,
            "Requests this replica sent to their home region, by peer, surface (v1, mailbox, signed, admin) and outcome (answered, failed, refused, skipped_down).";
        REGION_HOP_DURATION = "sealrelay_region_hop_seconds", histogram(Seconds),
            "The time a hop to the home region added, by peer.";
        REGION_PEER_UP = "sealrelay_region_peer_up", gauge,
            "1 while this replica's probes find the peer region up, else 0.";
        REGION_FALLBACKS = "sealrelay_region_fallbacks_total", counter,
            "v1 alerts decided in this region because their home (the peer) was down or the hop failed.";
        REGION_HOPS_RECEIVED = "sealrelay_region_hops_received_total", counter,
            "Hops received on the region listener, by peer (the sending region) and outcome (accepted, unauthorized, region_set_mismatch).";
        FCM_TOKEN_REFRESHES = "sealrelay_fcm_token_refreshes_total", counter,
            "OAuth2 access tokens fetched for FCM.";
        SIGNAL_FRAMES = "sealrelay_signal_frames_total", counter,
            "Signal frames from clients by result (relayed: the other side was connected; dropped).";
        SIGNAL_BYTES = "sealrelay_signal_bytes_total", counter,
            "Signal frame bytes relayed.";
        SIGNAL_CLOSES = "sealrelay_signal_closes_total", counter,
            "Signal sockets closed by the relay, by WebSocket close code.";
        SIGNAL_FRAME_DELAY = "sealrelay_signal_frame_delay_seconds", histogram(Seconds),
            "Signal frame delay from the sending side's replica to the receiving side's.";
        ICE_REQUESTS = "sealrelay_ice_requests_total", counter,
            "ICE credentials handed out by provider (stun, coturn, cloudflare) and outcome (ok, error).";
        TRACE_EXPORT_ERRORS = "sealrelay_trace_export_errors_total", counter,
            "OTLP trace export failures.";
        BUILD_INFO = "sealrelay_build_info", gauge,
            "Build information; always 1.";
    }
    process {
        PROCESS_CPU = "process_cpu_seconds_total", counter,
            "Total user and system CPU time spent in seconds.";
        PROCESS_RSS = "process_resident_memory_bytes", gauge,
            "Resident memory size in bytes.";
        PROCESS_VSIZE = "process_virtual_memory_bytes", gauge,
            "Virtual memory size in bytes.";
        PROCESS_OPEN_FDS = "process_open_fds", gauge,
            "Number of open file descriptors.";
        PROCESS_MAX_FDS = "process_max_fds", gauge,
            "Maximum number of open file descriptors.";
        PROCESS_START = "process_start_time_seconds", gauge,
            "Start time of the process since unix epoch in seconds.";
    }
}

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
    counter!(SIGNAL_FRAMES, "result" => frame_result(relayed)).increment(1);
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
