//! The ICE credentials module against real sockets: coturn credentials checked the way
//! coturn checks them and by a real coturn (`turnserver`, with coturn's own client), Cloudflare Realtime TURN through a mock of its API (the test kit's
//! `mock_cloudflare`) answering success, errors, malformed bodies, or nothing, both
//! providers together, STUN alone, and the per-provider counts.
//!
//! The module is reached through `sealrelay::testing::ice`; the route (`GET .../ice`, its
//! bucket and its 502) is tested black box in `tests/it/mailbox/contract.rs`, and the configuration here
//! through `sealrelay::config::Config::load`.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use sealrelay::testing::ice::{self, Cloudflare, Coturn, Ice, IceError, IceUrl, Settings, UrlKind};
use sealrelay::testing::Secret;
use sealrelay_testkit::coturn::TurnServer;
use sealrelay_testkit::mock_cloudflare::{MockCloudflare, Refused, Reply, STUN_URL, TURN_URLS};
use sealrelay_testkit::pki::Pki;
use serde_json::{json, Value};

const APP: &str = "chat";
const MAILBOX: &str = "mbx_K3q9-0123456789";
const TURN_SECRET: &str = "coturn-static-auth-secret";
const KEY_ID: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
const TOKEN: &str = "cf-api-token_0123456789";

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn stun_urls() -> Vec<IceUrl> {
    ["stun:stun.example.com:3478", "stuns:stun.example.com:5349"]
        .iter()
        .map(|u| IceUrl::parse(u, UrlKind::Stun).unwrap())
        .collect()
}

fn coturn() -> Coturn {
    Coturn {
        urls: [
            "turn:turn.example.com:3478?transport=udp",
            "turns:turn.example.com:5349?transport=tcp",
        ]
        .iter()
        .map(|u| IceUrl::parse(u, UrlKind::Turn).unwrap())
        .collect(),
        secret: Secret::new(TURN_SECRET),
    }
}

fn cloudflare(url: &str, token: &str, timeout: Duration) -> Cloudflare {
    Cloudflare {
        key_id: KEY_ID.into(),
        api_token: Secret::new(token),
        url: url.into(),
        timeout,
        ca_file: None,
    }
}

fn settings(ttl_s: u64) -> Settings {
    Settings {
        ttl_s,
        stun_urls: vec![],
        coturn: None,
        cloudflare: None,
    }
}

fn with_cloudflare(url: &str) -> Settings {
    Settings {
        cloudflare: Some(cloudflare(url, TOKEN, Duration::from_secs(5))),
        ..settings(600)
    }
}

// ------------------------------------------------------------------------------------------
// coturn, checked as coturn checks it

/// HMAC-SHA1 built from the hash (RFC 2104), independently of the module's `ring::hmac`.
fn hmac_sha1(key: &[u8], message: &[u8]) -> Vec<u8> {
    let sha1 = |parts: &[&[u8]]| {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
        for p in parts {
            ctx.update(p);
        }
        ctx.finish().as_ref().to_vec()
    };
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..20].copy_from_slice(&sha1(&[key]));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let ipad: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
    let inner = sha1(&[&ipad, message]);
    sha1(&[&opad, &inner])
}

/// What coturn's `use-auth-secret` does with a TURN REST username and password: the
/// timestamp before the separator (`:`) must not be in the past, and the password must be
/// base64(HMAC-SHA1(static-auth-secret, username)).
fn coturn_accepts(secret: &str, username: &str, password: &str, now_s: u64) -> bool {
    let Some((ts, _)) = username.split_once(':') else {
        return false;
    };
    let Ok(ts) = ts.parse::<u64>() else {
        return false;
    };
    if ts < now_s {
        return false;
    }
    let expected = base64::engine::general_purpose::STANDARD
        .encode(hmac_sha1(secret.as_bytes(), username.as_bytes()));
    expected == password
}

