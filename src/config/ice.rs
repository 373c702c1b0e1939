//! The ICE extension ([`crate::mailbox::ice::Settings`]): the credentials' TTL, STUN URLs,
//! coturn (URLs and shared secret, both or neither), Cloudflare Realtime TURN (key id and
//! API token, both or neither), Cloudflare's base URL and extra trusted roots for it.

use super::reader::Reader;
use super::vars::*;
use crate::mailbox::ice::{Cloudflare, Coturn, IceUrl, Settings, UrlKind, CLOUDFLARE_TIMEOUT};
use crate::secret::Secret;

pub(super) fn read(r: &mut Reader<'_>) -> Settings {
    let ttl_s = r.int(&RELAY_ICE_TTL_S);
    let stun_urls = urls(r, &RELAY_ICE_STUN_URLS, UrlKind::Stun);
    let turn_urls = urls(r, &RELAY_ICE_TURN_URLS, UrlKind::Turn);
    let turn_secret = secret(r, &RELAY_ICE_TURN_SECRET, &RELAY_ICE_TURN_SECRET_FILE);
    let coturn = match (turn_urls, turn_secret) {
        (None, Found::Absent) => None,
        (Some(urls), Found::Value(secret)) => Some(Coturn { urls, secret }),
        (Some(_), Found::Absent) => {
            r.problem("RELAY_ICE_TURN_URLS is set but RELAY_ICE_TURN_SECRET and RELAY_ICE_TURN_SECRET_FILE are not: coturn credentials are derived from its static-auth-secret; set one of them, or unset RELAY_ICE_TURN_URLS".into());
            None
        }
        (None, Found::Value(_)) => {
            r.problem("RELAY_ICE_TURN_SECRET (or RELAY_ICE_TURN_SECRET_FILE) is set but RELAY_ICE_TURN_URLS is not: list the coturn servers (turn:host:port?transport=udp) the credentials are for, or unset the secret".into());
            None
        }
        // Already reported.
        (_, Found::Invalid) => None,
    };
    let url = cloudflare_url(r);
    let ca_file = r.ca_file(&RELAY_ICE_CLOUDFLARE_CA_FILE);
    let key_id = r.set(&RELAY_ICE_CLOUDFLARE_KEY_ID);
    if let Some(k) = &key_id {
        let ok = k.len() <= 256
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            r.fail(
                &RELAY_ICE_CLOUDFLARE_KEY_ID,
                k,
                "the TURN key id Cloudflare shows (1 to 256 of A-Z a-z 0-9 _ -)",
            );
        }
    }
    let token = secret(
        r,
        &RELAY_ICE_CLOUDFLARE_API_TOKEN,
        &RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE,
    );
    if let Found::Value(t) = &token {
        // Sent as `Authorization: Bearer <token>`: visible ASCII only.
        if !t.expose().bytes().all(|b| b.is_ascii_graphic()) {
            let from = token_source(r);
            r.problem(format!(
                "{from} is not valid: the API token may hold only visible ASCII characters (no spaces, line breaks or control characters); the value is not shown"
            ));
        }
    }
    let cloudflare = match (key_id, token) {
        (None, Found::Absent) => None,
        (Some(key_id), Found::Value(api_token)) => Some(Cloudflare {
            key_id,
            api_token,
            url,
            timeout: CLOUDFLARE_TIMEOUT,
            ca_file,
        }),
        (Some(_), Found::Absent) => {
            r.problem("RELAY_ICE_CLOUDFLARE_KEY_ID is set but RELAY_ICE_CLOUDFLARE_API_TOKEN and RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE are not: Cloudflare's credentials API needs the key's API token; set one of them, or unset RELAY_ICE_CLOUDFLARE_KEY_ID".into());
            None
        }
        (None, Found::Value(_)) => {
            r.problem("RELAY_ICE_CLOUDFLARE_API_TOKEN (or RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE) is set but RELAY_ICE_CLOUDFLARE_KEY_ID is not: set the TURN key id the token belongs to, or unset the token".into());
            None
        }
        (_, Found::Invalid) => None,
    };
    Settings {
        ttl_s,
        stun_urls: stun_urls.unwrap_or_default(),
        coturn,
        cloudflare,
    }
}

