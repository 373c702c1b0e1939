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
mod store;
mod telemetry;
mod unknown;
mod v1;
mod vars;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use crate::telemetry::UnknownVar;
pub use vars::{Kind, Section, VARS};

/// What [`Config::load_env`] makes of a variable in the environment that looks meant for
/// the relay but that it does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownVars {
    /// `serve`: each is logged once as a warning when logging starts.
    Warn,
    /// `check-config`: each is a problem, and the configuration is not valid.
    Refuse,
}

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

/// How forwards are delivered, as configured.
#[derive(Debug, Clone)]
pub(crate) enum Delivery {
    /// Send to APNs with these settings.
    Apns(crate::push::apns::Settings),
    /// No credentials, `RELAY_DRY_RUN=true`: log and answer forwarded.
    DryRun,
    /// No credentials: answer 502 "relay is not configured for APNs delivery".
    Unconfigured,
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
    pub(crate) signed: crate::signed::api::Settings,
    /// Mailboxes (`/v1/<app>/mailbox/...`).
    pub(crate) mailbox: crate::mailbox::Settings,
    /// The mailbox ICE extension's providers.
    pub(crate) ice: crate::mailbox::ice::Settings,
    /// The FCM push module, when a service account is configured.
    pub(crate) fcm: Option<crate::push::fcm::Settings>,
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

/// Reads variables and collects every problem.
pub(crate) struct Reader<'a> {
    lookup: &'a dyn Lookup,
    errors: Vec<String>,
}