#[test]
fn the_hand_made_hmac_is_rfc_2202s() {
    // RFC 2202, test cases 2 and 6 (a key longer than the block).
    let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(
        hex(hmac_sha1(b"Jefe", b"what do ya want for nothing?")),
        "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
    );
    assert_eq!(
        hex(hmac_sha1(
            &[0xaa; 80],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "aa4ae5e15272d00e95705637ce8a3b55ed402112"
    );
}

#[tokio::test]
async fn coturn_credentials_pass_coturns_own_check() {
    let ttl = 3600;
    let ice = Ice::new(&Settings {
        coturn: Some(coturn()),
        ..settings(ttl)
    })
    .unwrap();
    let now = now_s();
    let answer = ice.servers(APP, MAILBOX, now).await.unwrap();
    assert_eq!(answer["ttl"], json!(ttl));
    let servers = answer["iceServers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{answer}");
    let entry = &servers[0];
    assert_eq!(
        entry["urls"],
        json!([
            "turn:turn.example.com:3478?transport=udp",
            "turns:turn.example.com:5349?transport=tcp"
        ])
    );
    let username = entry["username"].as_str().unwrap();
    let credential = entry["credential"].as_str().unwrap();

    // The expiry is now + ttl, in the future.
    let (expiry, suffix) = username.split_once(':').unwrap();
    let expiry: u64 = expiry.parse().unwrap();
    assert_eq!(expiry, now + ttl);
    assert!(expiry > now_s());
    // The suffix is 16 hex of SHA-256("<app>/<mailbox id>").
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{APP}/{MAILBOX}").as_bytes());
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(suffix, hex);

    // coturn lets it in; with another secret, another user name or once expired it does not.
    assert!(coturn_accepts(TURN_SECRET, username, credential, now_s()));
    assert!(!coturn_accepts(
        "another secret",
        username,
        credential,
        now_s()
    ));
    let other_user = format!("{}:{suffix}", expiry + 1);
    assert!(!coturn_accepts(
        TURN_SECRET,
        &other_user,
        credential,
        now_s()
    ));
    assert!(!coturn_accepts(
        TURN_SECRET,
        username,
        credential,
        expiry + 1
    ));

    // Another mailbox gets another user name; the same mailbox later, a later expiry.
    let other = ice
        .servers(APP, "mbx_another-mailbox-id", now)
        .await
        .unwrap();
    let other_name = other["iceServers"][0]["username"].as_str().unwrap();
    assert_ne!(other_name.split_once(':').unwrap().1, suffix);
    let later = ice.servers(APP, MAILBOX, now + 10).await.unwrap();
    let later_name = later["iceServers"][0]["username"].as_str().unwrap();
    assert_eq!(later_name, format!("{}:{suffix}", now + 10 + ttl));
    assert!(coturn_accepts(
        TURN_SECRET,
        later_name,
        later["iceServers"][0]["credential"].as_str().unwrap(),
        now_s()
    ));
}

/// The TURN user name and password `ice` hands out for `mailbox` at `now`.
async fn turn_credentials(ice: &Ice, port: u16, mailbox: &str, now: u64) -> (String, String) {
    let a = ice.servers(APP, mailbox, now).await.unwrap();
    let e = &a["iceServers"][0];
    assert_eq!(e["urls"][0], format!("turn:127.0.0.1:{port}?transport=udp"));
    (
        e["username"].as_str().unwrap().to_owned(),
        e["credential"].as_str().unwrap().to_owned(),
    )
}

/// The same credentials against a real coturn (`turnserver` with `use-auth-secret`): coturn's
/// own client allocates a relay with them and sends traffic through it; with a credential
/// made with another secret, an expired one, or another mailbox's password, coturn refuses
/// the allocation.
#[tokio::test]
async fn a_real_coturn_allocates_with_the_relays_credentials() {
    let turn = TurnServer::start(TURN_SECRET);
    let ttl = 600;
    let settings = |secret: &str| Settings {
        coturn: Some(Coturn {
            urls: vec![IceUrl::parse(
                &format!("turn:127.0.0.1:{}?transport=udp", turn.port),
                UrlKind::Turn,
            )
            .unwrap()],
            secret: Secret::new(secret),
        }),
        ..settings(ttl)
    };
    let ice = Ice::new(&settings(TURN_SECRET)).unwrap();
    let (user, pass) = turn_credentials(&ice, turn.port, MAILBOX, now_s()).await;
    let ok = turn.allocate(&user, &pass);
    assert!(
        ok.allocated,
        "coturn refused the relay's credentials:\n{}",
        ok.output
    );
    assert!(ok.received > 0, "nothing crossed the relay:\n{}", ok.output);

    let wrong = Ice::new(&settings("another secret")).unwrap();
    let (user, pass) = turn_credentials(&wrong, turn.port, MAILBOX, now_s()).await;
    let refused = turn.allocate(&user, &pass);
    assert!(
        !refused.allocated,
        "another secret was accepted:\n{}",
        refused.output
    );

    // Made long enough ago that the expiry in the user name has passed.
    let (user, pass) = turn_credentials(&ice, turn.port, MAILBOX, now_s() - ttl - 60).await;
    let expired = turn.allocate(&user, &pass);
    assert!(
        !expired.allocated,
        "an expired credential was accepted:\n{}",
        expired.output
    );

    // One mailbox's password does not open another's user name.
    let (user, _) = turn_credentials(&ice, turn.port, "mbx_another-mailbox-id", now_s()).await;
    let (_, pass) = turn_credentials(&ice, turn.port, MAILBOX, now_s()).await;
    let mixed = turn.allocate(&user, &pass);
    assert!(
        !mixed.allocated,
        "a password for another user name was accepted:\n{}",
        mixed.output
    );
}

#[tokio::test]
async fn stun_alone_is_one_entry_without_credentials() {
    let ice = Ice::new(&Settings {
        stun_urls: stun_urls(),
        ..settings(120)
    })
    .unwrap();
    let answer = ice.servers(APP, MAILBOX, now_s()).await.unwrap();
    assert_eq!(
        answer,
        json!({"iceServers":[{"urls":["stun:stun.example.com:3478","stuns:stun.example.com:5349"]}],"ttl":120})
    );
    // The exact text the handler sends: members in the spec's order.
    assert_eq!(
        answer.to_string(),
        r#"{"iceServers":[{"urls":["stun:stun.example.com:3478","stuns:stun.example.com:5349"]}],"ttl":120}"#
    );
}

// ------------------------------------------------------------------------------------------
// Cloudflare

#[tokio::test]
async fn cloudflare_is_asked_with_the_bearer_the_key_id_and_the_ttl() {
    let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
    let ice = Ice::new(&with_cloudflare(&mock.url())).unwrap();
    let answer = ice.servers(APP, MAILBOX, now_s()).await.unwrap();
    assert_eq!(
        answer,
        json!({"iceServers":[
            {"urls":[STUN_URL]},
            {"urls":TURN_URLS,"username":MockCloudflare::username(1, 600),"credential":MockCloudflare::credential(1)},
        ],"ttl":600})
    );
    let got = mock.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.path,
        format!("/v1/turn/keys/{KEY_ID}/credentials/generate-ice-servers")
    );
    assert_eq!(
        r.authorization.as_deref(),
        Some(&*format!("Bearer {TOKEN}"))
    );
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        serde_json::from_slice::<Value>(&r.body).unwrap(),
        json!({"ttl":600})
    );
    assert_eq!(r.status, 201);
    // Each answer is a fresh request (fresh credentials), on the pooled connection.
    let again = ice.servers(APP, MAILBOX, now_s()).await.unwrap();
    assert_eq!(
        again["iceServers"][1]["username"],
        json!(MockCloudflare::username(2, 600))
    );
    assert_eq!(mock.received().len(), 2);
}