/// A comma-separated list of URLs (spaces around the commas allowed); `None` when unset or
/// empty. Every bad entry is reported.
fn urls(r: &mut Reader<'_>, var: &Var, kind: UrlKind) -> Option<Vec<IceUrl>> {
    let name = var.name;
    let v = r.set(var)?;
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim) {
        if item.is_empty() {
            r.fail(
                var,
                &v,
                "a comma-separated list of URLs without empty entries",
            );
            continue;
        }
        match IceUrl::parse(item, kind) {
            Ok(u) => out.push(u),
            Err(why) => r.problem(format!("{name}: {item:?} is not valid: {why}")),
        }
    }
    Some(out)
}

/// What a value-or-file pair held.
enum Found {
    /// Neither is set.
    Absent,
    /// One is set and was read.
    Value(Secret),
    /// Both are set, the file cannot be read or is empty: reported.
    Invalid,
}

/// A secret from `name` or from the file `file_var` names (one trailing newline removed),
/// never both.
fn secret(r: &mut Reader<'_>, var: &Var, file: &Var) -> Found {
    let (name, file_var) = (var.name, file.name);
    match (r.set(var), r.set(file)) {
        (None, None) => Found::Absent,
        (Some(_), Some(_)) => {
            r.problem(format!(
                "{name} and {file_var} are both set: set exactly one"
            ));
            Found::Invalid
        }
        (Some(v), None) => Found::Value(Secret::new(v)),
        (None, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(text) => {
                let text = text
                    .strip_suffix('\n')
                    .map(|t| t.strip_suffix('\r').unwrap_or(t))
                    .unwrap_or(&text);
                if text.is_empty() {
                    r.problem(format!("{file_var}={path} is empty"));
                    Found::Invalid
                } else {
                    Found::Value(Secret::new(text))
                }
            }
            Err(e) => {
                r.problem(format!("{file_var}={path} cannot be read: {e}"));
                Found::Invalid
            }
        },
    }
}

