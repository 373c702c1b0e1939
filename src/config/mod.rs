//! One typed, validated configuration, built once at start-up.
//!
//! Every setting is an environment variable and also a command-line flag (the variable's
//! name, lowercased, with `-` for `_`: `RELAY_LISTEN` is `--relay-listen`). [`VARS`]
//! ([`vars`]) is the single list of them: each variable is a constant there with its name,
//! default and bounds ([`Kind`]), and the readers below take that constant, so a name or a
//! bound is written once.
//!
//! Each section is read by a file of its own and produces the settings type of the
//! component that owns it (components never import this module): [`listen`] the
//! listeners and drain (read by `app`, the wiring), [`store`] Redis and the retry queue's key
//! ([`crate::store::Settings`]), [`apns`] the APNs module ([`crate::push::apns::Settings`])
//! and how forwards are delivered ([`crate::delivery::Settings`]), [`policy`] the device
//! policy ([`crate::policy::Policy`]), [`v1`] the cronstable front-end
//! ([`crate::v1::Settings`]), [`telemetry`] logs and traces
//! ([`crate::telemetry::Settings`]).
//!
//! A malformed or out-of-range value stops start-up with a message that names the variable,
//! the value and what is allowed; nothing silently falls back to a default. Every problem
//! is reported at once. Secrets are wrapped in [`crate::secret::Secret`] so they never print.
//!
//! A variable the relay does not read but that looks meant for it (`RELAY_DEDUP_WINDOW` for
//! `RELAY_DEDUP_WINDOW_S`) is found by [`unknown`] and named with the nearest known name:
//! a warning when serving, an error in `check-config` ([`Config::load_env`]).

mod admin;
mod apns;
mod fcm;
mod ice;
mod listen;
mod mailbox;
mod policy;
mod reader;
mod region;
mod store;
mod telemetry;
mod unknown;
mod v1;
mod vars;

use std::fmt;

pub use crate::telemetry::UnknownVar;
pub(crate) use apns::Delivery;
pub use reader::Lookup;
pub use vars::{Kind, Section, Var, VARS};

use reader::Reader;

/// What [`Config::load_env`] makes of a variable in the environment that looks meant for
/// the relay but that it does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownVars {
    /// `serve`: each is logged once as a warning when logging starts.
    Warn,
    /// `check-config`: each is a problem, and the configuration is not valid.
    Refuse,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listeners and drain.
    pub(crate) app: listen::Listen,
    /// Redis, the failure mode, the retry queue's sealing key.
    pub(crate) store: crate::store::Settings,
    /// The device policy.
    pub(crate) policy: crate::policy::Policy,
    /// How forwards are delivered.
    pub(crate) delivery: Delivery,
    /// The delivery core.
    pub(crate) core: crate::delivery::Settings,
    /// The cronstable front-end (protocol v1).
    pub(crate) v1: crate::v1::Settings,
    /// Logs and traces.
    pub(crate) telemetry: crate::telemetry::Settings,
    /// The admin API's transports.
    pub(crate) admin: crate::admin::Settings,
    /// Signed pushes (`/v2`).
    pub(crate) signed: crate::signed::front::Settings,
    /// Mailboxes (`/v1/<app>/mailbox/...`).
    pub(crate) mailbox: crate::mailbox::Settings,
    /// The mailbox ICE extension's providers.
    pub(crate) ice: crate::mailbox::ice::Settings,
    /// The FCM push module, when a service account is configured.
    pub(crate) fcm: Option<crate::push::fcm::Settings>,
    /// Several regions (`RELAY_REGION`), when set.
    pub(crate) region: Option<crate::region::Settings>,
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

impl Config {
    /// Reads and validates every variable; returns all problems at once.
    pub fn load(lookup: &dyn Lookup) -> Result<Self, ConfigErrors> {
        let mut r = Reader {
            lookup,
            errors: Vec::new(),
        };
        let app = listen::read(&mut r);
        let policy = policy::read(&mut r);
        let (delivery, core) = apns::read(&mut r);
        let store = store::read(&mut r, &delivery);
        let v1 = v1::read(&mut r, &delivery, &core);
        let telemetry = telemetry::read(&mut r);
        let admin = admin::read(&mut r);
        if v1.intake == crate::v1::Intake::Local && admin.socket.is_none() {
            r.problem("RELAY_V1_INTAKE=local takes unsigned pushes only on the admin socket, and RELAY_ADMIN_SOCKET is empty: set RELAY_ADMIN_SOCKET to a path, or RELAY_V1_INTAKE to public or off".to_owned());
        }
        if app.runtime == listen::Runtime::PerCore && store.redis.is_none() {
            r.problem("RELAY_RUNTIME=per-core runs a whole relay on each core, and they share state only through Redis: set REDIS_URL, or RELAY_RUNTIME to shared".to_owned());
        }
        let mailbox = mailbox::read(&mut r);
        let ice = ice::read(&mut r);
        if !ice.has_provider() {
            for app in mailbox.apps.iter().filter(|a| a.ice) {
                r.problem(format!("RELAY_APPS: app {:?} has ice but no ICE provider is configured (set RELAY_ICE_STUN_URLS, RELAY_ICE_TURN_URLS with RELAY_ICE_TURN_SECRET, or RELAY_ICE_CLOUDFLARE_KEY_ID with RELAY_ICE_CLOUDFLARE_API_TOKEN)", app.name));
            }
        }
        let fcm = fcm::read(&mut r);
        let region = region::read(&mut r);
        let signed = crate::signed::front::Settings {
            default_topic: match &delivery {
                Delivery::Apns(a) => Some(a.topic.clone()),
                _ => r.set(&vars::APNS_TOPIC),
            },
            max_ciphertext_chars: v1.max_ciphertext_chars,
            receipt_ttl_ms: r.int(&vars::RELAY_RECEIPT_TTL_S) as i64 * 1000,
            body_timeout: v1.body_timeout,
            abandon_after_ms: 2 * core.retry_lease_ms,
            lease_ms: core.retry_lease_ms,
            max_settlements: r.int(&vars::RELAY_SIGNED_MAX_SETTLEMENTS) as usize,
        };
        if r.errors.is_empty() {
            Ok(Config {
                app,
                store,
                policy,
                delivery,
                core,
                v1,
                telemetry,
                admin,
                signed,
                mailbox,
                ice,
                fcm,
                region,
            })
        } else {
            Err(ConfigErrors(r.errors))
        }
    }