#[tokio::test]
async fn a_single_iceservers_object_answered_200_is_appended_too() {
    let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
    mock.set_reply(Reply::SingleObject);
    // A base URL with a trailing slash works the same.
    let ice = Ice::new(&with_cloudflare(&format!("{}/", mock.url()))).unwrap();
    let answer = ice.servers(APP, MAILBOX, now_s()).await.unwrap();
    let mut urls = vec![STUN_URL];
    urls.extend(TURN_URLS);
    assert_eq!(
        answer["iceServers"],
        json!([{"urls":urls,"username":MockCloudflare::username(1, 600),"credential":MockCloudflare::credential(1)}])
    );
    assert_eq!(mock.received()[0].status, 200);
}

#[tokio::test]
async fn every_provider_together_in_order_stun_coturn_cloudflare() {
    let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
    let ice = Ice::new(&Settings {
        stun_urls: stun_urls(),
        coturn: Some(coturn()),
        ..with_cloudflare(&mock.url())
    })
    .unwrap();
    let now = now_s();
    let answer = ice.servers(APP, MAILBOX, now).await.unwrap();
    let servers = answer["iceServers"].as_array().unwrap();
    assert_eq!(servers.len(), 4, "{answer}");
    assert_eq!(
        servers[0],
        json!({"urls":["stun:stun.example.com:3478","stuns:stun.example.com:5349"]})
    );
    assert_eq!(
        servers[1]["urls"][0],
        "turn:turn.example.com:3478?transport=udp"
    );
    assert!(coturn_accepts(
        TURN_SECRET,
        servers[1]["username"].as_str().unwrap(),
        servers[1]["credential"].as_str().unwrap(),
        now
    ));
    assert_eq!(servers[2], json!({"urls":[STUN_URL]}));
    assert_eq!(servers[3]["urls"], json!(TURN_URLS));
    assert_eq!(
        servers[3]["username"],
        json!(MockCloudflare::username(1, 600))
    );
    assert_eq!(answer["ttl"], 600);
}