/// Which variable the Cloudflare token came from, for messages.
fn token_source(r: &Reader<'_>) -> &'static str {
    if r.set(&RELAY_ICE_CLOUDFLARE_API_TOKEN).is_some() {
        RELAY_ICE_CLOUDFLARE_API_TOKEN.name
    } else {
        RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE.name
    }
}

/// `RELAY_ICE_CLOUDFLARE_URL`: an http:// or https:// base (a path prefix allowed, no query),
/// without its trailing slash.
fn cloudflare_url(r: &mut Reader<'_>) -> String {
    const NAME: &Var = &RELAY_ICE_CLOUDFLARE_URL;
    let v = r.value(NAME).unwrap_or_default();
    let ok = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .is_some_and(|rest| {
            !rest.is_empty()
                && !rest.starts_with('/')
                && !rest.contains(char::is_whitespace)
                && !rest.contains(['?', '#'])
        })
        && v.parse::<hyper::Uri>().is_ok();
    if !ok {
        r.fail(
            NAME,
            &v,
            "an http:// or https:// base URL without query, such as https://rtc.live.cloudflare.com",
        );
    }
    v.trim_end_matches('/').to_owned()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use crate::config::tests::{errors, load};

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn defaults_configure_no_provider() {
        let ice = load(&[]).unwrap().ice;
        assert_eq!(ice.ttl_s, 3600);
        assert!(ice.stun_urls.is_empty() && ice.coturn.is_none() && ice.cloudflare.is_none());
        assert!(!ice.has_provider());
    }

    #[test]
    fn a_full_configuration_is_read() {
        let pki = sealrelay_testkit::pki::Pki::new();
        let c = load(&[
            ("RELAY_ICE_TTL_S", "600"),
            (
                "RELAY_ICE_STUN_URLS",
                "stun:stun.example.com:3478, stuns:stun.example.com:5349",
            ),
            (
                "RELAY_ICE_TURN_URLS",
                "turn:turn.example.com:3478?transport=udp,turns:turn.example.com:5349?transport=tcp",
            ),
            ("RELAY_ICE_TURN_SECRET", "coturn-hunter2"),
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "0123abcd_KEY-id"),
            ("RELAY_ICE_CLOUDFLARE_API_TOKEN", "cf-hunter2"),
            ("RELAY_ICE_CLOUDFLARE_URL", "http://127.0.0.1:8787/"),
            ("RELAY_ICE_CLOUDFLARE_CA_FILE", pki.ca_file.to_str().unwrap()),
        ])
        .unwrap();
        let ice = &c.ice;
        assert!(ice.has_provider());
        assert_eq!(ice.ttl_s, 600);
        let stun: Vec<_> = ice.stun_urls.iter().map(|u| u.as_str()).collect();
        assert_eq!(
            stun,
            ["stun:stun.example.com:3478", "stuns:stun.example.com:5349"]
        );
        let coturn = ice.coturn.as_ref().unwrap();
        assert_eq!(coturn.urls.len(), 2);
        assert_eq!(coturn.secret.expose(), "coturn-hunter2");
        let cf = ice.cloudflare.as_ref().unwrap();
        assert_eq!(cf.key_id, "0123abcd_KEY-id");
        assert_eq!(cf.api_token.expose(), "cf-hunter2");
        assert_eq!(cf.url, "http://127.0.0.1:8787");
        assert_eq!(cf.timeout, super::CLOUDFLARE_TIMEOUT);
        assert_eq!(cf.ca_file.as_deref(), Some(pki.ca_file.as_path()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        // The default URL is Cloudflare's.
        let c = load(&[
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "k"),
            ("RELAY_ICE_CLOUDFLARE_API_TOKEN", "t"),
        ])
        .unwrap();
        assert_eq!(
            c.ice.cloudflare.unwrap().url,
            "https://rtc.live.cloudflare.com"
        );
        // STUN alone is a provider.
        let c = load(&[("RELAY_ICE_STUN_URLS", "stun:stun.example.com")]).unwrap();
        assert!(c.ice.has_provider());
    }

    #[test]
    fn secret_files_lose_one_trailing_newline() {
        let turn = file("coturn secret\n\n");
        let token = file("cf-token\r\n");
        let c = load(&[
            ("RELAY_ICE_TURN_URLS", "turn:turn.example.com"),
            ("RELAY_ICE_TURN_SECRET_FILE", turn.path().to_str().unwrap()),
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "k"),
            (
                "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE",
                token.path().to_str().unwrap(),
            ),
        ])
        .unwrap();
        assert_eq!(c.ice.coturn.unwrap().secret.expose(), "coturn secret\n");
        assert_eq!(c.ice.cloudflare.unwrap().api_token.expose(), "cf-token");
    }

    #[test]
    fn incomplete_pairs_name_both_variables() {
        let e = errors(&[("RELAY_ICE_TURN_URLS", "turn:turn.example.com")]);
        assert!(
            e.contains("RELAY_ICE_TURN_URLS is set") && e.contains("RELAY_ICE_TURN_SECRET"),
            "{e}"
        );
        let e = errors(&[("RELAY_ICE_TURN_SECRET", "hunter2")]);
        assert!(
            e.contains("RELAY_ICE_TURN_URLS is not") && !e.contains("hunter2"),
            "{e}"
        );
        let e = errors(&[("RELAY_ICE_CLOUDFLARE_KEY_ID", "k")]);
        assert!(
            e.contains("RELAY_ICE_CLOUDFLARE_KEY_ID is set")
                && e.contains("RELAY_ICE_CLOUDFLARE_API_TOKEN"),
            "{e}"
        );
        let e = errors(&[("RELAY_ICE_CLOUDFLARE_API_TOKEN", "hunter2")]);
        assert!(
            e.contains("RELAY_ICE_CLOUDFLARE_KEY_ID is not") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn a_value_and_a_file_are_exclusive_and_files_must_be_readable() {
        let f = file("from-file\n");
        let path = f.path().to_str().unwrap();
        let e = load(&[
            ("RELAY_ICE_TURN_URLS", "turn:turn.example.com"),
            ("RELAY_ICE_TURN_SECRET", "hunter2"),
            ("RELAY_ICE_TURN_SECRET_FILE", path),
        ])
        .unwrap_err();
        // One message, not a second "no secret" one.
        assert_eq!(e.0.len(), 1, "{e}");
        assert!(
            e.0[0].contains("RELAY_ICE_TURN_SECRET and RELAY_ICE_TURN_SECRET_FILE are both set"),
            "{e}"
        );
        assert!(!e.to_string().contains("hunter2"));
        let e = errors(&[
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "k"),
            ("RELAY_ICE_CLOUDFLARE_API_TOKEN", "hunter2"),
            ("RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE", path),
        ]);
        assert!(
            e.contains(
                "RELAY_ICE_CLOUDFLARE_API_TOKEN and RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE are both set"
            ) && !e.contains("hunter2"),
            "{e}"
        );
        let e = load(&[
            ("RELAY_ICE_TURN_URLS", "turn:turn.example.com"),
            ("RELAY_ICE_TURN_SECRET_FILE", "/nonexistent/ice-secret"),
        ])
        .unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert!(
            e.0[0].contains("RELAY_ICE_TURN_SECRET_FILE=/nonexistent/ice-secret cannot be read"),
            "{e}"
        );
        let e = errors(&[
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "k"),
            (
                "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE",
                "/nonexistent/cf-token",
            ),
        ]);
        assert!(
            e.contains("RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE=/nonexistent/cf-token cannot be read"),
            "{e}"
        );
        let empty = file("\n");
        let e = errors(&[
            ("RELAY_ICE_TURN_URLS", "turn:turn.example.com"),
            ("RELAY_ICE_TURN_SECRET_FILE", empty.path().to_str().unwrap()),
        ]);
        assert!(
            e.contains("RELAY_ICE_TURN_SECRET_FILE") && e.contains("is empty"),
            "{e}"
        );
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let not_pem = file("not a certificate\n");
        for (name, value, why) in [
            (
                "RELAY_ICE_STUN_URLS",
                "turn:turn.example.com",
                "must start with stun:",
            ),
            (
                "RELAY_ICE_STUN_URLS",
                "stun://stun.example.com",
                "without //",
            ),
            (
                "RELAY_ICE_STUN_URLS",
                "stun:a.example,,stun:b.example",
                "without empty entries",
            ),
            ("RELAY_ICE_STUN_URLS", "stun:a.example:99999", "port"),
            (
                "RELAY_ICE_TURN_URLS",
                "stun:stun.example.com",
                "must start with turn:",
            ),
            (
                "RELAY_ICE_TURN_URLS",
                "turn:t.example?transport=quic",
                "transport=udp",
            ),
            ("RELAY_ICE_TTL_S", "59", "an integer from 60 to 86400"),
            ("RELAY_ICE_TTL_S", "86401", "an integer from 60 to 86400"),
            (
                "RELAY_ICE_CLOUDFLARE_URL",
                "ftp://rtc.example",
                "http:// or https://",
            ),
            (
                "RELAY_ICE_CLOUDFLARE_URL",
                "https://",
                "http:// or https://",
            ),
            (
                "RELAY_ICE_CLOUDFLARE_URL",
                "https://x.example/?a=1",
                "without query",
            ),
            (
                "RELAY_ICE_CLOUDFLARE_URL",
                "https://x .example",
                "http:// or https://",
            ),
            (
                "RELAY_ICE_CLOUDFLARE_CA_FILE",
                "/nonexistent/ca.pem",
                "cannot be read",
            ),
            (
                "RELAY_ICE_CLOUDFLARE_CA_FILE",
                not_pem.path().to_str().unwrap(),
                "holds no PEM certificate",
            ),
        ] {
            let e = errors(&[(name, value)]);
            assert!(e.contains(name) && e.contains(why), "{name}={value}: {e}");
        }
        // The TTL's bounds are in (RELAY_ICE_TTL_S's kind, int:60..86400).
        assert_eq!(load(&[("RELAY_ICE_TTL_S", "60")]).unwrap().ice.ttl_s, 60);
        assert_eq!(
            load(&[("RELAY_ICE_TTL_S", "86400")]).unwrap().ice.ttl_s,
            86400
        );
        // Every bad entry of a list is reported.
        let e = load(&[("RELAY_ICE_STUN_URLS", "stun:ok.example,http://a,turn:b")]).unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
        // A key id that is not a path segment.
        let e = errors(&[
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "../admin"),
            ("RELAY_ICE_CLOUDFLARE_API_TOKEN", "t"),
        ]);
        assert!(
            e.contains("RELAY_ICE_CLOUDFLARE_KEY_ID=\"../admin\""),
            "{e}"
        );
        // A token that cannot be a header value, named without being shown.
        let f = file("token with-hunter2 spaces\n");
        let e = errors(&[
            ("RELAY_ICE_CLOUDFLARE_KEY_ID", "k"),
            (
                "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE",
                f.path().to_str().unwrap(),
            ),
        ]);
        assert!(
            e.contains("RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE is not valid")
                && !e.contains("hunter2"),
            "{e}"
        );
        // Plain http is allowed (tests and proxies).
        assert!(load(&[("RELAY_ICE_CLOUDFLARE_URL", "http://127.0.0.1:1/prefix")]).is_ok());
    }
}
