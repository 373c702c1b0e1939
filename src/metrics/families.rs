//! Every metric family the relay exports, declared once: its constant, its help and type
//! for the exposition, and [`FAMILIES`].

/// Declares the metric families once: each family's constant (documented by its help
/// text), its help and type for the exposition, and [`FAMILIES`]. `recorded` families go
/// through the `metrics` recorder and are described to it at install; `process` families
/// are written by the exposition (`render`) itself.
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
        pub(super) fn describe() {
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
        FANOUT_MOVED = "sealrelay_fanout_moved_total", counter,
            "Fan-out channels the server unsubscribed because their Cluster slot moved, subscribed again on the new owner.";
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
