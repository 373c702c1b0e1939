//! The store: `REDIS_URL` and its companions, `RELAY_REDIS_FAILURE`, and the retry queue's
//! sealing key (`RELAY_QUEUE_KEY`, else derived from the APNs auth key's private scalar).

use std::time::Duration;

use super::apns::Delivery;
use super::reader::Reader;
use super::vars::*;
use crate::store::connection::RedisSettings;
use crate::store::queue::QueueKey;
use crate::store::{RedisFailure, Settings};

/// The forms `REDIS_URL` takes, as every refusal names them.
const URL_FORMS: &str = "use redis://, rediss:// (TLS), redis-cluster://host:port?node=host:port (rediss-cluster:// for TLS) or redis-sentinel://host:port?sentinelServiceName=name (rediss-sentinel:// for TLS), with reserved characters of a user or password percent-encoded";

/// The schemes the relay takes.
const URL_SCHEMES: [&str; 6] = [
    "redis",
    "rediss",
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "rediss-sentinel",
];

/// Why `url` is not a Redis URL the relay takes, in words that never repeat the URL (it may
/// hold a password): the scheme first (fred would take `http://` as a standalone server and
/// retry it forever), then the client's own parse.
pub(crate) fn redis_url_problem(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("it has no scheme (redis://host:6379)".to_owned());
    };
    if !URL_SCHEMES.contains(&scheme) {
        let shown: String = scheme.chars().take(20).collect();
        return Err(format!(
            "the scheme {shown:?} is not one of {}",
            URL_SCHEMES.join(", ")
        ));
    }
    // The authority ends at the first `/`, `?` or `#`: a password holding one of them
    // (`openssl rand -base64` writes `/` and `+`) cuts the host off.
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let after_authority = &rest[authority.len()..];
    if !authority.contains('@') && after_authority.contains('@') {
        return Err("a user or password holds a reserved character (/ ? # @ and the like): percent-encode it (/ is %2F, + is %2B, = is %3D), or generate one with `openssl rand -hex 32`".to_owned());
    }
    fred::types::config::Config::from_url(url)
        .map(|_| ())
        .map_err(|e| e.details().to_string())
}

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
        if let Err(why) = redis_url_problem(&url) {
            r.problem(format!("REDIS_URL is not valid: {why}; {URL_FORMS}"));
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

#[cfg(test)]
mod tests {
    use super::redis_url_problem;

    #[test]
    fn redis_urls_are_checked_by_scheme_and_form() {
        for ok in [
            "redis://127.0.0.1:6379",
            "redis://:p%2Fw%2Bd@127.0.0.1:6379/0",
            "rediss://user:pw@redis.example.com:6380",
            "redis-cluster://h1:7000?node=h2:7000&node=h3:7000",
            "redis-sentinel://s1:26379/0?sentinelServiceName=mymaster&node=s2:26379",
        ] {
            assert_eq!(redis_url_problem(ok), Ok(()), "{ok}");
        }
        for (bad, want) in [
            ("http://x", "scheme \"http\""),
            ("ftp://x", "scheme \"ftp\""),
            ("127.0.0.1:6379", "no scheme"),
            (
                "redis://:ab/cd+ef=@redis.example.com:6379/0",
                "percent-encode",
            ),
            ("redis://:ab?cd@redis.example.com:6379", "percent-encode"),
        ] {
            let e = redis_url_problem(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
            assert!(
                !e.contains("cd+ef") && !e.contains("ab?cd"),
                "the password is repeated: {e}"
            );
        }
    }
}
