//! Every configuration variable, once: its name, the section of the configuration
//! reference it is documented in, its default, what values it takes ([`Kind`]: the bounds
//! the readers in `src/config/*.rs` enforce) and what it does. Each is a constant named as
//! the variable (`vars::RELAY_LISTEN`), which the readers take; [`VARS`] lists them all.
//!
//! The flag parser (`src/cli/args.rs`), the unknown-name scan, `tests/it/source/docs.rs` (which renders
//! the tables of `docs/configuration.md` from this one) and `scripts/gen_values_schema.py`
//! (the chart's `values.schema.json`, parsing the rows below) all read it.

use Kind::*;

/// One configuration variable.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// The environment variable; the flag is derived from it.
    pub name: &'static str,
    /// The section of the configuration reference that documents it.
    pub section: Section,
    /// The default, as the user would write it; `None` means unset.
    pub default: Option<&'static str>,
    /// What values it takes; the readers check these bounds, and the chart's
    /// `values.schema.json` and the reference's tables repeat them.
    pub kind: Kind,
    /// What it does: the reference's text (Markdown), and `--help`'s.
    pub help: &'static str,
}

/// The character bounds of a [`Kind::Text`] variable (`(0, usize::MAX)` for another kind).
pub(crate) fn text_bounds(var: &Var) -> (usize, usize) {
    debug_assert!(
        matches!(var.kind, Kind::Text(..)),
        "{} is not text",
        var.name
    );
    match var.kind {
        Kind::Text(min, max) => (min, max),
        _ => (0, usize::MAX),
    }
}

/// What values a variable takes, as the readers check them: bounds are inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// An integer from `.0` to `.1`.
    Int(u64, u64),
    /// A finite number from `.0` to `.1`.
    Float(f64, f64),
    /// `true`/`1` or `false`/`0`.
    Bool,
    /// One of these words.
    Enum(&'static [&'static str]),
    /// A socket address, host:port.
    Addr,
    /// A Redis URL, in any of the client's forms.
    RedisUrl,
    /// An http:// or https:// URL.
    HttpUrl,
    /// An https:// URL.
    HttpsUrl,
    /// Text of `.0` to `.1` characters.
    Text(usize, usize),
    /// An Apple id: 10 of A-Z and 0-9.
    AppleId,
    /// A file's path.
    Path,
    /// A secret: never printed.
    Secret,
    /// Comma-separated address blocks (CIDR).
    CidrList,
}

impl Kind {
    /// What is allowed, for the configuration reference's tables.
    pub fn allowed(&self) -> String {
        let words = |ws: &[&str]| {
            let quoted: Vec<String> = ws.iter().map(|w| format!("`{w}`")).collect();
            match quoted.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => quoted.join(""),
            }
        };
        match self {
            Kind::Int(lo, hi) => format!("{lo} to {hi}"),
            Kind::Float(lo, hi) => format!("{lo} to {hi}"),
            Kind::Bool => words(&["true", "false"]),
            Kind::Enum(ws) => words(ws),
            Kind::Addr => "host:port".to_owned(),
            Kind::RedisUrl => "Redis URL".to_owned(),
            Kind::HttpUrl => "http(s) URL".to_owned(),
            Kind::HttpsUrl => "https URL".to_owned(),
            Kind::Text(0, max) => format!("at most {max} characters"),
            Kind::Text(min, max) => format!("{min} to {max} characters"),
            Kind::AppleId => "10 of A-Z 0-9".to_owned(),
            Kind::Path => "path".to_owned(),
            Kind::Secret => "secret".to_owned(),
            Kind::CidrList => "address blocks".to_owned(),
        }
    }
}

/// The sections of the configuration reference's variable tables, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    /// Listeners, limits and clients.
    Listen,
    /// Shared state (Redis) and the retry queue.
    Store,
    /// APNs.
    Apns,
    /// The delivery policy.
    Policy,
    /// Hosted pages.
    Pages,
    /// Signed pushes and the admin API.
    Admin,
    /// Mailboxes, push modules and ICE.
    Mailbox,
    /// Logs, shutdown and traces.
    Telemetry,
    /// Several regions, each key decided in its home region.
    Regions,
}