impl Reader<'_> {
    fn raw(&self, var: &Var) -> Option<String> {
        self.lookup.get(var.name).map(|v| v.trim().to_owned())
    }

    /// The value, or the variable's default.
    pub(crate) fn value(&self, var: &Var) -> Option<String> {
        self.raw(var).or_else(|| var.default.map(str::to_owned))
    }

    /// The value when set and not empty (no default).
    pub(crate) fn set(&self, var: &Var) -> Option<String> {
        self.raw(var).filter(|v| !v.is_empty())
    }

    /// Whether the variable is given at all (even empty).
    pub(crate) fn given(&self, var: &Var) -> bool {
        self.raw(var).is_some()
    }

    /// Records a problem with a variable's value.
    pub(crate) fn fail(&mut self, var: &Var, value: &str, allowed: &str) {
        self.errors
            .push(format!("{}={value:?} is not valid: {allowed}", var.name));
    }

    /// Records a problem in free form (it must name the variable).
    pub(crate) fn problem(&mut self, text: String) {
        self.errors.push(text);
    }

    pub(crate) fn parse<T: std::str::FromStr>(&mut self, var: &Var, allowed: &str) -> Option<T> {
        let v = self.value(var)?;
        match v.parse() {
            Ok(t) => Some(t),
            Err(_) => {
                self.fail(var, &v, allowed);
                None
            }
        }
    }

    /// An integer within the variable's bounds ([`Kind::Int`]).
    pub(crate) fn int(&mut self, var: &Var) -> u64 {
        debug_assert!(
            matches!(var.kind, Kind::Int(..)),
            "{} is not an integer",
            var.name
        );
        let (lo, hi) = match var.kind {
            Kind::Int(lo, hi) => (lo, hi),
            _ => (0, u64::MAX),
        };
        let allowed = format!("an integer from {lo} to {hi}");
        match self.parse::<u64>(var, &allowed) {
            Some(n) if (lo..=hi).contains(&n) => n,
            Some(n) => {
                self.fail(var, &n.to_string(), &allowed);
                lo
            }
            None => lo,
        }
    }

    /// A finite number within the variable's bounds ([`Kind::Float`]).
    pub(crate) fn float(&mut self, var: &Var) -> f64 {
        debug_assert!(
            matches!(var.kind, Kind::Float(..)),
            "{} is not a number",
            var.name
        );
        let (lo, hi) = match var.kind {
            Kind::Float(lo, hi) => (lo, hi),
            _ => (f64::MIN, f64::MAX),
        };
        let allowed = format!("a number from {lo} to {hi}");
        match self.parse::<f64>(var, &allowed) {
            Some(x) if x.is_finite() && x >= lo && x <= hi => x,
            Some(x) => {
                self.fail(var, &x.to_string(), &allowed);
                lo
            }
            None => lo,
        }
    }

    /// A socket address.
    pub(crate) fn addr(&mut self, var: &Var) -> SocketAddr {
        self.parse(var, "a socket address such as 0.0.0.0:8080 or [::]:8080")
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// `true`/`1` or `false`/`0`.
    pub(crate) fn bool(&mut self, var: &Var) -> bool {
        match self.value(var).as_deref() {
            Some("true") | Some("1") => true,
            Some("false") | Some("0") | Some("") | None => false,
            Some(other) => {
                let other = other.to_owned();
                self.fail(var, &other, "true or false");
                false
            }
        }
    }

    /// One of the variable's words ([`Kind::Enum`]), each mapped to the value at the same
    /// place in `values`; the first value when it is none of them.
    pub(crate) fn choice<T: Copy>(&mut self, var: &Var, values: &[T], allowed: &str) -> T {
        debug_assert!(
            matches!(var.kind, Kind::Enum(ws) if ws.len() == values.len()),
            "{}: one value per word",
            var.name
        );
        let words: &[&str] = match var.kind {
            Kind::Enum(ws) => ws,
            _ => &[],
        };
        let v = self.value(var).unwrap_or_default();
        match words.iter().zip(values).find(|(w, _)| **w == v) {
            Some((_, t)) => *t,
            None => {
                self.fail(var, &v, allowed);
                values[0]
            }
        }
    }

    /// An `https://` URL, without a trailing slash.
    pub(crate) fn https_url(&mut self, var: &Var) -> String {
        let v = self.value(var).unwrap_or_default();
        let ok = v
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
        if !ok {
            self.fail(
                var,
                &v,
                "an https:// URL such as https://api.push.apple.com",
            );
        }
        v.trim_end_matches('/').to_owned()
    }

    /// A readable PEM file of certificates, when set.
    pub(crate) fn ca_file(&mut self, var: &Var) -> Option<PathBuf> {
        let name = var.name;
        let path = self.set(var).map(PathBuf::from)?;
        match std::fs::read_to_string(&path) {
            Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => {}
            Ok(_) => self.problem(format!(
                "{name}={} is not valid: it holds no PEM certificate",
                path.display()
            )),
            Err(e) => self.problem(format!("{name}={} cannot be read: {e}", path.display())),
        }
        Some(path)
    }
}

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
        let mailbox = mailbox::read(&mut r);
        let ice = ice::read(&mut r);
        if !ice.has_provider() {
            for app in mailbox.apps.iter().filter(|a| a.ice) {
                r.problem(format!("RELAY_APPS: app {:?} has ice but no ICE provider is configured (set RELAY_ICE_STUN_URLS, RELAY_ICE_TURN_URLS with RELAY_ICE_TURN_SECRET, or RELAY_ICE_CLOUDFLARE_KEY_ID with RELAY_ICE_CLOUDFLARE_API_TOKEN)", app.name));
            }
        }
        let fcm = fcm::read(&mut r);
        let signed = crate::signed::api::Settings {
            default_topic: match &delivery {
                Delivery::Apns(a) => Some(a.topic.clone()),
                _ => r.set(&vars::APNS_TOPIC),
            },
            max_ciphertext_chars: v1.max_ciphertext_chars,
            receipt_ttl_ms: core.receipt_ttl_ms,
            body_timeout: v1.body_timeout,
            abandon_after_ms: 2 * core.retry_lease_ms,
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
        format!(
            "configuration is valid\n  listen: {}  admin: {}\n  store: {store}\n  delivery: {delivery}",
            self.app.listen, self.app.admin_listen
        )
    }

    /// The flag for a variable: `RELAY_LISTEN` -> `relay-listen`.
    pub fn flag_name(var: &str) -> String {
        var.to_ascii_lowercase().replace('_', "-")
    }
}

#[cfg(test)]
mod tests;
