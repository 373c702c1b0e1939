//! The table of every configuration variable: name, default, kind (machine-readable, for
//! the chart's `values.schema.json`) and help. The flag parser, `check-config`, the README
//! cross-check and `scripts/gen_values_schema.py` all read it.

use super::Var;

macro_rules! vars {
    ($( $name:literal, $default:expr, $kind:literal, $help:literal; )*) => {
        /// Every configuration variable the relay reads.
        pub const VARS: &[Var] = &[ $( Var { name: $name, default: $default, kind: $kind, help: $help }, )* ];
    };
}

vars! {
    "RELAY_LISTEN", Some("0.0.0.0:8080"), "addr", "Address of the public intake listener (daemons POST here).";
    "RELAY_ADMIN_LISTEN", Some("0.0.0.0:9090"), "addr", "Address of the admin listener: /healthz, /readyz, /metrics.";
    "REDIS_URL", None, "url:redis", "Redis for shared policy state; unset runs the in-process store (one replica).";
    "RELAY_REDIS_PREFIX", Some("sealrelay:"), "string:0..64", "Prefix of every Redis key, so one Redis can serve several deployments.";
    "RELAY_REDIS_POOL_SIZE", Some("4"), "int:1..64", "Redis connections per replica (1 to 64).";
    "RELAY_REDIS_TIMEOUT_MS", Some("250"), "int:10..60000", "Timeout of one Redis command, in milliseconds (10 to 60000).";
    "RELAY_REDIS_FAILURE", Some("degrade"), "enum:degrade|reject", "degrade: on a Redis error or timeout, decide on this replica's in-process store until Redis answers again; reject: answer 503.";
    "RELAY_TOMBSTONE_TTL_S", Some("86400"), "int:0..2592000", "How long a token APNs rejected for good is answered 410 without calling APNs (0 to 2592000; 0 disables).";
    "RELAY_MAX_INFLIGHT", Some("1024"), "int:1..1000000", "Intake requests processed at once; beyond it requests get 503 with Retry-After (1 to 1000000).";
    "RELAY_IP_RATE_CAPACITY", Some("600"), "int:0..1000000", "Token bucket size per client address (IPv6 by /64); shared in Redis past its first quarter; 0 disables (0 to 1000000).";
    "RELAY_IP_RATE_REFILL_PER_S", Some("20"), "float:0.001..1000000", "Tokens per second the client-address bucket refills.";
    "RELAY_TRUSTED_PROXIES", None, "list:cidr", "Comma-separated address blocks (10.0.0.0/8, fd00::/8) whose X-Forwarded-For is honoured.";
    "RELAY_QUEUE_KEY", None, "secret", "Secret (at least 32 characters, e.g. openssl rand -base64 32) the retry queue is sealed under in Redis; unset derives it from the APNs auth key. Every replica must have the same.";
    "RELAY_RETRY_LEASE_MS", Some("30000"), "int:1000..600000", "A queued notification claimed by a replica is due again after this lease unless delivered (a replica that died mid-attempt); above twice APNS_REQUEST_TIMEOUT_MS.";
    "RELAY_HEADER_TIMEOUT_MS", Some("5000"), "int:100..120000", "Time a client has to send its request headers (100 to 120000).";
    "RELAY_BODY_TIMEOUT_MS", Some("10000"), "int:100..120000", "Time a client has to send its request body (100 to 120000).";
    "APNS_TEAM_ID", None, "appleid", "Apple developer team id (10 characters), the JWT issuer.";
    "APNS_KEY_ID", None, "appleid", "Key id of the APNs auth key (10 characters), the JWT kid.";
    "APNS_AUTH_KEY", None, "secret", "The APNs auth key (.p8 PEM text). Mutually exclusive with APNS_AUTH_KEY_FILE.";
    "APNS_AUTH_KEY_FILE", None, "path", "Path to the APNs auth key (.p8), for mounted secrets.";
    "APNS_TOPIC", None, "string:1..255", "The app's bundle id, sent as apns-topic.";
    "APNS_ENVIRONMENT", Some("auto"), "enum:auto|production|sandbox|development", "production, sandbox (development is the same: Apple's name for it in the aps-environment entitlement), or auto (try the environment a device last worked on, fall back once).";
    "APNS_PRODUCTION_URL", Some("https://api.push.apple.com"), "url:https", "Base URL of the production APNs endpoint.";
    "APNS_SANDBOX_URL", Some("https://api.sandbox.push.apple.com"), "url:https", "Base URL of the sandbox APNs endpoint.";
    "APNS_CA_FILE", None, "path", "PEM file of extra trusted roots for APNs connections (test mocks, egress proxies).";
    "APNS_REQUEST_TIMEOUT_MS", Some("10000"), "int:100..120000", "Timeout of one APNs request, connection included, in milliseconds.";
    "RELAY_DEDUP_WINDOW_S", Some("75"), "int:1..86400", "Coalesce the same (device, collapseId) within this many seconds of its last forward.";
    "RELAY_FLAP_MAX_FORWARDS", Some("6"), "int:1..10000", "Forwards of one flap key inside the flap window that cool it.";
    "RELAY_FLAP_WINDOW_S", Some("1800"), "int:1..604800", "The window, in seconds, flap forwards are counted in.";
    "RELAY_COOLDOWN_INTERVAL_S", Some("1800"), "int:1..604800", "While cooled, one reminder forward per this many seconds.";
    "RELAY_FLAP_RESET_S", Some("7200"), "int:1..604800", "Cooling ends after this many seconds without a post.";
    "RELAY_RATE_CAPACITY", Some("60"), "int:1..1000000", "Token bucket size per device (forwards it may burst).";
    "RELAY_RATE_REFILL_PER_S", Some("0.5"), "float:0.001..10000", "Tokens per second the device bucket refills.";
    "RELAY_MAX_CIPHERTEXT_CHARS", Some("3800"), "int:68..4096", "Largest accepted ciphertext; refused if the largest APNs body would exceed 4096 bytes.";
    "RELAY_AASA_APP_IDS", None, "string:1..4096", "App ids for /.well-known/apple-app-site-association, comma-separated <TEAMID>.<bundle id>; unset uses APNS_TEAM_ID.APNS_TOPIC when both are set, else the file is 404.";
    "RELAY_ALERT_TITLE", Some("cronstable"), "string:1..120", "Alert title shown only if the app's extension never runs.";
    "RELAY_ALERT_BODY", Some("New alert"), "string:1..120", "Alert body shown only if the app's extension never runs.";
    "RELAY_DRY_RUN", Some("false"), "bool", "true: without APNs credentials, log each forward instead of sending it and answer forwarded.";
    "RELAY_V1_INTAKE", Some("public"), "enum:public|local|off", "Where unsigned v1 pushes are taken: public (POST / on the public listener), local (only POST /admin/v1/push on the admin socket), off (nowhere).";
    "RELAY_V1_SUNSET", None, "string:1..64", "An HTTP date (e.g. Wed, 01 Jul 2027 00:00:00 GMT) sent verbatim as Sunset on the deprecated unsigned push of the admin socket.";
    "RELAY_RECEIPT_TTL_S", Some("604800"), "int:330..31536000", "How long signed-push ids and receipts are kept, in seconds; at least the freshness window (330 s), so a replay can never send twice.";
    "RELAY_ADMIN_SOCKET", Some("/run/sealrelay/admin.sock"), "path", "The admin API's Unix socket (mode 0600, same-user peers only); empty disables it.";
    "RELAY_ADMIN_API_LISTEN", None, "addr", "Opt-in loopback TCP address for the admin API (127.0.0.1:PORT or [::1]:PORT); needs RELAY_ADMIN_TOKEN_FILE.";
    "RELAY_ADMIN_TOKEN_FILE", None, "path", "File holding the admin API's bearer token for RELAY_ADMIN_API_LISTEN; mode 0600 or 0400, owned by the relay's user.";
    "RELAY_APPS", None, "string:1..4096", "The apps served mailboxes, ';'-separated: <app> or <app>:<option>,... with options push=<APNs topic>, signal, ice (e.g. chat:push=com.example.chat,signal,ice;notes).";
    "RELAY_MAILBOX_IDLE_S", Some("2592000"), "int:1..31536000", "A mailbox with no write and no claim for this many seconds is gone with everything in it.";
    "RELAY_MAILBOX_MAX_ENVELOPE_BYTES", Some("65536"), "int:1..1048576", "Largest envelope a mailbox stores, in bytes.";
    "RELAY_MAILBOX_MAX_ENVELOPES", Some("1000"), "int:1..100000", "Envelopes one direction of a mailbox holds at most; beyond it a PUT answers 507.";
    "FCM_SERVICE_ACCOUNT_FILE", None, "path", "The FCM service account's JSON key file; loads the FCM module. Mutually exclusive with FCM_SERVICE_ACCOUNT.";
    "FCM_SERVICE_ACCOUNT", None, "secret", "The FCM service account's JSON key as text; loads the FCM module.";
    "FCM_URL", Some("https://fcm.googleapis.com"), "url:http", "Base URL of FCM's HTTP v1 API (tests and egress proxies may stand in).";
    "FCM_CA_FILE", None, "path", "PEM file of extra trusted roots for FCM and its token endpoint (test mocks, egress proxies).";
    "RELAY_ICE_TTL_S", Some("3600"), "int:60..86400", "Lifetime of the STUN/TURN credentials the ICE extension hands out, in seconds.";
    "RELAY_ICE_STUN_URLS", None, "string:1..4096", "Comma-separated STUN URLs (stun:host:port) the ICE extension lists.";
    "RELAY_ICE_TURN_URLS", None, "string:1..4096", "Comma-separated coturn URLs (turn:host:port?transport=udp, turns:...) given credentials by the TURN REST scheme.";
    "RELAY_ICE_TURN_SECRET", None, "secret", "The coturn static-auth-secret the TURN REST credentials are derived from. Mutually exclusive with RELAY_ICE_TURN_SECRET_FILE.";
    "RELAY_ICE_TURN_SECRET_FILE", None, "path", "File holding the coturn shared secret (one trailing newline is removed).";
    "RELAY_ICE_CLOUDFLARE_KEY_ID", None, "string:1..256", "Cloudflare Realtime TURN key id; with the API token, ICE answers carry Cloudflare's credentials too.";
    "RELAY_ICE_CLOUDFLARE_API_TOKEN", None, "secret", "Cloudflare Realtime TURN API token. Mutually exclusive with RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE.";
    "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE", None, "path", "File holding the Cloudflare API token (one trailing newline is removed).";
    "RELAY_ICE_CLOUDFLARE_URL", Some("https://rtc.live.cloudflare.com"), "url:http", "Base URL of Cloudflare's Realtime API (tests and proxies may stand in).";
    "RELAY_ICE_CLOUDFLARE_CA_FILE", None, "path", "PEM file of extra trusted roots for Cloudflare's Realtime API (egress proxies, test mocks).";
    "RELAY_LOG_FORMAT", Some("json"), "enum:json|pretty", "json or pretty. Levels come from RUST_LOG (default info).";
    "RELAY_REPLICA_NAME", None, "string:1..253", "This replica's name in logs and traces; defaults to the host name (the pod name on Kubernetes).";
    "RELAY_SHUTDOWN_DELAY_S", Some("5"), "int:0..300", "After SIGTERM, keep serving this many seconds with /readyz at 503 so load balancers drain (0 to 300).";
    "RELAY_SHUTDOWN_GRACE_S", Some("25"), "int:1..600", "Then wait at most this many seconds for in-flight requests before exiting (1 to 600).";
    "OTEL_EXPORTER_OTLP_ENDPOINT", None, "url:http", "OTLP/HTTP collector base URL (http:// or https://, e.g. http://otel-collector:4318); /v1/traces is appended. Unset (and no traces endpoint) disables trace export.";
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None, "url:http", "Full URL of the collector's traces endpoint, used as is; set alone, it enables trace export.";
    "OTEL_EXPORTER_OTLP_HEADERS", None, "secret", "Headers on every export request, comma-separated key=value pairs (often an API key: never logged).";
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS", None, "secret", "Headers on trace export requests, as OTEL_EXPORTER_OTLP_HEADERS (these win).";
    "OTEL_EXPORTER_OTLP_TIMEOUT", Some("10000"), "int:1..600000", "Timeout of one export request, in milliseconds.";
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", None, "int:1..600000", "Timeout of one trace export request, in milliseconds; wins over OTEL_EXPORTER_OTLP_TIMEOUT.";
    "OTEL_EXPORTER_OTLP_PROTOCOL", Some("http/protobuf"), "enum:http/protobuf", "The only protocol this build speaks; anything else is refused rather than ignored.";
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None, "enum:http/protobuf", "As OTEL_EXPORTER_OTLP_PROTOCOL, for traces: http/protobuf or unset; anything else (grpc, http/json) is refused.";
    "OTEL_EXPORTER_OTLP_COMPRESSION", None, "enum:none", "none or unset: this build does not compress exports (gzip and zstd are refused rather than ignored).";
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", None, "enum:none", "As OTEL_EXPORTER_OTLP_COMPRESSION, for traces: none or unset.";
    "OTEL_EXPORTER_OTLP_CERTIFICATE", None, "path", "PEM file of extra trusted roots for an https:// collector (a private CA).";
    "OTEL_SERVICE_NAME", Some("sealrelay"), "string:1..255", "Service name on exported traces.";
    "OTEL_RESOURCE_ATTRIBUTES", None, "string:1..4096", "Extra resource attributes on exported traces, comma-separated key=value pairs (e.g. k8s.namespace.name=relay,deployment.environment=prod).";
    "OTEL_TRACES_SAMPLER", Some("parentbased_always_on"), "enum:always_on|always_off|traceidratio|parentbased_always_on|parentbased_always_off|parentbased_traceidratio", "Which traces are kept: the parent's decision (parentbased_*) or a ratio (traceidratio).";
    "OTEL_TRACES_SAMPLER_ARG", None, "float:0..1", "The ratio for traceidratio and parentbased_traceidratio (default 1).";
    "OTEL_BSP_SCHEDULE_DELAY", Some("5000"), "int:1..600000", "Milliseconds between two batch exports of spans.";
    "OTEL_BSP_MAX_QUEUE_SIZE", Some("2048"), "int:1..1000000", "Spans waiting for export at most; beyond it new spans are dropped.";
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", Some("512"), "int:1..1000000", "Spans per export request at most (at most OTEL_BSP_MAX_QUEUE_SIZE).";
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", Some("128"), "int:0..1000000", "Attributes one span keeps at most; more are dropped.";
    "OTEL_SPAN_EVENT_COUNT_LIMIT", Some("128"), "int:0..1000000", "Events one span keeps at most; more are dropped.";
    "OTEL_SPAN_LINK_COUNT_LIMIT", Some("128"), "int:0..1000000", "Links one span keeps at most; more are dropped.";
}
