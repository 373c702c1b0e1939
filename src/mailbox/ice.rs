//! The ICE extension's credentials (`GET /v1/<app>/mailbox/<id>/ice`, `MAILBOX.md` "ICE"):
//! the `iceServers` list of WebRTC's `RTCIceServer`s a device needs to open a direct
//! connection, from up to three providers, always in this order:
//!
//! 1. STUN: one entry with every `RELAY_ICE_STUN_URLS` URL, no credentials;
//! 2. coturn: one entry with every `RELAY_ICE_TURN_URLS` URL and credentials computed here by
//!    the TURN REST scheme (coturn's `use-auth-secret`): username
//!    `<unix expiry>:<16 hex of SHA-256("<app>/<mailbox id>")>`, credential
//!    `base64(HMAC-SHA1(static-auth-secret, username))`. The suffix lets coturn's logs tell
//!    links apart without naming a mailbox;
//! 3. Cloudflare Realtime TURN: the entries Cloudflare's API hands out for
//!    `RELAY_ICE_CLOUDFLARE_KEY_ID`, fetched on every request (they are per-request
//!    credentials with the relay's TTL).
//!
//! STUN and coturn cannot fail at request time; Cloudflare can, and then the whole answer is
//! [`IceError::Upstream`] (502): a partial list would make a device try a call that might need
//! the missing relay. Each provider's part of every answer is counted in
//! `sealrelay_ice_requests_total{provider,outcome}`. No secret, token or credential is ever
//! logged; a Cloudflare failure is logged at WARN with its status or reason only.
//!
//! The module owns no route, bucket or 404 rule: the mailbox handler authenticates and
//! limits, then calls [`Ice::servers`].

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use serde_json::{json, Map, Value};

use crate::secret::Secret;

/// An ICE provider, as labelled in `sealrelay_ice_requests_total{provider}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// The configured STUN URLs.
    Stun,
    /// coturn's TURN REST credentials, made here.
    Coturn,
    /// Cloudflare's TURN credentials, fetched.
    Cloudflare,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 3] = [Provider::Stun, Provider::Coturn, Provider::Cloudflare];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Stun => "stun",
            Provider::Coturn => "coturn",
            Provider::Cloudflare => "cloudflare",
        }
    }
}

/// How long a Cloudflare credentials request may take, from connecting to the last byte of
/// the answer. Cloudflare answers in well under a second; five seconds stays below the
/// patience of a device setting up a call, which then sees a 502 and may retry.
pub const CLOUDFLARE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of Cloudflare's answer that is read (its real answers are about 1 KiB).
const MAX_CLOUDFLARE_ANSWER: usize = 64 * 1024;

/// The body of the handler's answer to [`IceError::Upstream`], with status 502 and
/// `Content-Type: application/json` (the spec's error shape).
pub const UPSTREAM_UNAVAILABLE_BODY: &str = r#"{"error":"upstream_unavailable","status":502}"#;

/// Which list an [`IceUrl`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlKind {
    /// `stun:` or `stuns:` (RFC 7064).
    Stun,
    /// `turn:` or `turns:` (RFC 7065).
    Turn,
}

/// A STUN or TURN URL as WebRTC takes it, checked at start-up:
/// `<scheme>:<host>[:<port>]`, for TURN optionally `?transport=udp|tcp`. The host is a name
/// of letters, digits, `.` and `-`, or an IP address (IPv6 in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceUrl(String);