/// Asserts the whole answer is the 502, and says how long it took.
async fn upstream(ice: &Ice) -> Duration {
    let start = Instant::now();
    let e = ice.servers(APP, MAILBOX, now_s()).await.unwrap_err();
    assert_eq!(e, IceError::Upstream);
    assert_eq!(e.status(), 502);
    assert_eq!(
        serde_json::from_str::<Value>(e.body()).unwrap(),
        json!({"error":"upstream_unavailable","status":502})
    );
    start.elapsed()
}

#[tokio::test]
async fn an_error_status_from_cloudflare_makes_the_whole_answer_502() {
    let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
    // STUN and coturn are configured too: no partial list is answered.
    let settings = |url: &str, token: &str| Settings {
        stun_urls: stun_urls(),
        coturn: Some(coturn()),
        cloudflare: Some(cloudflare(url, token, Duration::from_secs(5))),
        ..settings(600)
    };
    let ice = Ice::new(&settings(&mock.url(), TOKEN)).unwrap();
    for (status, body) in [
        (500, r#"{"success":false}"#.to_owned()),
        (503, String::new()),
        (429, r#"{"success":false}"#.to_owned()),
        // A 2xx other than 200 and 201, even with servers in it.
        (202, json!({"iceServers":[{"urls":[STUN_URL]}]}).to_string()),
    ] {
        mock.set_reply(Reply::Raw(status, body));
        upstream(&ice).await;
        assert_eq!(mock.received().last().unwrap().status, status);
    }
    // A wrong token: the mock answers 401 as Cloudflare does.
    mock.set_reply(Reply::Servers);
    let wrong = Ice::new(&settings(&mock.url(), "not-the-token")).unwrap();
    upstream(&wrong).await;
    assert_eq!(mock.received().last().unwrap().status, 401);
    // And the right one still works on the same mock.
    assert!(ice.servers(APP, MAILBOX, now_s()).await.is_ok());
}

#[tokio::test]
async fn a_body_that_is_not_ice_servers_is_502() {
    let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
    let ice = Ice::new(&with_cloudflare(&mock.url())).unwrap();
    for body in [
        "<html>Bad gateway</html>".to_owned(),
        String::new(),
        r#"{"result":{}}"#.to_owned(),
        r#"{"iceServers":[]}"#.to_owned(),
        r#"{"iceServers":"turn:turn.cloudflare.com"}"#.to_owned(),
        r#"{"iceServers":[{"username":"u","credential":"c"}]}"#.to_owned(),
        r#"{"iceServers":[{"urls":["turn:turn.cloudflare.com:3478"]}]}"#.to_owned(),
        r#"{"iceServers":[{"urls":["https://turn.cloudflare.com"],"username":"u","credential":"c"}]}"#
            .to_owned(),
        // Well formed but larger than an answer may be.
        format!("{{\"iceServers\":[{{\"urls\":[\"stun:{}\"]}}]}}", "x".repeat(100_000)),
    ] {
        for status in [200, 201] {
            mock.set_reply(Reply::Raw(status, body.clone()));
            upstream(&ice).await;
            assert_eq!(mock.received().last().unwrap().status, status, "{body}");
        }
    }
}

#[tokio::test]
async fn an_unreachable_cloudflare_is_502_at_once() {
    let refused = Refused::new().unwrap();
    let ice = Ice::new(&Settings {
        stun_urls: stun_urls(),
        ..with_cloudflare(&refused.url())
    })
    .unwrap();
    let took = upstream(&ice).await;
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_cloudflare_that_never_answers_is_502_after_the_timeout() {
    let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
    mock.set_reply(Reply::Hang);
    let timeout = Duration::from_millis(400);
    let ice = Ice::new(&Settings {
        cloudflare: Some(cloudflare(&mock.url(), TOKEN, timeout)),
        ..settings(600)
    })
    .unwrap();
    let took = upstream(&ice).await;
    assert!(took >= timeout && took < timeout * 5, "{took:?}");
    // The request was sent whole and held unanswered.
    let got = mock.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, 0);
    assert_eq!(
        serde_json::from_slice::<Value>(&got[0].body).unwrap(),
        json!({"ttl":600})
    );
    // The production deadline is the documented five seconds.
    assert_eq!(ice::CLOUDFLARE_TIMEOUT, Duration::from_secs(5));
}

#[tokio::test]
async fn https_is_spoken_and_an_untrusted_certificate_is_refused() {
    // Without RELAY_ICE_CLOUDFLARE_CA_FILE the relay trusts Mozilla's roots only: the test
    // CA's certificate is refused before any request is sent.
    let pki = Pki::new();
    let mock = MockCloudflare::start(KEY_ID, TOKEN, Some(&pki))
        .await
        .unwrap();
    assert!(mock.url().starts_with("https://127.0.0.1:"));
    let ice = Ice::new(&with_cloudflare(&mock.url())).unwrap();
    upstream(&ice).await;
    assert!(mock.received().is_empty());
    // Another CA's bundle does not help either.
    let other = Pki::new();
    let mut s = with_cloudflare(&mock.url());
    s.cloudflare.as_mut().unwrap().ca_file = Some(other.ca_file.clone());
    upstream(&Ice::new(&s).unwrap()).await;
    assert!(mock.received().is_empty());
    // With the mock's CA as RELAY_ICE_CLOUDFLARE_CA_FILE (an egress proxy's, in production)
    // the same request goes through over TLS.
    let mut s = with_cloudflare(&mock.url());
    s.cloudflare.as_mut().unwrap().ca_file = Some(pki.ca_file.clone());
    let answer = Ice::new(&s)
        .unwrap()
        .servers(APP, MAILBOX, now_s())
        .await
        .unwrap();
    assert_eq!(
        answer["iceServers"][1]["urls"],
        json!(TURN_URLS),
        "{answer}"
    );
    assert_eq!(mock.received().len(), 1);
}

// ------------------------------------------------------------------------------------------
// Metrics

/// The value of `sealrelay_ice_requests_total{provider,outcome}` in an exposition.
fn count(text: &str, provider: &str, outcome: &str) -> Option<u64> {
    let p = format!("provider=\"{provider}\"");
    let o = format!("outcome=\"{outcome}\"");
    text.lines()
        .find(|l| l.starts_with("sealrelay_ice_requests_total") && l.contains(&p) && l.contains(&o))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn each_providers_outcome_is_counted() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    ::metrics::with_local_recorder(&recorder, || {
        // Every series exists at zero before the first request.
        sealrelay::testing::register_metrics();
        let text = handle.render();
        for provider in ["stun", "coturn", "cloudflare"] {
            for outcome in ["ok", "error"] {
                assert_eq!(
                    count(&text, provider, outcome),
                    Some(0),
                    "{provider} {outcome}\n{text}"
                );
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mock = MockCloudflare::start(KEY_ID, TOKEN, None).await.unwrap();
            let ice = Ice::new(&Settings {
                stun_urls: stun_urls(),
                coturn: Some(coturn()),
                ..with_cloudflare(&mock.url())
            })
            .unwrap();
            for _ in 0..2 {
                ice.servers(APP, MAILBOX, now_s()).await.unwrap();
            }
            mock.set_reply(Reply::Raw(500, String::new()));
            ice.servers(APP, MAILBOX, now_s()).await.unwrap_err();
            // STUN alone counts only STUN.
            let stun = Ice::new(&Settings {
                stun_urls: stun_urls(),
                ..settings(600)
            })
            .unwrap();
            stun.servers(APP, MAILBOX, now_s()).await.unwrap();
        });
        let text = handle.render();
        let expected = [
            ("stun", "ok", 4),
            ("stun", "error", 0),
            ("coturn", "ok", 3),
            ("coturn", "error", 0),
            ("cloudflare", "ok", 2),
            ("cloudflare", "error", 1),
        ];
        for (provider, outcome, n) in expected {
            assert_eq!(
                count(&text, provider, outcome),
                Some(n),
                "{provider} {outcome}\n{text}"
            );
        }
    });
}

// ------------------------------------------------------------------------------------------
// The configuration, black box

fn load(
    pairs: &[(&str, &str)],
) -> Result<sealrelay::config::Config, sealrelay::config::ConfigErrors> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    sealrelay::config::Config::load(&move |k: &str| map.get(k).cloned())
}

#[test]
fn the_configuration_never_shows_the_secret_or_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "cf-hunter2\n").unwrap();
    let c = load(&[
        ("RELAY_ICE_STUN_URLS", "stun:stun.example.com:3478"),
        (
            "RELAY_ICE_TURN_URLS",
            "turn:turn.example.com:3478?transport=udp",
        ),
        ("RELAY_ICE_TURN_SECRET", "coturn-hunter2"),
        ("RELAY_ICE_CLOUDFLARE_KEY_ID", KEY_ID),
        (
            "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE",
            token_file.to_str().unwrap(),
        ),
    ])
    .unwrap();
    let shown = format!("{c:?}");
    assert!(
        shown.contains(KEY_ID) && shown.contains("turn:turn.example.com"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
    // Problems name the variables, not the secrets.
    let e = load(&[
        ("RELAY_ICE_TURN_SECRET", "coturn-hunter2"),
        ("RELAY_ICE_CLOUDFLARE_API_TOKEN", "cf-hunter2"),
        ("RELAY_ICE_STUN_URLS", "stun:ok.example,turn:wrong.example"),
        ("RELAY_ICE_TTL_S", "30"),
    ])
    .unwrap_err()
    .to_string();
    for name in [
        "RELAY_ICE_TURN_URLS",
        "RELAY_ICE_CLOUDFLARE_KEY_ID",
        "RELAY_ICE_STUN_URLS",
        "RELAY_ICE_TTL_S",
    ] {
        assert!(e.contains(name), "{name}: {e}");
    }
    assert!(!e.contains("hunter2"), "{e}");
}
