//! APNs and the delivery core: the credentials (all or nothing), endpoints, environment
//! mode, timeouts, the retry lease, dead-token memory, the alert stub, dry run.

use std::time::Duration;

use super::reader::Reader;
use super::vars::*;
use crate::delivery::Settings as Core;
use crate::push::apns::payload;
use crate::push::apns::Settings;
use crate::push::EnvironmentMode;
use crate::secret::Secret;

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

fn is_apple_id(s: &str) -> bool {
    s.len() == 10
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

pub(super) fn read(r: &mut Reader<'_>) -> (Delivery, Core) {
    let environment = r.choice(
        &APNS_ENVIRONMENT,
        &[
            EnvironmentMode::Auto,
            EnvironmentMode::Production,
            EnvironmentMode::Sandbox,
            EnvironmentMode::Sandbox,
        ],
        "production, sandbox or auto (development is sandbox)",
    );
    let production_url = r.https_url(&APNS_PRODUCTION_URL);
    let sandbox_url = r.https_url(&APNS_SANDBOX_URL);
    let ca_file = r.ca_file(&APNS_CA_FILE);
    let request_timeout = Duration::from_millis(r.int(&APNS_REQUEST_TIMEOUT_MS));
    let retry_lease_ms = r.int(&RELAY_RETRY_LEASE_MS) as i64;
    if retry_lease_ms <= 2 * request_timeout.as_millis() as i64 {
        r.problem(format!(
            "RELAY_RETRY_LEASE_MS={retry_lease_ms} is not valid: it must exceed twice APNS_REQUEST_TIMEOUT_MS ({} ms), or a slow attempt would be retried by another replica while still running",
            request_timeout.as_millis()
        ));
    }
    let tombstone_ttl_ms = r.int(&RELAY_TOMBSTONE_TTL_S) as i64 * 1000;
    let alert_title = r.value(&RELAY_ALERT_TITLE).unwrap_or_default();
    let alert_body = r.value(&RELAY_ALERT_BODY).unwrap_or_default();
    for (var, text) in [
        (&RELAY_ALERT_TITLE, &alert_title),
        (&RELAY_ALERT_BODY, &alert_body),
    ] {
        let (min, max) = text_bounds(var);
        if text.chars().count() < min || text.chars().count() > max {
            r.fail(var, text, &format!("{min} to {max} characters"));
        }
    }
    let dry_run = r.bool(&RELAY_DRY_RUN);
    let delivery = credentials(r, dry_run).map_or_else(
        |dry| {
            if dry {
                Delivery::DryRun
            } else {
                Delivery::Unconfigured
            }
        },
        |(team_id, key_id, key_pem, topic)| {
            Delivery::Apns(Settings {
                team_id,
                key_id,
                key_pem,
                topic,
                production_url,
                sandbox_url,
                ca_file,
                request_timeout,
            })
        },
    );
    let core = Core {
        environment,
        tombstone_ttl_ms,
        retry_lease_ms,
        alert_title,
        alert_body,
    };
    (delivery, core)
}

/// The credentials, all of them or none: `Err(dry_run)` when none (or when they are
/// invalid, after recording why).
fn credentials(
    r: &mut Reader<'_>,
    dry_run: bool,
) -> Result<(String, String, Secret, String), bool> {
    let team_id = r.set(&APNS_TEAM_ID);
    let key_id = r.set(&APNS_KEY_ID);
    let key_text = r.set(&APNS_AUTH_KEY);
    let key_file = r.set(&APNS_AUTH_KEY_FILE);
    let topic = r.set(&APNS_TOPIC);
    if key_text.is_some() && key_file.is_some() {
        r.problem("APNS_AUTH_KEY and APNS_AUTH_KEY_FILE are both set: set exactly one".into());
        return Err(false);
    }
    let has_key = key_text.is_some() || key_file.is_some();
    let present = [
        team_id.is_some(),
        key_id.is_some(),
        has_key,
        topic.is_some(),
    ];
    if present.iter().all(|p| !p) {
        return Err(dry_run);
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
        r.problem(format!(
            "APNs credentials are incomplete: {} not set (set all of APNS_TEAM_ID, APNS_KEY_ID, APNS_AUTH_KEY or APNS_AUTH_KEY_FILE, APNS_TOPIC, or none)",
            missing.join(", ")
        ));
        return Err(false);
    }
    if dry_run {
        r.problem(
            "RELAY_DRY_RUN=true is not valid with APNs credentials set: unset one of them".into(),
        );
    }
    let (Some(team_id), Some(key_id), Some(topic)) = (team_id, key_id, topic) else {
        return Err(false);
    };
    for (var, v) in [(&APNS_TEAM_ID, &team_id), (&APNS_KEY_ID, &key_id)] {
        if !is_apple_id(v) {
            r.fail(var, v, "10 characters of A-Z and 0-9, as Apple shows it");
        }
    }
    if topic.contains(char::is_whitespace) || topic.len() > text_bounds(&APNS_TOPIC).1 {
        r.fail(&APNS_TOPIC, &topic, "the app's bundle id, without spaces");
    }
    let (var, key_pem) = match (key_text, key_file) {
        (Some(text), _) => (APNS_AUTH_KEY.name, text.replace("\\n", "\n")),
        (None, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(t) => (APNS_AUTH_KEY_FILE.name, t),
            Err(e) => {
                r.problem(format!("APNS_AUTH_KEY_FILE={path} cannot be read: {e}"));
                (APNS_AUTH_KEY_FILE.name, String::new())
            }
        },
        (None, None) => return Err(false),
    };
    if !key_pem.is_empty() {
        if let Err(e) = crate::push::apns::token::check_key(&key_pem) {
            r.problem(format!(
                "{var} is not valid: {e}; it must be the .p8 PEM (BEGIN PRIVATE KEY) of an APNs auth key"
            ));
        }
    }
    Ok((team_id, key_id, Secret::new(key_pem), topic))
}

/// Checks the ciphertext cap against the alert stub: the largest body must fit Apple's
/// 4096 bytes.
pub(super) fn check_cap(r: &mut Reader<'_>, cap: usize, title: &str, body: &str) {
    let largest = payload::largest_body_len(cap, title, body);
    if largest > payload::APNS_MAX_BODY_BYTES {
        let room = payload::max_ciphertext_for(title, body);
        r.problem(format!(
            "RELAY_MAX_CIPHERTEXT_CHARS={cap} is not valid: the largest APNs body would be {largest} bytes, over Apple's 4096; with this alert title and body at most {room} characters fit (the default is {})",
            crate::delivery::alert::DEFAULT_MAX_CIPHERTEXT_CHARS
        ));
    }
}
