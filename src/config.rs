//! One typed, validated configuration, built once at start-up.
//!
//! Every setting is an environment variable and also a command-line flag (the variable's
//! name, lowercased, with `-` for `_`: `RELAY_LISTEN` is `--relay-listen`). [`VARS`] is the
//! single list of them: the flag parser, `check-config` and the test that cross-checks the
//! README table and the Helm chart all read it.
//!
//! A malformed or out-of-range value stops start-up with a message that names the variable,
//! the value and what is allowed; nothing silently falls back to a default. Secrets (the
//! APNs signing key) are wrapped in [`Secret`] so they never print.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::apns::payload;
use crate::envelope::{DEFAULT_MAX_CIPHERTEXT_CHARS, MIN_CIPHERTEXT_CHARS};
use crate::policy::Policy;
pub use crate::store::redis::RedisSettings;

/// One configuration variable.
#[derive(Debug)]
pub struct Var {
    /// The environment variable; the flag is derived from it.
    pub name: &'static str,
    /// The default, as the user would write it; `None` means unset.
    pub default: Option<&'static str>,
    /// What values it takes, machine-readable, for the chart's `values.schema.json`:
    /// `int:LO..HI`, `float:LO..HI` (LO exclusive when 0), `bool`, `enum:a|b`, `addr`
    /// (host:port), `url:SCHEME` (`redis` takes every Redis form, `http` takes http and
    /// https), `string:MIN..MAX` (characters), `appleid` (10 of A-Z0-9), `path`, `secret`,
    /// `list:cidr` (comma-separated).
    pub kind: &'static str,
    /// What it does, for `--help`.
    pub help: &'static str,
}

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
    "RELAY_RETRY_LEASE_MS", Some("30000"), "int:1000..600000", "A queued notification claimed by a replica is due again after this lease unless delivered (a replica that died mid-attempt); above twice APNS_REQUEST_TIMEOUT_MS.";
    "RELAY_HEADER_TIMEOUT_MS", Some("5000"), "int:100..120000", "Time a client has to send its request headers (100 to 120000).";
    "RELAY_BODY_TIMEOUT_MS", Some("10000"), "int:100..120000", "Time a client has to send its request body (100 to 120000).";
    "APNS_TEAM_ID", None, "appleid", "Apple developer team id (10 characters), the JWT issuer.";
    "APNS_KEY_ID", None, "appleid", "Key id of the APNs auth key (10 characters), the JWT kid.";
    "APNS_AUTH_KEY", None, "secret", "The APNs auth key (.p8 PEM text). Mutually exclusive with APNS_AUTH_KEY_FILE.";
    "APNS_AUTH_KEY_FILE", None, "path", "Path to the APNs auth key (.p8), for mounted secrets.";
    "APNS_TOPIC", None, "string:1..255", "The app's bundle id, sent as apns-topic.";
    "APNS_ENVIRONMENT", Some("auto"), "enum:auto|production|sandbox|development", "production, sandbox, or auto (try the environment a device last worked on, fall back once).";
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
    "RELAY_ALERT_TITLE", Some("cronstable"), "string:1..120", "Alert title shown only if the app's extension never runs.";
    "RELAY_ALERT_BODY", Some("New alert"), "string:1..120", "Alert body shown only if the app's extension never runs.";
    "RELAY_DRY_RUN", Some("false"), "bool", "true: without APNs credentials, log each forward instead of sending it and answer forwarded.";
    "RELAY_LOG_FORMAT", Some("json"), "enum:json|pretty", "json or pretty. Levels come from RUST_LOG (default info).";
    "RELAY_REPLICA_NAME", None, "string:1..253", "This replica's name in logs and traces; defaults to the host name (the pod name on Kubernetes).";
    "RELAY_SHUTDOWN_DELAY_S", Some("5"), "int:0..300", "After SIGTERM, keep serving this many seconds with /readyz at 503 so load balancers drain (0 to 300).";
    "RELAY_SHUTDOWN_GRACE_S", Some("25"), "int:1..600", "Then wait at most this many seconds for in-flight requests before exiting (1 to 600).";
    "OTEL_EXPORTER_OTLP_ENDPOINT", None, "url:http", "OTLP/HTTP collector base URL (e.g. http://otel-collector:4318); unset disables trace export. Other standard OTEL_* variables are honoured.";
    "OTEL_SERVICE_NAME", Some("sealrelay"), "string:1..255", "Service name on exported traces.";
}