impl IceUrl {
    /// Parses one URL of the given kind; the error says what is wrong (without the value,
    /// which the caller shows next to the variable's name).
    pub fn parse(s: &str, kind: UrlKind) -> Result<Self, String> {
        let (schemes, example): (&[&str], &str) = match kind {
            UrlKind::Stun => (&["stun", "stuns"], "stun:stun.example.com:3478"),
            UrlKind::Turn => (
                &["turn", "turns"],
                "turn:turn.example.com:3478?transport=udp",
            ),
        };
        let wanted = || {
            format!(
                "it must start with {}: (such as {example})",
                schemes.join(": or ")
            )
        };
        let Some((scheme, rest)) = s.split_once(':') else {
            return Err(wanted());
        };
        if !schemes.contains(&scheme) {
            return Err(wanted());
        }
        if s.contains(char::is_whitespace) {
            return Err("it contains whitespace".into());
        }
        if rest.starts_with("//") {
            return Err(format!(
                "write {scheme}:host:port, without // (such as {example})"
            ));
        }
        let (hostport, query) = match rest.split_once('?') {
            Some((h, q)) => (h, Some(q)),
            None => (rest, None),
        };
        match (kind, query) {
            (_, None) => {}
            (UrlKind::Stun, Some(_)) => return Err("a STUN URL takes no ?query".into()),
            (UrlKind::Turn, Some("transport=udp" | "transport=tcp")) => {}
            (UrlKind::Turn, Some(_)) => {
                return Err(
                    "the only query a TURN URL takes is ?transport=udp or ?transport=tcp".into(),
                )
            }
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err("an IPv6 address needs its closing ]".into());
            };
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err("the address in [] is not an IPv6 address".into());
            }
            match after {
                "" => (addr, None),
                p => match p.strip_prefix(':') {
                    Some(p) => (addr, Some(p)),
                    None => return Err("after ] only :port may follow".into()),
                },
            }
        } else {
            let (host, port) = match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            };
            let host_ok = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
            if !host_ok {
                return Err(format!(
                    "the host must be a name or an address (such as {example})"
                ));
            }
            (host, port)
        };
        debug_assert!(!host.is_empty());
        if let Some(p) = port {
            let ok = !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u16>().is_ok_and(|n| n > 0);
            if !ok {
                return Err("the port must be a number from 1 to 65535".into());
            }
        }
        Ok(Self(s.to_owned()))
    }

    /// The URL as configured.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// coturn with the TURN REST scheme.
#[derive(Debug, Clone)]
pub struct Coturn {
    /// `RELAY_ICE_TURN_URLS`, at least one.
    pub urls: Vec<IceUrl>,
    /// coturn's `static-auth-secret` (`RELAY_ICE_TURN_SECRET` or `_FILE`).
    pub secret: Secret,
}

/// Cloudflare Realtime TURN.
#[derive(Debug, Clone)]
pub struct Cloudflare {
    /// The TURN key id (`RELAY_ICE_CLOUDFLARE_KEY_ID`): letters, digits, `_` and `-`, so it
    /// is a safe path segment.
    pub key_id: String,
    /// The API token for that key (`RELAY_ICE_CLOUDFLARE_API_TOKEN` or `_FILE`), sent as a
    /// bearer; visible ASCII only, so it is a valid header value.
    pub api_token: Secret,
    /// The API's base URL, http or https, without a trailing slash
    /// (`RELAY_ICE_CLOUDFLARE_URL`).
    pub url: String,
    /// The request's deadline: [`CLOUDFLARE_TIMEOUT`] (not configurable; tests shorten it).
    pub timeout: Duration,
    /// Extra trusted roots for the API (`RELAY_ICE_CLOUDFLARE_CA_FILE`: an egress proxy's
    /// CA, a test mock's), beside the Mozilla roots.
    pub ca_file: Option<std::path::PathBuf>,
}

/// The ICE extension's settings, from `RELAY_ICE_*` (read by `config::ice`). `Debug` shows
/// the URLs and the key id, never the secret or the token.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The credentials' lifetime, seconds (`RELAY_ICE_TTL_S`, 60 to 86400); also the answer's
    /// `ttl` and what Cloudflare is asked for.
    pub ttl_s: u64,
    /// `RELAY_ICE_STUN_URLS`; empty when unset.
    pub stun_urls: Vec<IceUrl>,
    /// coturn, when `RELAY_ICE_TURN_URLS` and its secret are set.
    pub coturn: Option<Coturn>,
    /// Cloudflare, when the key id and its token are set.
    pub cloudflare: Option<Cloudflare>,
}

impl Settings {
    /// Whether any provider is configured: an app may enable `ice` only then
    /// (`RELAY_APPS`).
    pub fn has_provider(&self) -> bool {
        !self.stun_urls.is_empty() || self.coturn.is_some() || self.cloudflare.is_some()
    }
}