impl Section {
    /// Every section, in the reference's order.
    pub const ALL: [Section; 9] = [
        Section::Listen,
        Section::Store,
        Section::Apns,
        Section::Policy,
        Section::Pages,
        Section::Admin,
        Section::Mailbox,
        Section::Telemetry,
        Section::Regions,
    ];

    /// Its heading in `docs/configuration.md`.
    pub fn title(self) -> &'static str {
        match self {
            Section::Listen => "Listeners, limits and clients",
            Section::Store => "Shared state (Redis) and the retry queue",
            Section::Apns => "APNs",
            Section::Policy => "Delivery policy (v1 and signed pushes)",
            Section::Pages => "Hosted pages",
            Section::Admin => "Signed pushes and the admin API",
            Section::Mailbox => "Mailboxes, push modules and ICE",
            Section::Telemetry => "Logs, shutdown and traces",
            Section::Regions => "Regions",
        }
    }
}

macro_rules! vars {
    ($( $name:ident, $section:ident, $default:expr, $kind:expr, $help:literal; )*) => {
        $(
            #[doc = $help]
            pub const $name: Var = Var {
                name: stringify!($name),
                section: Section::$section,
                default: $default,
                kind: $kind,
                help: $help,
            };
        )*
        /// Every configuration variable the relay reads.
        pub const VARS: &[Var] = &[ $( $name, )* ];
    };
}