    /// [`Config::load`], and a look at the whole environment, `env` (name and value pairs;
    /// values are used only to recognise Kubernetes service links and never printed): a
    /// variable that looks meant for the relay but that it does not read is warned about or
    /// refused as `unknown` says; an OpenTelemetry variable the SDK would read to no effect
    /// is refused either way. When start-up fails anyway, the unknown names are listed with
    /// the problems (logging is not up to warn about them).
    pub fn load_env(
        lookup: &dyn Lookup,
        env: &[(String, String)],
        unknown: UnknownVars,
    ) -> Result<Self, ConfigErrors> {
        let scan = unknown::scan(env);
        let (cfg, mut problems) = match Config::load(lookup) {
            Ok(c) => (Some(c), Vec::new()),
            Err(e) => (None, e.0),
        };
        problems.extend(scan.refused);
        match cfg {
            Some(mut c) if problems.is_empty() && unknown == UnknownVars::Warn => {
                c.telemetry.unknown_vars = scan.unknown;
                Ok(c)
            }
            Some(c) if problems.is_empty() && scan.unknown.is_empty() => Ok(c),
            _ => {
                problems.extend(scan.unknown.into_iter().map(|u| u.message));
                Err(ConfigErrors(problems))
            }
        }
    }

    /// Why a relay on this configuration could serve nothing at all: no way to send a push
    /// (no APNs or FCM credentials, no dry run) and no mailbox app, so every request it took
    /// would be answered with an error. `/readyz` says so and stays 503.
    pub fn unserved(&self) -> Option<String> {
        (matches!(self.delivery, Delivery::Unconfigured)
            && self.fcm.is_none()
            && self.mailbox.apps.is_empty())
        .then(|| {
            "nothing to serve: no APNs credentials (APNS_*), no FCM service account (FCM_SERVICE_ACCOUNT_FILE), RELAY_DRY_RUN is not true and RELAY_APPS is empty, so every push would be answered 502".to_owned()
        })
    }

    /// What `check-config` prints: where it listens, the store, how forwards go.
    pub fn summary(&self) -> String {
        let store = if self.store.redis.is_some() {
            "redis"
        } else {
            "in-process"
        };
        let delivery = match &self.delivery {
            Delivery::Apns(a) => format!(
                "APNs, topic {}, environment {:?}",
                a.topic, self.core.environment
            ),
            Delivery::DryRun => "dry run (logged, not sent)".to_owned(),
            Delivery::Unconfigured => "none (forwards answer 502)".to_owned(),
        };
        let mut out = format!(
            "configuration is valid\n  listen: {}  admin: {}\n  store: {store}\n  delivery: {delivery}",
            self.app.listen, self.app.admin_listen
        );
        if let Some(why) = self.unserved() {
            out.push_str(&format!("\n  /readyz will stay 503: {why}"));
        }
        out
    }

    /// Threads of the async runtime (`RELAY_WORKER_THREADS`): `None` for one per core, `1`
    /// for a single-threaded runtime.
    pub fn worker_threads(&self) -> Option<usize> {
        self.app.worker_threads
    }

    /// How many single-threaded runtimes serve, each a whole relay on one port
    /// (`RELAY_RUNTIME=per-core`: `RELAY_WORKER_THREADS`, or one per core); `None` for one
    /// shared runtime ([`Config::worker_threads`]).
    pub fn cores(&self) -> Option<usize> {
        (self.app.runtime == listen::Runtime::PerCore).then(|| {
            self.app.worker_threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            })
        })
    }

    /// The configuration each of `cores` runtimes of one process builds from
    /// ([`Config::cores`]): the replica's Redis connections (`RELAY_REDIS_POOL_SIZE`) divided
    /// among them, at least one each, so a replica holds about as many as with one runtime.
    pub fn per_core(mut self, cores: usize) -> Self {
        if let Some(r) = &mut self.store.redis {
            r.pool_size = r.pool_size.div_ceil(cores.max(1));
        }
        self
    }

    /// The flag for a variable: `RELAY_LISTEN` -> `relay-listen`.
    pub fn flag_name(var: &str) -> String {
        var.to_ascii_lowercase().replace('_', "-")
    }
}

#[cfg(test)]
mod tests;