/// Why an ICE answer could not be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IceError {
    /// A provider that is asked at request time (Cloudflare) could not be reached, did not
    /// answer within [`CLOUDFLARE_TIMEOUT`], answered a status other than 200 or 201, or a
    /// body that is not a list of ICE servers. Retryable by the device. The whole answer is
    /// 502 [`UPSTREAM_UNAVAILABLE_BODY`], never a partial list.
    #[error("an ICE provider is unavailable")]
    Upstream,
}

impl IceError {
    /// The HTTP status the handler answers.
    pub fn status(self) -> u16 {
        match self {
            IceError::Upstream => 502,
        }
    }

    /// The spec's error code.
    pub fn code(self) -> &'static str {
        match self {
            IceError::Upstream => "upstream_unavailable",
        }
    }

    /// The answer's JSON body.
    pub fn body(self) -> &'static str {
        match self {
            IceError::Upstream => UPSTREAM_UNAVAILABLE_BODY,
        }
    }
}

/// The ICE credentials source, built once at start-up from [`Settings`] and shared by every
/// request. Cheap to call concurrently: the Cloudflare client pools its connections.
pub struct Ice {
    ttl_s: u64,
    /// The STUN entry, built once.
    stun: Option<Value>,
    coturn: Option<Coturn>,
    cloudflare: Option<CloudflareClient>,
}

impl std::fmt::Debug for Ice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ice")
            .field("ttl_s", &self.ttl_s)
            .field("stun", &self.stun.is_some())
            .field("coturn", &self.coturn.is_some())
            .field("cloudflare", &self.cloudflare.is_some())
            .finish()
    }
}

impl Ice {
    /// Builds the providers: the STUN entry, and the Cloudflare client (its URL and
    /// `Authorization` header checked here once).
    pub fn new(settings: &Settings) -> anyhow::Result<Self> {
        let stun = (!settings.stun_urls.is_empty()).then(
            || json!({ "urls": settings.stun_urls.iter().map(IceUrl::as_str).collect::<Vec<_>>() }),
        );
        let cloudflare = settings
            .cloudflare
            .as_ref()
            .map(|c| CloudflareClient::new(c, settings.ttl_s))
            .transpose()?;
        Ok(Self {
            ttl_s: settings.ttl_s,
            stun,
            coturn: settings.coturn.clone(),
            cloudflare,
        })
    }

    /// The answer body for `GET /v1/<app>/mailbox/<id>/ice`:
    /// `{"iceServers":[...],"ttl":<ttl>}`, STUN first, then coturn, then Cloudflare.
    /// `now_s` is the current Unix time in seconds (coturn's expiry is `now_s + ttl`).
    pub async fn servers(
        &self,
        app: &str,
        mailbox_id: &str,
        now_s: u64,
    ) -> Result<Value, IceError> {
        let mut servers = Vec::with_capacity(4);
        if let Some(stun) = &self.stun {
            servers.push(stun.clone());
            crate::metrics::ice_request(Provider::Stun.as_str(), true);
        }
        if let Some(c) = &self.coturn {
            let (username, credential) = turn_rest_credentials(
                c.secret.expose().as_bytes(),
                app,
                mailbox_id,
                now_s.saturating_add(self.ttl_s),
            );
            servers.push(json!({
                "urls": c.urls.iter().map(IceUrl::as_str).collect::<Vec<_>>(),
                "username": username,
                "credential": credential,
            }));
            crate::metrics::ice_request(Provider::Coturn.as_str(), true);
        }
        if let Some(cf) = &self.cloudflare {
            match cf.fetch().await {
                Ok(list) => {
                    servers.extend(list);
                    crate::metrics::ice_request(Provider::Cloudflare.as_str(), true);
                }
                Err(why) => {
                    crate::metrics::ice_request(Provider::Cloudflare.as_str(), false);
                    tracing::warn!(provider = "cloudflare", reason = %why, "ICE provider failed; the ICE answer is 502");
                    return Err(IceError::Upstream);
                }
            }
        }
        Ok(json!({ "iceServers": servers, "ttl": self.ttl_s }))
    }
}