// The refill rates' lower bound, 0.001: with at most 1,000,000 tokens it keeps
// `emission_us * capacity` at or below 1e15, so bucket arithmetic stays exact in Lua's
// doubles and far from i64 overflow (see `src/policy/gcra.rs`). The ciphertext cap's lower
// bound, 68, is `crate::delivery::alert::MIN_CIPHERTEXT_CHARS` (a test holds them equal).
vars! {
    RELAY_LISTEN, Listen, Some("0.0.0.0:8080"), Addr,
        "Public intake listener (daemons POST here).";
    RELAY_ADMIN_LISTEN, Listen, Some("0.0.0.0:9090"), Addr,
        "Admin listener: `/healthz`, `/readyz`, `/metrics`.";
    REDIS_URL, Store, None, RedisUrl,
        "Redis for shared state; unset runs the in-process store (one replica). Forms in [Redis URLs](#redis-urls).";
    RELAY_REDIS_PREFIX, Store, Some("sealrelay:"), Text(0, 64),
        "Prefix of every Redis key, so one Redis can serve several deployments (no braces or spaces).";
    RELAY_REDIS_POOL_SIZE, Store, Some("4"), Int(1, 64),
        "Redis connections per replica (with `RELAY_RUNTIME=per-core`, divided among the cores, at least one each).";
    RELAY_REDIS_TIMEOUT_MS, Store, Some("250"), Int(10, 60_000),
        "Timeout of one Redis command, in milliseconds.";
    RELAY_REDIS_FAILURE, Store, Some("degrade"), Enum(&["degrade", "reject"]),
        "`degrade`: on a Redis error or timeout this replica decides on its in-process store until Redis answers again; `reject`: answer 503 `relay state unavailable` with `Retry-After`.";
    RELAY_TOMBSTONE_TTL_S, Policy, Some("86400"), Int(0, 2_592_000),
        "How long a token APNs rejected for good (`Unregistered`, `ExpiredToken`, `BadDeviceToken` on every environment tried) is answered 410 without calling APNs (0 disables).";
    RELAY_WORKER_THREADS, Listen, None, Int(1, 1024),
        "Threads of the relay's async runtime; unset, one per core. `1` runs the relay on one thread (a single-threaded runtime), which spends less CPU per request where a replica has about one core: scale out with replicas of one core each rather than threads.";
    RELAY_RUNTIME, Listen, Some("shared"), Enum(&["shared", "per-core"]),
        "`shared`: one async runtime whose worker threads (`RELAY_WORKER_THREADS`) share every connection and task; `per-core`: one single-threaded runtime per thread (`RELAY_WORKER_THREADS`, unset one per core), each a whole relay with its own Redis connections and APNs/FCM connections, taking connections on the same port (`SO_REUSEPORT`); needs `REDIS_URL`. The cores share one `RELAY_MAX_INFLIGHT`, one bucket per client address and the in-process policy state they decide on while degraded, and divide `RELAY_REDIS_POOL_SIZE` among them (at least one connection each).";
    RELAY_MAX_INFLIGHT, Listen, Some("1024"), Int(1, 1_000_000),
        "Intake requests (v1 `POST /` and `POST /v2/pushes`) processed at once; beyond it requests get 503 (`relay overloaded`, `/v2`: `unavailable`) with `Retry-After`.";
    RELAY_IP_RATE_CAPACITY, Listen, Some("600"), Int(0, 1_000_000),
        "Token bucket size per client address (IPv6 grouped by /64); one bucket for v1 and `/v2` (pushes and reads); over it requests get 429 (`client is rate limited`, `/v2`: `rate_limited`) with `Retry-After`. Past a quarter of it the bucket is shared in Redis. 0 disables. The default lets a daemon's fan-out of 100 devices per alert through untouched.";
    RELAY_IP_RATE_REFILL_PER_S, Listen, Some("20"), Float(0.001, 1_000_000.0),
        "Tokens per second the client-address bucket refills.";
    RELAY_TRUSTED_PROXIES, Listen, None, CidrList,
        "Comma-separated address blocks (`10.0.0.0/8,fd00::/8`) whose `X-Forwarded-For` is honoured; from anyone else the header is ignored.";
    RELAY_QUEUE_KEY, Store, None, Secret,
        "Secret (at least 32 characters, e.g. `openssl rand -base64 32`) the retry queue is sealed under in Redis. Unset, the key is derived from the APNs auth key's private scalar, so replicas agree however the key was supplied. Every replica must have the same one; an item sealed under another key is moved aside and counted (`sealrelay_retry_unopenable_total`), never delivered.";
    RELAY_RETRY_LEASE_MS, Store, Some("30000"), Int(1000, 600_000),
        "A queued notification a replica has claimed is due again after this lease unless delivered, so a replica that dies mid-attempt loses nothing; must exceed twice `APNS_REQUEST_TIMEOUT_MS`.";
    RELAY_HEADER_TIMEOUT_MS, Listen, Some("5000"), Int(100, 120_000),
        "Time a client has to send its request headers.";
    RELAY_BODY_TIMEOUT_MS, Listen, Some("10000"), Int(100, 120_000),
        "Time a client has to send its request body.";
    APNS_TEAM_ID, Apns, None, AppleId,
        "Apple developer team id (10 characters), the JWT issuer.";
    APNS_KEY_ID, Apns, None, AppleId,
        "Key id of the APNs auth key (10 characters), the JWT `kid`.";
    APNS_AUTH_KEY, Apns, None, Secret,
        "The APNs auth key (`.p8` PEM text). Mutually exclusive with `APNS_AUTH_KEY_FILE`.";
    APNS_AUTH_KEY_FILE, Apns, None, Path,
        "Path to the `.p8` key, for mounted secrets.";
    APNS_TOPIC, Apns, None, Text(1, 255),
        "The app's bundle id, sent as `apns-topic`.";
    APNS_ENVIRONMENT, Apns, Some("auto"), Enum(&["auto", "production", "sandbox", "development"]),
        "`auto`, `production`, `sandbox` or `development` (a synonym of `sandbox`). `auto` tries a device on the environment it last worked on (production at first), then the other once on `BadDeviceToken`/`DeviceTokenNotForTopic`, and remembers which one worked.";
    APNS_PRODUCTION_URL, Apns, Some("https://api.push.apple.com"), HttpsUrl,
        "Production APNs base URL.";
    APNS_SANDBOX_URL, Apns, Some("https://api.sandbox.push.apple.com"), HttpsUrl,
        "Sandbox APNs base URL.";
    APNS_CA_FILE, Apns, None, Path,
        "PEM file of extra trusted roots for APNs connections (test mocks, egress proxies).";
    APNS_REQUEST_TIMEOUT_MS, Apns, Some("10000"), Int(100, 120_000),
        "Timeout of one APNs request, connection set-up included, in milliseconds.";
    RELAY_DEDUP_WINDOW_S, Policy, Some("75"), Int(1, 86_400),
        "Coalesce the same (device, collapseId) within this many seconds of its last forward.";
    RELAY_FLAP_MAX_FORWARDS, Policy, Some("6"), Int(1, 10_000),
        "Forwards of one flap key inside the flap window that cool it.";
    RELAY_FLAP_WINDOW_S, Policy, Some("1800"), Int(1, 604_800),
        "The window flap forwards are counted in.";
    RELAY_COOLDOWN_INTERVAL_S, Policy, Some("1800"), Int(1, 604_800),
        "While cooled, one reminder forward per this many seconds.";
    RELAY_FLAP_RESET_S, Policy, Some("7200"), Int(1, 604_800),
        "Cooling ends after this many seconds without a post.";
    RELAY_RATE_CAPACITY, Policy, Some("60"), Int(1, 1_000_000),
        "Token bucket size per device.";
    RELAY_RATE_REFILL_PER_S, Policy, Some("0.5"), Float(0.001, 10_000.0),
        "Tokens per second the device bucket refills.";
    RELAY_MAX_CIPHERTEXT_CHARS, Policy, Some("3800"), Int(68, 4096),
        "Largest accepted ciphertext; refused at start-up if the largest APNs body would exceed 4096 bytes.";
    RELAY_AASA_APP_IDS, Pages, None, Text(1, 4096),
        "App ids listed in `/.well-known/apple-app-site-association` (comma-separated `<TEAMID>.<bundle id>`), so `/pair` opens the app as a universal link. Unset: `APNS_TEAM_ID.APNS_TOPIC` when both are set, else the file answers 404.";
    RELAY_ALERT_TITLE, Policy, Some("cronstable"), Text(1, 120),
        "Alert title shown only if the app's extension never runs.";
    RELAY_ALERT_BODY, Policy, Some("New alert"), Text(1, 120),
        "Alert body shown only if the app's extension never runs.";
    RELAY_DRY_RUN, Apns, Some("false"), Bool,
        "`true`: without APNs credentials, log each forward (device hash, collapse prefix, payload size) instead of sending it, and answer forwarded.";
    RELAY_V1_INTAKE, Admin, Some("public"), Enum(&["public", "local", "off"]),
        "Where unsigned v1 pushes are taken: `public` (`POST /`, as cronstable daemons post today), `local` (`POST /` answers 403 and only `POST /admin/v1/push` on the admin socket takes them), `off` (both answer 403). `local` needs the admin socket: with `RELAY_ADMIN_SOCKET` empty, or not creatable, start-up stops.";
    RELAY_V1_SUNSET, Admin, None, Text(1, 64),
        "An HTTP date (`Wed, 01 Jul 2027 00:00:00 GMT`), sent verbatim as `Sunset` on the admin socket's deprecated unsigned push.";
    RELAY_RECEIPT_TTL_S, Admin, Some("604800"), Int(331, 31_536_000),
        "How long signed-push request ids and receipts are kept, in seconds; strictly longer than the 5 min + 30 s freshness window, so a replay can never send twice, not even at the boundary.";
    RELAY_SIGNED_MAX_SETTLEMENTS, Admin, Some("1024"), Int(0, 100_000),
        "Signed pushes one replica settles in the background at once after a lost store reply; beyond it a push is left to its client's replay and its readers (counted as `left` in `sealrelay_signed_resolutions_total`).";
    RELAY_ADMIN_SOCKET, Admin, Some("/run/sealrelay/admin.sock"), Path,
        "The admin API's Unix socket: created atomically with mode 0600 in a 0700 directory, peers checked by uid (`SO_PEERCRED`). Empty disables it. When the default path cannot be created (a laptop without `/run` rights) the relay warns and runs without it; a path set explicitly must work.";
    RELAY_REGION, Regions, None, Text(1, 32),
        "This region's name, 1 to 32 of `[a-z0-9-]`. Unset: one region, and nothing else of this section applies. Set: every key (a v1 device, a mailbox, a signer) has one home region, chosen by rendezvous hashing over the region names, and is decided there.";
    RELAY_REGION_PEERS, Regions, None, Text(1, 4096),
        "Every other region, `name=url` separated by commas (`us-east=https://relay-internal.us-east.example:9443`): the URL of that region's region listener. `http://` is allowed on a private network. Every region must list the same set of names.";
    RELAY_REGION_LISTEN, Regions, None, Addr,
        "The region listener, where other regions' hops land (`0.0.0.0:9443`); never expose it publicly. Needed with `RELAY_REGION`.";
    RELAY_REGION_KEY_FILE, Regions, None, Path,
        "A shared secret of at least 32 bytes that authenticates every hop (HMAC-SHA256); the file must be mode 0600 or 0400, owned by the relay's user and not a symbolic link. Needed with `RELAY_REGION`.";
    RELAY_REGION_KEY_PREVIOUS_FILE, Regions, None, Path,
        "Optional: the key being retired, same rules. Hops are signed with the current key and accepted under either, so a key is rotated without a refused hop.";
    RELAY_REGION_CA_FILE, Regions, None, Path,
        "PEM file of extra roots to trust for `https://` peers (a private CA); Mozilla's roots stay trusted.";
    RELAY_REGION_TLS_CERT_FILE, Regions, None, Path,
        "PEM certificate chain of the region listener: with `RELAY_REGION_TLS_KEY_FILE` it serves TLS (HTTP/2 and HTTP/1.1 by ALPN). Unset: plain HTTP (a private network or a mesh that supplies TLS).";
    RELAY_REGION_TLS_KEY_FILE, Regions, None, Path,
        "PEM private key of that certificate. Set both or neither.";
    RELAY_REGION_TIMEOUT_MS, Regions, Some("1000"), Int(50, 60_000),
        "A hop's whole deadline; past it the hop has failed (v1 then decides here, the other surfaces answer 503).";
    RELAY_REGION_PROBE_MS, Regions, Some("1000"), Int(100, 60_000),
        "How often each replica probes each peer's `/readyz` on its region listener; a peer is down after three failed probes in a row (or one failed connect), up after one good probe.";
    RELAY_ADMIN_API_LISTEN, Admin, None, Addr,
        "Opt-in loopback TCP listener for the admin API (`127.0.0.1:9091`); anything but a loopback address stops start-up. Needs `RELAY_ADMIN_TOKEN_FILE`.";
    RELAY_ADMIN_TOKEN_FILE, Admin, None, Path,
        "The admin API's bearer token over TCP; the file must be mode 0600 or 0400, owned by the relay's user and not a symbolic link, else start-up stops.";
    RELAY_APPS, Mailbox, None, Text(1, 4096),
        "Apps served mailboxes, `;`-separated: `<app>` or `<app>:<option>,...`; options `push=<APNs topic>`, `signal`, `ice` (`chat:push=com.example.chat,signal,ice;notes`). Unset: every `/v1/...` path is 404.";
    RELAY_MAILBOX_IDLE_S, Mailbox, Some("2592000"), Int(1, 31_536_000),
        "A mailbox with no write and no claim for this many seconds is gone with everything in it.";
    RELAY_MAILBOX_MAX_ENVELOPE_BYTES, Mailbox, Some("65536"), Int(1, 1_048_576),
        "Largest envelope stored, in bytes; larger PUTs answer 413.";
    RELAY_MAILBOX_MAX_ENVELOPES, Mailbox, Some("1000"), Int(1, 100_000),
        "Envelopes one direction holds at most; beyond it PUT answers 507.";
    RELAY_MAILBOX_MAX_SOCKETS, Mailbox, Some("16"), Int(1, 1024),
        "Watch and signal sockets of one mailbox open at once on one replica; one more is answered 429 `rate_limited` with `Retry-After: 1`.";
    RELAY_MAX_SOCKETS, Mailbox, Some("20000"), Int(1, 1_000_000),
        "WebSockets (watch and signal) open at once on one replica; one more is answered 503 `unavailable` with `Retry-After: 1`.";
    RELAY_SOCKET_PING_S, Mailbox, Some("30"), Int(1, 300),
        "Seconds between the WebSocket Pings the relay sends on every watch and signal socket; a socket from which nothing (no frame, no Pong) arrived for twice this is closed with 1001, and a public connection whose writes make no progress for twice this is closed.";
    RELAY_SIGNAL_BUFFER_BYTES, Mailbox, Some("1048576"), Int(65_536, 67_108_864),
        "Bytes of frames a signal socket may have waiting to be sent to its client; a receiver over it (one that stopped reading) is closed with 1008.";
    FCM_SERVICE_ACCOUNT_FILE, Mailbox, None, Path,
        "The FCM service account's JSON key file: loads the FCM push module. Exclusive with `FCM_SERVICE_ACCOUNT`.";
    FCM_SERVICE_ACCOUNT, Mailbox, None, Secret,
        "The same JSON key as text.";
    FCM_URL, Mailbox, Some("https://fcm.googleapis.com"), HttpUrl,
        "Base URL of FCM's HTTP v1 API (tests and egress proxies may stand in).";
    FCM_CA_FILE, Mailbox, None, Path,
        "PEM file of extra trusted roots for FCM and its OAuth2 token endpoint.";
    RELAY_ICE_TTL_S, Mailbox, Some("3600"), Int(60, 86_400),
        "Lifetime of handed-out STUN/TURN credentials, in seconds.";
    RELAY_ICE_STUN_URLS, Mailbox, None, Text(1, 4096),
        "Comma-separated STUN URLs (`stun:stun.example.com:3478`).";
    RELAY_ICE_TURN_URLS, Mailbox, None, Text(1, 4096),
        "Comma-separated coturn URLs (`turn:turn.example.com:3478?transport=udp`), given credentials by the TURN REST scheme.";
    RELAY_ICE_TURN_SECRET, Mailbox, None, Secret,
        "coturn's `static-auth-secret`. Exclusive with `RELAY_ICE_TURN_SECRET_FILE`.";
    RELAY_ICE_TURN_SECRET_FILE, Mailbox, None, Path,
        "File holding it (one trailing newline removed).";
    RELAY_ICE_CLOUDFLARE_KEY_ID, Mailbox, None, Text(1, 256),
        "Cloudflare Realtime TURN key id; with the API token, Cloudflare's ICE servers are appended.";
    RELAY_ICE_CLOUDFLARE_API_TOKEN, Mailbox, None, Secret,
        "Cloudflare Realtime TURN API token. Exclusive with `RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE`.";
    RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE, Mailbox, None, Path,
        "File holding it (one trailing newline removed).";
    RELAY_ICE_CLOUDFLARE_URL, Mailbox, Some("https://rtc.live.cloudflare.com"), HttpUrl,
        "Base URL of Cloudflare's Realtime API (tests and proxies may stand in).";
    RELAY_ICE_CLOUDFLARE_CA_FILE, Mailbox, None, Path,
        "PEM file of extra trusted roots for Cloudflare's Realtime API (egress proxies, test mocks); the Mozilla roots stay trusted.";
    RELAY_LOG_FORMAT, Telemetry, Some("json"), Enum(&["json", "pretty"]),
        "`json` or `pretty`; levels from `RUST_LOG` (default `info`).";
    RELAY_REPLICA_NAME, Telemetry, None, Text(1, 253),
        "This replica's name in logs and traces; unset, the host name (the pod name on Kubernetes).";
    RELAY_SHUTDOWN_DELAY_S, Telemetry, Some("5"), Int(0, 300),
        "After SIGTERM, keep serving this many seconds with `/readyz` at 503 so load balancers drain.";
    RELAY_SHUTDOWN_GRACE_S, Telemetry, Some("25"), Int(1, 600),
        "Then wait at most this many seconds for in-flight requests before exiting.";
    OTEL_EXPORTER_OTLP_ENDPOINT, Telemetry, None, HttpUrl,
        "OTLP/HTTP collector base URL, `http://` or `https://` (`http://otel-collector:4318`); `/v1/traces` is appended. Unset, and without a traces endpoint, no trace is exported.";
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, Telemetry, None, HttpUrl,
        "The collector's traces endpoint, used as is (`https://collector:4318/v1/traces`); set alone, it enables export.";
    OTEL_EXPORTER_OTLP_HEADERS, Telemetry, None, Secret,
        "Headers on every export request, `key=value,key=value` (an API key, usually: never logged).";
    OTEL_EXPORTER_OTLP_TRACES_HEADERS, Telemetry, None, Secret,
        "Headers on trace exports, as above; they win over `OTEL_EXPORTER_OTLP_HEADERS`.";
    OTEL_EXPORTER_OTLP_TIMEOUT, Telemetry, Some("10000"), Int(1, 600_000),
        "Timeout of one export request, in milliseconds.";
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, Telemetry, None, Int(1, 600_000),
        "Timeout of one trace export request, in milliseconds; wins over `OTEL_EXPORTER_OTLP_TIMEOUT`.";
    OTEL_EXPORTER_OTLP_PROTOCOL, Telemetry, Some("http/protobuf"), Enum(&["http/protobuf"]),
        "The only protocol this build speaks; any other value stops start-up instead of being ignored.";
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, Telemetry, None, Enum(&["http/protobuf"]),
        "The same for traces: `http/protobuf` or unset; anything else (`grpc`, `http/json`) stops start-up.";
    OTEL_EXPORTER_OTLP_COMPRESSION, Telemetry, None, Enum(&["none"]),
        "`none` or unset: this build does not compress exports; `gzip` and `zstd` stop start-up instead of being ignored.";
    OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, Telemetry, None, Enum(&["none"]),
        "The same for traces: `none` or unset.";
    OTEL_EXPORTER_OTLP_CERTIFICATE, Telemetry, None, Path,
        "PEM file of extra trusted roots for an `https://` collector behind a private CA.";
    OTEL_SERVICE_NAME, Telemetry, Some("sealrelay"), Text(1, 255),
        "Service name on exported traces.";
    OTEL_RESOURCE_ATTRIBUTES, Telemetry, None, Text(1, 4096),
        "Extra resource attributes, `key=value,key=value` (the chart sets `k8s.namespace.name` and `k8s.pod.name`).";
    OTEL_TRACES_SAMPLER, Telemetry, Some("parentbased_always_on"), Enum(&["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"]),
        "`always_on`, `always_off`, `traceidratio`, `parentbased_always_on`, `parentbased_always_off` or `parentbased_traceidratio`.";
    OTEL_TRACES_SAMPLER_ARG, Telemetry, None, Float(0.0, 1.0),
        "The ratio of the ratio samplers; 1 when unset.";
    OTEL_BSP_SCHEDULE_DELAY, Telemetry, Some("5000"), Int(1, 600_000),
        "Milliseconds between two batch exports.";
    OTEL_BSP_MAX_QUEUE_SIZE, Telemetry, Some("2048"), Int(1, 1_000_000),
        "Spans waiting for export at most; beyond it new spans are dropped.";
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE, Telemetry, Some("512"), Int(1, 1_000_000),
        "Spans per export request at most (at most the queue size).";
    OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, Telemetry, Some("128"), Int(0, 1_000_000),
        "Attributes one span keeps at most; more are dropped.";
    OTEL_SPAN_EVENT_COUNT_LIMIT, Telemetry, Some("128"), Int(0, 1_000_000),
        "Events one span keeps at most; more are dropped.";
    OTEL_SPAN_LINK_COUNT_LIMIT, Telemetry, Some("128"), Int(0, 1_000_000),
        "Links one span keeps at most; more are dropped.";
}