/// Looks a variable's value up (flag or environment); `None` when unset.
pub trait Lookup {
    /// The raw value of `name`, if set.
    fn get(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> Lookup for F {
    fn get(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// A value that must never be printed.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: String) -> Self {
        Self(s)
    }

    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `APNS_ENVIRONMENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvironmentMode {
    /// Always production.
    Production,
    /// Always sandbox.
    Sandbox,
    /// The environment the device last worked on (production at first), then the other
    /// once on `BadDeviceToken` / `DeviceTokenNotForTopic`.
    Auto,
}

/// The relay's own APNs credentials.
#[derive(Debug, Clone)]
pub struct ApnsCredentials {
    /// JWT `iss`.
    pub team_id: String,
    /// JWT header `kid`.
    pub key_id: String,
    /// The PKCS#8 PEM of the ES256 signing key.
    pub key_pem: Secret,
    /// `apns-topic`.
    pub topic: String,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable.
    Pretty,
}

/// What the relay does with a forward.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// Send to APNs with these credentials.
    Apns(ApnsCredentials),
    /// No credentials, `RELAY_DRY_RUN=true`: log and answer forwarded.
    DryRun,
    /// No credentials: answer 502 "relay is not configured for APNs delivery".
    Unconfigured,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Public intake listener.
    pub listen: SocketAddr,
    /// Admin listener.
    pub admin_listen: SocketAddr,
    /// Redis (shared state), or the in-process store when `None`.
    pub redis: Option<RedisSettings>,
    /// What a replica does when Redis fails.
    pub redis_failure: crate::store::RedisFailure,
    /// How long a dead token is remembered, ms (0: never).
    pub tombstone_ttl_ms: i64,
    /// Intake requests processed at once.
    pub max_inflight: usize,
    /// Per-client-address bucket: capacity (0: off) and refill per second.
    pub ip_rate: (u32, f64),
    /// Proxies whose X-Forwarded-For is honoured.
    pub trusted_proxies: Vec<crate::clients::Cidr>,
    /// A claimed retry-queue item is due again after this lease, ms.
    pub retry_lease_ms: i64,
    /// Time a client has to send its request headers.
    pub header_timeout: Duration,
    /// Time a client has to send its request body.
    pub body_timeout: Duration,
    /// How forwards are delivered.
    pub delivery: Delivery,
    /// Which APNs environment(s) to use.
    pub environment: EnvironmentMode,
    /// Production endpoint base URL, without a trailing slash.
    pub production_url: String,
    /// Sandbox endpoint base URL, without a trailing slash.
    pub sandbox_url: String,
    /// Extra trusted roots (PEM), already read.
    pub ca_file: Option<PathBuf>,
    /// One APNs request's timeout.
    pub apns_timeout: Duration,
    /// The delivery policy.
    pub policy: Policy,
    /// Ciphertext cap.
    pub max_ciphertext_chars: usize,
    /// Stub title.
    pub alert_title: String,
    /// Stub body.
    pub alert_body: String,
    /// Log format.
    pub log_format: LogFormat,
    /// This replica's name in logs and traces.
    pub replica_name: String,
    /// After SIGTERM: serve this long with `/readyz` at 503.
    pub shutdown_delay: Duration,
    /// Then wait at most this long for in-flight requests.
    pub shutdown_grace: Duration,
    /// OTLP/HTTP collector base URL; `None` disables trace export.
    pub otlp_endpoint: Option<String>,
    /// Service name on exported traces.
    pub otel_service_name: String,
}

/// Everything wrong with a configuration, one line per problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

struct Reader<'a> {
    lookup: &'a dyn Lookup,
    errors: Vec<String>,
}

impl Reader<'_> {
    fn raw(&self, name: &str) -> Option<String> {
        self.lookup.get(name).map(|v| v.trim().to_owned())
    }

    /// The value, or the variable's default.
    fn value(&self, name: &str) -> Option<String> {
        self.raw(name).or_else(|| {
            VARS.iter()
                .find(|v| v.name == name)
                .and_then(|v| v.default)
                .map(str::to_owned)
        })
    }

    fn set(&self, name: &str) -> Option<String> {
        self.raw(name).filter(|v| !v.is_empty())
    }

    fn fail(&mut self, name: &str, value: &str, allowed: &str) {
        self.errors
            .push(format!("{name}={value:?} is not valid: {allowed}"));
    }

    fn parse<T: std::str::FromStr>(&mut self, name: &str, allowed: &str) -> Option<T> {
        let v = self.value(name)?;
        match v.parse() {
            Ok(t) => Some(t),
            Err(_) => {
                self.fail(name, &v, allowed);
                None
            }
        }
    }

    fn int(&mut self, name: &str, lo: u64, hi: u64) -> u64 {
        let allowed = format!("an integer from {lo} to {hi}");
        match self.parse::<u64>(name, &allowed) {
            Some(n) if (lo..=hi).contains(&n) => n,
            Some(n) => {
                self.fail(name, &n.to_string(), &allowed);
                lo
            }
            None => lo,
        }
    }

    fn addr(&mut self, name: &str) -> SocketAddr {
        self.parse(name, "a socket address such as 0.0.0.0:8080 or [::]:8080")
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    fn bool(&mut self, name: &str) -> bool {
        match self.value(name).as_deref() {
            Some("true") | Some("1") => true,
            Some("false") | Some("0") | Some("") | None => false,
            Some(other) => {
                let other = other.to_owned();
                self.fail(name, &other, "true or false");
                false
            }
        }
    }

    fn url(&mut self, name: &str) -> String {
        let v = self.value(name).unwrap_or_default();
        let ok = v
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
        if !ok {
            self.fail(
                name,
                &v,
                "an https:// URL such as https://api.push.apple.com",
            );
        }
        v.trim_end_matches('/').to_owned()
    }
}

fn is_apple_id(s: &str) -> bool {
    s.len() == 10
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

impl Config {
    /// Reads and validates every variable; returns all problems at once.
    pub fn load(lookup: &dyn Lookup) -> Result<Self, ConfigErrors> {
        let mut r = Reader {
            lookup,
            errors: Vec::new(),
        };
        let listen = r.addr("RELAY_LISTEN");
        let admin_listen = r.addr("RELAY_ADMIN_LISTEN");
        let redis = Self::redis(&mut r);
        let redis_failure = match r.value("RELAY_REDIS_FAILURE").as_deref() {
            Some("degrade") => crate::store::RedisFailure::Degrade,
            Some("reject") => crate::store::RedisFailure::Reject,
            other => {
                let v = other.unwrap_or_default().to_owned();
                r.fail("RELAY_REDIS_FAILURE", &v, "degrade or reject");
                crate::store::RedisFailure::Degrade
            }
        };
        let tombstone_ttl_ms = r.int("RELAY_TOMBSTONE_TTL_S", 0, 2_592_000) as i64 * 1000;
        let max_inflight = r.int("RELAY_MAX_INFLIGHT", 1, 1_000_000) as usize;
        let header_timeout = Duration::from_millis(r.int("RELAY_HEADER_TIMEOUT_MS", 100, 120_000));
        let body_timeout = Duration::from_millis(r.int("RELAY_BODY_TIMEOUT_MS", 100, 120_000));

        let environment = match r.value("APNS_ENVIRONMENT").as_deref() {
            Some("auto") => EnvironmentMode::Auto,
            Some("production") => EnvironmentMode::Production,
            Some("sandbox") | Some("development") => EnvironmentMode::Sandbox,
            other => {
                let v = other.unwrap_or_default().to_owned();
                r.fail("APNS_ENVIRONMENT", &v, "production, sandbox or auto");
                EnvironmentMode::Auto
            }
        };
        let production_url = r.url("APNS_PRODUCTION_URL");
        let sandbox_url = r.url("APNS_SANDBOX_URL");
        let ca_file = r.set("APNS_CA_FILE").map(PathBuf::from);
        if let Some(path) = &ca_file {
            match std::fs::read_to_string(path) {
                Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => {}
                Ok(_) => r.errors.push(format!(
                    "APNS_CA_FILE={} is not valid: it holds no PEM certificate",
                    path.display()
                )),
                Err(e) => r.errors.push(format!(
                    "APNS_CA_FILE={} cannot be read: {e}",
                    path.display()
                )),
            }
        }
        let apns_timeout = Duration::from_millis(r.int("APNS_REQUEST_TIMEOUT_MS", 100, 120_000));

        let dedup = r.int("RELAY_DEDUP_WINDOW_S", 1, 86_400);
        let flap_max = r.int("RELAY_FLAP_MAX_FORWARDS", 1, 10_000) as u32;
        let flap_window = r.int("RELAY_FLAP_WINDOW_S", 1, 604_800);
        let cooldown = r.int("RELAY_COOLDOWN_INTERVAL_S", 1, 604_800);
        let reset = r.int("RELAY_FLAP_RESET_S", 1, 604_800);
        let capacity = r.int("RELAY_RATE_CAPACITY", 1, 1_000_000) as u32;
        let refill_allowed = "a number greater than 0 and at most 10000";
        let refill = match r.parse::<f64>("RELAY_RATE_REFILL_PER_S", refill_allowed) {
            Some(x) if x.is_finite() && x > 0.0 && x <= 10_000.0 => x,
            Some(x) => {
                r.fail("RELAY_RATE_REFILL_PER_S", &x.to_string(), refill_allowed);
                1.0
            }
            None => 1.0,
        };
        let policy = Policy::from_seconds(
            dedup,
            flap_max,
            flap_window,
            cooldown,
            reset,
            capacity,
            refill,
        );

        let alert_title = r.value("RELAY_ALERT_TITLE").unwrap_or_default();
        let alert_body = r.value("RELAY_ALERT_BODY").unwrap_or_default();
        for (name, text) in [
            ("RELAY_ALERT_TITLE", &alert_title),
            ("RELAY_ALERT_BODY", &alert_body),
        ] {
            if text.is_empty() || text.chars().count() > 120 {
                r.fail(name, text, "1 to 120 characters");
            }
        }
        let max_ciphertext_chars = r.int(
            "RELAY_MAX_CIPHERTEXT_CHARS",
            MIN_CIPHERTEXT_CHARS as u64,
            4096,
        ) as usize;
        let largest = payload::largest_body_len(max_ciphertext_chars, &alert_title, &alert_body);
        if largest > payload::APNS_MAX_BODY_BYTES {
            let room = payload::max_ciphertext_for(&alert_title, &alert_body);
            r.errors.push(format!(
                "RELAY_MAX_CIPHERTEXT_CHARS={max_ciphertext_chars} is not valid: the largest APNs body would be {largest} bytes, over Apple's 4096; with this alert title and body at most {room} characters fit (the default is {DEFAULT_MAX_CIPHERTEXT_CHARS})"
            ));
        }

        let dry_run = r.bool("RELAY_DRY_RUN");
        let log_format = match r.value("RELAY_LOG_FORMAT").as_deref() {
            Some("json") => LogFormat::Json,
            Some("pretty") => LogFormat::Pretty,
            other => {
                let v = other.unwrap_or_default().to_owned();
                r.fail("RELAY_LOG_FORMAT", &v, "json or pretty");
                LogFormat::Json
            }
        };

        let delivery = Self::delivery(&mut r, dry_run);
        let ip_capacity = r.int("RELAY_IP_RATE_CAPACITY", 0, 1_000_000) as u32;
        let ip_allowed = "a number greater than 0 and at most 1000000";
        let ip_refill = match r.parse::<f64>("RELAY_IP_RATE_REFILL_PER_S", ip_allowed) {
            Some(x) if x.is_finite() && x > 0.0 && x <= 1_000_000.0 => x,
            Some(x) => {
                r.fail("RELAY_IP_RATE_REFILL_PER_S", &x.to_string(), ip_allowed);
                1.0
            }
            None => 1.0,
        };
        let trusted_proxies = match crate::clients::parse_trusted(
            &r.value("RELAY_TRUSTED_PROXIES").unwrap_or_default(),
        ) {
            Ok(t) => t,
            Err(bad) => {
                r.fail(
                    "RELAY_TRUSTED_PROXIES",
                    &bad,
                    "comma-separated addresses or blocks such as 10.0.0.0/8, fd00::/8",
                );
                Vec::new()
            }
        };
        let retry_lease_ms = r.int("RELAY_RETRY_LEASE_MS", 1000, 600_000) as i64;
        if retry_lease_ms <= 2 * apns_timeout.as_millis() as i64 {
            r.errors.push(format!(
                "RELAY_RETRY_LEASE_MS={retry_lease_ms} is not valid: it must exceed twice APNS_REQUEST_TIMEOUT_MS ({} ms), or a slow attempt would be retried by another replica while still running",
                apns_timeout.as_millis()
            ));
        }

        let replica_name = r
            .set("RELAY_REPLICA_NAME")
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "sealrelay".to_owned());
        if replica_name.len() > 253 || replica_name.contains(char::is_whitespace) {
            r.fail(
                "RELAY_REPLICA_NAME",
                &replica_name,
                "a host-name-like string without spaces",
            );
        }
        let shutdown_delay = Duration::from_secs(r.int("RELAY_SHUTDOWN_DELAY_S", 0, 300));
        let shutdown_grace = Duration::from_secs(r.int("RELAY_SHUTDOWN_GRACE_S", 1, 600));
        let otlp_endpoint = r.set("OTEL_EXPORTER_OTLP_ENDPOINT");
        if let Some(e) = &otlp_endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                r.fail(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    e,
                    "an http:// or https:// URL of an OTLP/HTTP collector",
                );
            }
        }
        let otel_service_name = r.value("OTEL_SERVICE_NAME").unwrap_or_default();

        if r.errors.is_empty() {
            Ok(Config {
                listen,
                admin_listen,
                redis,
                redis_failure,
                tombstone_ttl_ms,
                max_inflight,
                ip_rate: (ip_capacity, ip_refill),
                trusted_proxies,
                retry_lease_ms,
                header_timeout,
                body_timeout,
                delivery,
                environment,
                production_url,
                sandbox_url,
                ca_file,
                apns_timeout,
                policy,
                max_ciphertext_chars,
                alert_title,
                alert_body,
                log_format,
                replica_name,
                shutdown_delay,
                shutdown_grace,
                otlp_endpoint,
                otel_service_name,
            })
        } else {
            Err(ConfigErrors(r.errors))
        }
    }

    fn redis(r: &mut Reader<'_>) -> Option<RedisSettings> {
        let prefix = r.value("RELAY_REDIS_PREFIX").unwrap_or_default();
        if prefix.len() > 64 || prefix.contains(['{', '}']) || prefix.contains(char::is_whitespace)
        {
            r.fail(
                "RELAY_REDIS_PREFIX",
                &prefix,
                "at most 64 characters, without braces or spaces",
            );
        }
        let pool_size = r.int("RELAY_REDIS_POOL_SIZE", 1, 64) as usize;
        let timeout = Duration::from_millis(r.int("RELAY_REDIS_TIMEOUT_MS", 10, 60_000));
        let url = r.set("REDIS_URL")?;
        // Parsed the way the client will parse it; the URL may hold a password, so the
        // message never repeats it.
        if let Err(e) = fred::types::config::Config::from_url(&url) {
            r.errors.push(format!(
                "REDIS_URL is not valid: {}; use redis://, rediss:// (TLS), redis-cluster://host:port?node=host:port or redis-sentinel://host:port?sentinelServiceName=name",
                e.details()
            ));
        }
        Some(RedisSettings {
            url,
            prefix,
            pool_size,
            timeout,
        })
    }

    fn delivery(r: &mut Reader<'_>, dry_run: bool) -> Delivery {
        let team_id = r.set("APNS_TEAM_ID");
        let key_id = r.set("APNS_KEY_ID");
        let key_text = r.set("APNS_AUTH_KEY");
        let key_file = r.set("APNS_AUTH_KEY_FILE");
        let topic = r.set("APNS_TOPIC");
        if key_text.is_some() && key_file.is_some() {
            r.errors.push(
                "APNS_AUTH_KEY and APNS_AUTH_KEY_FILE are both set: set exactly one".to_owned(),
            );
            return Delivery::Unconfigured;
        }
        let has_key = key_text.is_some() || key_file.is_some();
        let present = [
            team_id.is_some(),
            key_id.is_some(),
            has_key,
            topic.is_some(),
        ];
        if present.iter().all(|p| !p) {
            return if dry_run {
                Delivery::DryRun
            } else {
                Delivery::Unconfigured
            };
        }
        if !present.iter().all(|p| *p) {
            let names = [
                "APNS_TEAM_ID",
                "APNS_KEY_ID",
                "APNS_AUTH_KEY or APNS_AUTH_KEY_FILE",
                "APNS_TOPIC",
            ];
            let missing: Vec<_> = names
                .iter()
                .zip(present)
                .filter(|(_, p)| !p)
                .map(|(n, _)| *n)
                .collect();
            r.errors.push(format!(
                "APNs credentials are incomplete: {} not set (set all of APNS_TEAM_ID, APNS_KEY_ID, APNS_AUTH_KEY or APNS_AUTH_KEY_FILE, APNS_TOPIC, or none)",
                missing.join(", ")
            ));
            return Delivery::Unconfigured;
        }
        if dry_run {
            r.errors.push(
                "RELAY_DRY_RUN=true is not valid with APNs credentials set: unset one of them"
                    .to_owned(),
            );
        }
        let (team_id, key_id, topic) = (team_id.unwrap(), key_id.unwrap(), topic.unwrap());
        for (name, v) in [("APNS_TEAM_ID", &team_id), ("APNS_KEY_ID", &key_id)] {
            if !is_apple_id(v) {
                r.fail(name, v, "10 characters of A-Z and 0-9, as Apple shows it");
            }
        }
        if topic.contains(char::is_whitespace) || topic.len() > 255 {
            r.fail("APNS_TOPIC", &topic, "the app's bundle id, without spaces");
        }
        let key_pem = match (key_text, key_file) {
            (Some(text), None) => text.replace("\\n", "\n"),
            (None, Some(path)) => match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    r.errors
                        .push(format!("APNS_AUTH_KEY_FILE={path} cannot be read: {e}"));
                    String::new()
                }
            },
            _ => unreachable!("checked above"),
        };
        if !key_pem.is_empty() {
            if let Err(e) = crate::apns::token::check_key(&key_pem) {
                let var = if r.set("APNS_AUTH_KEY").is_some() {
                    "APNS_AUTH_KEY"
                } else {
                    "APNS_AUTH_KEY_FILE"
                };
                r.errors.push(format!(
                    "{var} is not valid: {e}; it must be the .p8 PEM (BEGIN PRIVATE KEY) of an APNs auth key"
                ));
            }
        }
        Delivery::Apns(ApnsCredentials {
            team_id,
            key_id,
            key_pem: Secret::new(key_pem),
            topic,
        })
    }

    /// The defaults, for tests: in-process store, no credentials.
    pub fn for_tests() -> Self {
        let none = |_: &str| None;
        let mut c = Config::load(&none).expect("defaults are valid");
        c.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        c.admin_listen = SocketAddr::from(([127, 0, 0, 1], 0));
        c
    }

    /// The flag for a variable: `RELAY_LISTEN` -> `relay-listen`.
    pub fn flag_name(var: &str) -> String {
        var.to_ascii_lowercase().replace('_', "-")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(&move |k: &str| map.get(k).cloned())
    }

    fn errors(pairs: &[(&str, &str)]) -> String {
        load(pairs).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_valid_and_match_design() {
        let c = load(&[]).unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(c.admin_listen.to_string(), "0.0.0.0:9090");
        assert_eq!(c.policy, Policy::defaults());
        assert_eq!(c.max_ciphertext_chars, 3800);
        assert_eq!(c.environment, EnvironmentMode::Auto);
        assert!(matches!(c.delivery, Delivery::Unconfigured));
        assert_eq!(c.production_url, "https://api.push.apple.com");
    }

    #[test]
    fn bad_values_name_the_variable_and_what_is_allowed() {
        let e = errors(&[("RELAY_DEDUP_WINDOW_S", "soon")]);
        assert!(e.contains("RELAY_DEDUP_WINDOW_S=\"soon\""), "{e}");
        assert!(e.contains("an integer from 1 to 86400"), "{e}");
        let e = errors(&[("RELAY_RATE_CAPACITY", "0")]);
        assert!(e.contains("RELAY_RATE_CAPACITY"), "{e}");
        let e = errors(&[("RELAY_RATE_REFILL_PER_S", "-1")]);
        assert!(e.contains("RELAY_RATE_REFILL_PER_S"), "{e}");
        let e = errors(&[("RELAY_RATE_REFILL_PER_S", "NaN")]);
        assert!(e.contains("RELAY_RATE_REFILL_PER_S"), "{e}");
        let e = errors(&[("APNS_ENVIRONMENT", "prod")]);
        assert!(e.contains("production, sandbox or auto"), "{e}");
        let e = errors(&[("RELAY_LISTEN", "8080")]);
        assert!(e.contains("RELAY_LISTEN"), "{e}");
        let e = errors(&[("RELAY_DRY_RUN", "yes please")]);
        assert!(
            e.contains("RELAY_DRY_RUN") && e.contains("true or false"),
            "{e}"
        );
        let e = errors(&[("APNS_PRODUCTION_URL", "http://x")]);
        assert!(e.contains("APNS_PRODUCTION_URL"), "{e}");
        let e = errors(&[("REDIS_URL", "localhost:6379")]);
        assert!(e.contains("REDIS_URL"), "{e}");
        let e = errors(&[("REDIS_URL", "redis://:hunter2@")]);
        assert!(e.contains("REDIS_URL") && !e.contains("hunter2"), "{e}");
        let e = errors(&[("RELAY_REDIS_PREFIX", "a{b}")]);
        assert!(e.contains("RELAY_REDIS_PREFIX"), "{e}");
        let c = load(&[(
            "REDIS_URL",
            "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001",
        )])
        .unwrap();
        assert_eq!(c.redis.unwrap().prefix, "sealrelay:");
        let e = errors(&[("RELAY_LOG_FORMAT", "xml")]);
        assert!(e.contains("RELAY_LOG_FORMAT"), "{e}");
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let e = load(&[("RELAY_FLAP_WINDOW_S", "x"), ("RELAY_FLAP_RESET_S", "0")]).unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
    }

    #[test]
    fn ciphertext_cap_is_refused_when_the_body_would_not_fit() {
        assert!(load(&[("RELAY_MAX_CIPHERTEXT_CHARS", "3800")]).is_ok());
        let e = errors(&[("RELAY_MAX_CIPHERTEXT_CHARS", "4000")]);
        assert!(
            e.contains("RELAY_MAX_CIPHERTEXT_CHARS=4000") && e.contains("4096"),
            "{e}"
        );
        // A long stub eats into the room.
        let long = "x".repeat(120);
        let e = errors(&[("RELAY_ALERT_TITLE", &long), ("RELAY_ALERT_BODY", &long)]);
        assert!(e.contains("RELAY_MAX_CIPHERTEXT_CHARS"), "{e}");
    }

    #[test]
    fn partial_credentials_name_the_missing_ones() {
        let e = errors(&[
            ("APNS_TEAM_ID", "ABCDE12345"),
            ("APNS_TOPIC", "com.example.app"),
        ]);
        assert!(e.contains("APNS_KEY_ID"), "{e}");
        assert!(e.contains("APNS_AUTH_KEY or APNS_AUTH_KEY_FILE"), "{e}");
        assert!(!e.contains("APNS_TOPIC not set"), "{e}");
    }

    #[test]
    fn dry_run_without_credentials() {
        let c = load(&[("RELAY_DRY_RUN", "true")]).unwrap();
        assert!(matches!(c.delivery, Delivery::DryRun));
    }

    #[test]
    fn bad_key_is_refused_without_printing_it() {
        let e = errors(&[
            ("APNS_TEAM_ID", "ABCDE12345"),
            ("APNS_KEY_ID", "KEY1234567"),
            (
                "APNS_AUTH_KEY",
                "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----",
            ),
            ("APNS_TOPIC", "com.example.app"),
        ]);
        assert!(e.contains("APNS_AUTH_KEY is not valid"), "{e}");
        assert!(!e.contains("c2VjcmV0"), "{e}");
    }

    #[test]
    fn flags_are_derived_from_variables() {
        assert_eq!(Config::flag_name("RELAY_LISTEN"), "relay-listen");
        let mut names: Vec<_> = VARS.iter().map(|v| v.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VARS.len(), "duplicate variable");
    }
}