/// The TURN REST credentials (draft-uberti-behave-turn-rest, as coturn's `use-auth-secret`
/// checks them) for one mailbox: `(username, credential)` with username
/// `<expiry_s>:<16 lowercase hex of SHA-256("<app>/<mailbox_id>")>` and credential the
/// standard base64 of HMAC-SHA1(secret, username).
pub fn turn_rest_credentials(
    secret: &[u8],
    app: &str,
    mailbox_id: &str,
    expiry_s: u64,
) -> (String, String) {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{app}/{mailbox_id}").as_bytes(),
    );
    let mut suffix = String::with_capacity(16);
    for b in &digest.as_ref()[..8] {
        use std::fmt::Write;
        let _ = write!(suffix, "{b:02x}");
    }
    let username = format!("{expiry_s}:{suffix}");
    // SHA-1 because coturn's TURN REST scheme is defined with it (its `--sha256` variants
    // concern the long-term credential's key, not this HMAC).
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret);
    let tag = ring::hmac::sign(&key, username.as_bytes());
    let credential = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
    (username, credential)
}

/// Why a Cloudflare request failed, for the WARN line (never holding a token, a
/// credential or the answer's body).
#[derive(Debug, thiserror::Error)]
enum CloudflareFailure {
    /// No connection, TLS refused, or the connection broke.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// No full answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// A status other than 200 or 201 (401/403: the token or key id is wrong).
    #[error("answered HTTP {0}")]
    Status(u16),
    /// A body that is not `{"iceServers": ...}` of RTCIceServers.
    #[error("the answer is not ICE servers: {0}")]
    Malformed(&'static str),
}

/// The Cloudflare Realtime TURN client: one prepared request, sent per ICE answer.
struct CloudflareClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: hyper::Uri,
    /// `Bearer <token>`, marked sensitive (never indexed by HPACK, `Debug` hides it).
    authorization: HeaderValue,
    /// `{"ttl":<ttl>}`.
    body: Bytes,
    timeout: Duration,
}

impl CloudflareClient {
    fn new(c: &Cloudflare, ttl_s: u64) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !c.key_id.is_empty()
                && c.key_id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "RELAY_ICE_CLOUDFLARE_KEY_ID={:?} is not valid: letters, digits, _ and - only",
            c.key_id
        );
        let base = c.url.trim_end_matches('/');
        let uri: hyper::Uri = format!(
            "{base}/v1/turn/keys/{}/credentials/generate-ice-servers",
            c.key_id
        )
        .parse()
        .map_err(|e| anyhow::anyhow!("RELAY_ICE_CLOUDFLARE_URL={base:?} is not valid: {e}"))?;
        anyhow::ensure!(
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some(),
            "RELAY_ICE_CLOUDFLARE_URL={base:?} is not valid: an http:// or https:// URL"
        );
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", c.api_token.expose()))
            .map_err(|_| {
                anyhow::anyhow!(
                    "RELAY_ICE_CLOUDFLARE_API_TOKEN is not valid: it cannot be sent in an Authorization header (the value is not shown)"
                )
            })?;
        authorization.set_sensitive(true);
        Ok(Self {
            http: crate::push::tls::http_client(
                c.ca_file.as_deref(),
                "RELAY_ICE_CLOUDFLARE_CA_FILE",
            )?,
            uri,
            authorization,
            body: Bytes::from(json!({ "ttl": ttl_s }).to_string()),
            timeout: c.timeout,
        })
    }

    /// One credentials request: the ICE servers Cloudflare handed out.
    async fn fetch(&self) -> Result<Vec<Value>, CloudflareFailure> {
        let request = hyper::Request::post(self.uri.clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("sealrelay/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(self.body.clone()))
            .map_err(|e| CloudflareFailure::Unreachable(e.to_string()))?;
        let exchange = async {
            let resp = self.http.request(request).await.map_err(|e| {
                // The legacy client's error says "client error (Connect)"; its sources say why.
                let mut why = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    why.push_str(": ");
                    why.push_str(&s.to_string());
                    source = s.source();
                }
                CloudflareFailure::Unreachable(why)
            })?;
            let status = resp.status().as_u16();
            if status != 200 && status != 201 {
                return Err(CloudflareFailure::Status(status));
            }
            Limited::new(resp.into_body(), MAX_CLOUDFLARE_ANSWER)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        CloudflareFailure::Malformed("larger than 64 KiB")
                    } else {
                        CloudflareFailure::Unreachable(format!("reading the answer: {e}"))
                    }
                })
        };
        let body = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| CloudflareFailure::Timeout(self.timeout))??;
        parse_cloudflare(&body).map_err(CloudflareFailure::Malformed)
    }
}

