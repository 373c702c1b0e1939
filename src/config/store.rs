//! The store: `REDIS_URL` and its companions, `RELAY_REDIS_FAILURE`, and the retry queue's
//! sealing key (`RELAY_QUEUE_KEY`, else derived from the APNs auth key's private scalar).

use std::time::Duration;

use super::apns::Delivery;
use super::reader::Reader;
use super::vars::*;
use crate::store::queue::QueueKey;
use crate::store::redis::RedisSettings;
use crate::store::{RedisFailure, Settings};

pub(super) fn read(r: &mut Reader<'_>, delivery: &Delivery) -> Settings {
    let prefix = r.value(&RELAY_REDIS_PREFIX).unwrap_or_default();
    if prefix.len() > text_bounds(&RELAY_REDIS_PREFIX).1
        || prefix.contains(['{', '}'])
        || prefix.contains(char::is_whitespace)
    {
        r.fail(
            &RELAY_REDIS_PREFIX,
            &prefix,
            "at most 64 characters, without braces or spaces",
        );
    }
    let pool_size = r.int(&RELAY_REDIS_POOL_SIZE) as usize;
    let timeout = Duration::from_millis(r.int(&RELAY_REDIS_TIMEOUT_MS));
    let on_failure = r.choice(
        &RELAY_REDIS_FAILURE,
        &[RedisFailure::Degrade, RedisFailure::Reject],
        "degrade or reject",
    );
    let redis = r.set(&REDIS_URL).map(|url| {
        // Parsed the way the client will parse it; the URL may hold a password, so the
        // message never repeats it.
        if let Err(e) = fred::types::config::Config::from_url(&url) {
            r.problem(format!(
                "REDIS_URL is not valid: {}; use redis://, rediss:// (TLS), redis-cluster://host:port?node=host:port or redis-sentinel://host:port?sentinelServiceName=name",
                e.details()
            ));
        }
        RedisSettings {
            url,
            prefix,
            pool_size,
            timeout,
        }
    });
    let queue_key = match r.set(&RELAY_QUEUE_KEY) {
        Some(k) if k.chars().count() >= 32 => Some(QueueKey::derive(k.as_bytes())),
        Some(_) => {
            r.problem(
                "RELAY_QUEUE_KEY is not valid: use at least 32 characters of secret text (e.g. the output of `openssl rand -base64 32`)".into(),
            );
            None
        }
        None => match delivery {
            Delivery::Apns(a) => crate::push::apns::token::key_scalar(a.key_pem.expose())
                .map(|s| QueueKey::derive(&s)),
            _ => None,
        },
    };
    Settings {
        redis,
        on_failure,
        queue_key,
    }
}