/// Reads Cloudflare's answer, `{"iceServers":[{"urls":[...],"username":..,"credential":..}]}`
/// (also a single object for `iceServers`, as older answers had it), into RTCIceServer
/// entries: `urls` always an array, `username` and `credential` kept when present, other
/// members dropped so the list keeps the spec's shape. Refused: no or empty `iceServers`,
/// an entry without `urls`, a URL that is not `stun:`/`stuns:`/`turn:`/`turns:`, a TURN
/// entry without both credentials (WebRTC would refuse it).
fn parse_cloudflare(body: &[u8]) -> Result<Vec<Value>, &'static str> {
    let v: Value = serde_json::from_slice(body).map_err(|_| "not JSON")?;
    let entries = match v.get("iceServers") {
        Some(Value::Array(a)) => a.clone(),
        Some(o @ Value::Object(_)) => vec![o.clone()],
        Some(_) => return Err("iceServers is neither an array nor an object"),
        None => return Err("no iceServers"),
    };
    if entries.is_empty() {
        return Err("iceServers is empty");
    }
    entries.into_iter().map(ice_server).collect()
}

fn ice_server(v: Value) -> Result<Value, &'static str> {
    let Value::Object(o) = v else {
        return Err("an entry is not an object");
    };
    let urls: Vec<String> = match o.get("urls") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|u| u.as_str().map(str::to_owned).ok_or("a URL is not a string"))
            .collect::<Result<_, _>>()?,
        _ => return Err("an entry has no urls"),
    };
    let mut turn = false;
    for u in &urls {
        let (scheme, rest) = u.split_once(':').unwrap_or(("", ""));
        match scheme {
            "stun" | "stuns" => {}
            "turn" | "turns" => turn = true,
            _ => return Err("a URL is not stun:, stuns:, turn: or turns:"),
        }
        if rest.is_empty() || u.contains(char::is_whitespace) {
            return Err("a URL is malformed");
        }
    }
    let text = |name: &str| match o.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err("a username or credential is not a string"),
    };
    let (username, credential) = (text("username")?, text("credential")?);
    if turn && (username.is_none() || credential.is_none()) {
        return Err("a TURN entry lacks its username or credential");
    }
    let mut out = Map::new();
    out.insert("urls".into(), json!(urls));
    if let Some(u) = username {
        out.insert("username".into(), Value::String(u));
    }
    if let Some(c) = credential {
        out.insert("credential".into(), Value::String(c));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stun(s: &str) -> Result<IceUrl, String> {
        IceUrl::parse(s, UrlKind::Stun)
    }

    fn turn(s: &str) -> Result<IceUrl, String> {
        IceUrl::parse(s, UrlKind::Turn)
    }

    #[test]
    fn urls_follow_rfc_7064_and_7065() {
        for ok in [
            "stun:stun.example.com",
            "stun:stun.example.com:3478",
            "stuns:stun.example.com:5349",
            "stun:192.0.2.1:3478",
            "stun:[2001:db8::1]:3478",
            "stun:[2001:db8::1]",
        ] {
            assert_eq!(stun(ok).unwrap().as_str(), ok);
        }
        for ok in [
            "turn:turn.example.com:3478?transport=udp",
            "turn:turn.example.com:3478?transport=tcp",
            "turns:turn.example.com:5349?transport=tcp",
            "turn:turn.example.com",
        ] {
            assert_eq!(turn(ok).unwrap().as_str(), ok);
        }
        for (bad, why) in [
            ("turn:turn.example.com:3478", "stun:"),
            ("http://stun.example.com", "stun:"),
            ("stun.example.com:3478", "stun:"),
            ("stun://stun.example.com:3478", "without //"),
            ("stun:", "host"),
            ("stun::3478", "host"),
            ("stun:stun example.com", "whitespace"),
            ("stun:stun.example.com:0", "port"),
            ("stun:stun.example.com:65536", "port"),
            ("stun:stun.example.com:34x", "port"),
            ("stun:stun.example.com:", "port"),
            ("stun:stun.example.com?transport=udp", "no ?query"),
            ("stun:[2001:db8::1", "closing ]"),
            ("stun:[not-v6]:3478", "IPv6"),
            ("stun:user@stun.example.com", "host"),
        ] {
            let e = stun(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for (bad, why) in [
            ("stun:stun.example.com", "turn:"),
            ("turn:turn.example.com?transport=sctp", "transport=udp"),
            ("turn:turn.example.com:3478?x=1", "transport=udp"),
        ] {
            let e = turn(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// A known answer, computed independently with
    /// `printf %s "$U" | openssl dgst -sha1 -hmac north-wind-42 -binary | base64`, the suffix
    /// with `printf %s chat/mbx_0123456789abcdef | openssl dgst -sha256`.
    #[test]
    fn turn_rest_credentials_match_openssl() {
        let (user, cred) = turn_rest_credentials(
            b"north-wind-42",
            "chat",
            "mbx_0123456789abcdef",
            1_790_003_600,
        );
        assert_eq!(user, "1790003600:d92b1b550571c5fb");
        assert_eq!(cred, "0JavIwkG0dPQw0/6ihhW+oRjmqY=");
        // Another mailbox of the same app: another suffix, another credential.
        let (user2, cred2) = turn_rest_credentials(
            b"north-wind-42",
            "chat",
            "mbx_0123456789abcdeg",
            1_790_003_600,
        );
        assert_ne!(user2, user);
        assert_ne!(cred2, cred);
    }

    fn settings() -> Settings {
        Settings {
            ttl_s: 600,
            stun_urls: vec![],
            coturn: None,
            cloudflare: None,
        }
    }

    #[test]
    fn has_provider_is_any_of_the_three() {
        let mut s = settings();
        assert!(!s.has_provider());
        s.stun_urls = vec![stun("stun:a.example:3478").unwrap()];
        assert!(s.has_provider());
        let mut s = settings();
        s.coturn = Some(Coturn {
            urls: vec![turn("turn:t.example").unwrap()],
            secret: Secret::new("x"),
        });
        assert!(s.has_provider());
        let mut s = settings();
        s.cloudflare = Some(Cloudflare {
            key_id: "k".into(),
            api_token: Secret::new("t"),
            url: "https://rtc.live.cloudflare.com".into(),
            timeout: CLOUDFLARE_TIMEOUT,
            ca_file: None,
        });
        assert!(s.has_provider());
    }

    #[test]
    fn debug_never_prints_the_secret_or_the_token() {
        let mut s = settings();
        s.coturn = Some(Coturn {
            urls: vec![turn("turn:t.example").unwrap()],
            secret: Secret::new("coturn-hunter2"),
        });
        s.cloudflare = Some(Cloudflare {
            key_id: "key123".into(),
            api_token: Secret::new("cf-hunter2"),
            url: "http://127.0.0.1:9".into(),
            timeout: CLOUDFLARE_TIMEOUT,
            ca_file: None,
        });
        let shown = format!("{s:?}");
        assert!(
            shown.contains("key123") && shown.contains("turn:t.example"),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        let ice = Ice::new(&s).unwrap();
        let shown = format!("{ice:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let cf = ice.cloudflare.as_ref().unwrap();
        assert!(cf.authorization.is_sensitive());
        assert!(!format!("{:?}", cf.authorization).contains("hunter2"));
        assert_eq!(
            cf.uri.to_string(),
            "http://127.0.0.1:9/v1/turn/keys/key123/credentials/generate-ice-servers"
        );
        assert_eq!(&cf.body[..], br#"{"ttl":600}"#);
    }

    #[test]
    fn new_refuses_what_config_would_have_refused() {
        let cf = |key_id: &str, token: &str, url: &str| {
            let mut s = settings();
            s.cloudflare = Some(Cloudflare {
                key_id: key_id.into(),
                api_token: Secret::new(token),
                url: url.into(),
                timeout: CLOUDFLARE_TIMEOUT,
                ca_file: None,
            });
            Ice::new(&s).map(|_| ()).unwrap_err().to_string()
        };
        let e = cf("k/../x", "t", "https://rtc.live.cloudflare.com");
        assert!(e.contains("RELAY_ICE_CLOUDFLARE_KEY_ID"), "{e}");
        let e = cf("k", "bad\ntoken-hunter2", "https://rtc.live.cloudflare.com");
        assert!(
            e.contains("RELAY_ICE_CLOUDFLARE_API_TOKEN") && !e.contains("hunter2"),
            "{e}"
        );
        let e = cf("k", "t", "ftp://x");
        assert!(e.contains("RELAY_ICE_CLOUDFLARE_URL"), "{e}");
    }

    #[test]
    fn cloudflare_answers_are_read_into_rtc_ice_servers() {
        let array = br#"{"iceServers":[
            {"urls":["stun:stun.cloudflare.com:3478"]},
            {"urls":["turn:turn.cloudflare.com:3478?transport=udp","turns:turn.cloudflare.com:5349?transport=tcp"],
             "username":"u1","credential":"c1","extra":true}]}"#;
        let got = parse_cloudflare(array).unwrap();
        assert_eq!(
            Value::Array(got),
            json!([
                {"urls":["stun:stun.cloudflare.com:3478"]},
                {"urls":["turn:turn.cloudflare.com:3478?transport=udp","turns:turn.cloudflare.com:5349?transport=tcp"],
                 "username":"u1","credential":"c1"}
            ])
        );
        let single = br#"{"iceServers":{"urls":"turn:turn.cloudflare.com:3478","username":"u","credential":"c"}}"#;
        assert_eq!(
            Value::Array(parse_cloudflare(single).unwrap()),
            json!([{"urls":["turn:turn.cloudflare.com:3478"],"username":"u","credential":"c"}])
        );
        for (bad, why) in [
            (&b"<html>"[..], "not JSON"),
            (br#"{"servers":[]}"#, "no iceServers"),
            (br#"{"iceServers":[]}"#, "empty"),
            (br#"{"iceServers":"turn:x"}"#, "neither"),
            (br#"{"iceServers":[1]}"#, "not an object"),
            (br#"{"iceServers":[{"username":"u"}]}"#, "no urls"),
            (br#"{"iceServers":[{"urls":[]}]}"#, "no urls"),
            (br#"{"iceServers":[{"urls":[3]}]}"#, "not a string"),
            (
                br#"{"iceServers":[{"urls":["https://x.example"]}]}"#,
                "not stun:",
            ),
            (
                br#"{"iceServers":[{"urls":["turn:x.example"],"username":"u"}]}"#,
                "lacks",
            ),
            (
                br#"{"iceServers":[{"urls":["turn:x.example"],"username":"u","credential":7}]}"#,
                "not a string",
            ),
        ] {
            let e = parse_cloudflare(bad).unwrap_err();
            assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_error_knows_its_status_code_and_body() {
        let e = IceError::Upstream;
        assert_eq!(e.status(), 502);
        assert_eq!(e.code(), "upstream_unavailable");
        let body: Value = serde_json::from_str(e.body()).unwrap();
        assert_eq!(body, json!({"error":"upstream_unavailable","status":502}));
    }

    #[tokio::test]
    async fn stun_and_coturn_entries_come_in_order_with_the_ttl() {
        let mut s = settings();
        s.stun_urls = vec![
            stun("stun:a.example:3478").unwrap(),
            stun("stuns:b.example:5349").unwrap(),
        ];
        s.coturn = Some(Coturn {
            urls: vec![turn("turn:t.example:3478?transport=udp").unwrap()],
            secret: Secret::new("north-wind-42"),
        });
        let ice = Ice::new(&s).unwrap();
        let v = ice
            .servers("chat", "mbx_0123456789abcdef", 1_790_003_000)
            .await
            .unwrap();
        assert_eq!(
            v,
            json!({"iceServers":[
                {"urls":["stun:a.example:3478","stuns:b.example:5349"]},
                {"urls":["turn:t.example:3478?transport=udp"],
                 "username":"1790003600:d92b1b550571c5fb","credential":"0JavIwkG0dPQw0/6ihhW+oRjmqY="}
            ],"ttl":600})
        );
    }
}
