//! More of the mailbox front-end, black box: push through the FCM module against the mock
//! FCM (OAuth2 and HTTP v1 over TLS), ICE through its route (STUN, coturn, Cloudflare's
//! mock, the 502, the bucket), one store round trip per request, and a scan that no device
//! token, bearer or mailbox id reaches Redis's keys, Redis's values (tokens and bearers),
//! the logs or the metrics.

use std::time::{Duration, Instant};

use crate::common::mailbox::*;
use crate::common::*;
use sealrelay_testkit::mock_cloudflare::MockCloudflare;
use sealrelay_testkit::mock_fcm::{MockFcm, MockFcmConfig, MockReply};
use serde_json::json;

fn fcm_token(n: usize) -> String {
    format!("dev{n:05}_Xq:APA91bH{}", "k3-Zp9_wQ".repeat(16))
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_through_the_fcm_module() {
    let fcm = MockFcm::start(MockFcmConfig::default()).await.unwrap();
    let h = Harness::with(
        Options::default()
            .var("RELAY_APPS", "chat:push=com.example.cronstable")
            .var("FCM_SERVICE_ACCOUNT", &fcm.service_account_json())
            .var("FCM_URL", &fcm.url())
            .var("FCM_CA_FILE", fcm.ca_file().to_str().unwrap()),
    )
    .await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(1), &bearer(1));
    assert_eq!(m.claim().await, 201);
    let token = fcm_token(1);
    // The FCM module's rules.
    for bad in [
        json!({"service": "fcm", "token": "short", "tag": "t"}),
        json!({"service": "fcm", "token": token, "tag": "t", "environment": "production"}),
        json!({"service": "fcm", "tag": "t"}),
    ] {
        assert_eq!(m.register("c2p", &bad).await.status, 400, "{bad}");
    }
    let reg = json!({"service": "fcm", "token": token, "tag": "Zq3k8r2mT1u0wQ", "alert": "Nouveau message"});
    assert_eq!(m.register("c2p", &reg).await.status, 204);
    assert_eq!(m.put_notify("c2p", 1, b"x", "alert").await.status, 201);
    wait_for(|| fcm.messages_for(&token).len() == 1).await;
    let msg = &fcm.messages_for(&token)[0];
    assert_eq!(msg.data("zerobyte_tag"), Some("Zq3k8r2mT1u0wQ"));
    assert_eq!(msg.data("zerobyte_notify"), Some("alert"));
    assert_eq!(msg.data("zerobyte_alert"), Some("Nouveau message"));
    assert_eq!(
        (msg.priority.as_str(), msg.ttl.as_str()),
        ("high", "604800s")
    );
    let body: serde_json::Value = serde_json::from_slice(&msg.body).unwrap();
    assert_eq!(
        body,
        json!({"message": {"token": token, "data": {"zerobyte_tag": "Zq3k8r2mT1u0wQ", "zerobyte_notify": "alert", "zerobyte_alert": "Nouveau message"}, "android": {"priority": "high", "ttl": "604800s"}}})
    );
    assert_eq!(m.put_notify("c2p", 2, b"x", "silent").await.status, 201);
    wait_for(|| fcm.messages_for(&token).len() == 2).await;
    let msg = &fcm.messages_for(&token)[1];
    assert_eq!(msg.data("zerobyte_notify"), Some("silent"));
    assert_eq!(msg.data("zerobyte_alert"), None);
    assert_eq!(
        (msg.priority.as_str(), msg.ttl.as_str()),
        ("normal", "3600s")
    );
    assert_eq!(fcm.token_requests(), 1, "the access token is cached");

    // INVALID_ARGUMENT keeps the registration; UNREGISTERED forgets it.
    fcm.reply_times(&token, MockReply::InvalidArgument, 1);
    assert_eq!(m.put_notify("c2p", 3, b"x", "alert").await.status, 201);
    wait_for(|| fcm.messages_for(&token).len() == 3).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    fcm.reply_times(&token, MockReply::Unregistered, 1);
    assert_eq!(m.put_notify("c2p", 4, b"x", "alert").await.status, 201);
    wait_for(|| fcm.messages_for(&token).len() == 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.put_notify("c2p", 5, b"x", "alert").await.status, 201);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fcm.messages_for(&token).len(),
        4,
        "the dead token's registration is gone"
    );
}

/// Without a module for its service a registration is kept and nothing is sent; X-Relay-Notify
/// is accepted and ignored by an app without push=.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_module_registrations_are_kept_and_nothing_is_sent() {
    let h = Harness::with(
        Options::default()
            .without_credentials()
            .var("RELAY_DRY_RUN", "true")
            .var("RELAY_APPS", "chat:push=com.example.cronstable;plain"),
    )
    .await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(1), &bearer(1));
    assert_eq!(m.claim().await, 201);
    let reg = json!({"service": "apns", "token": "not checked without the module", "tag": "t"});
    assert_eq!(m.register("p2c", &reg).await.status, 204);
    assert_eq!(m.put_notify("p2c", 1, b"x", "alert").await.status, 201);
    let plain = Mb::new(h.addr(), "plain", &mailbox_id(2), &bearer(2));
    assert_eq!(plain.claim().await, 201);
    assert_eq!(plain.put_notify("p2c", 1, b"x", "silent").await.status, 201);
    assert_eq!(plain.put_notify("p2c", 2, b"x", "bogus").await.status, 400);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = h.admin("/metrics").await.body;
    assert!(
        metrics.lines().any(|l| l == r#"sealrelay_mailbox_pushes_total{service="apns",outcome="no_module"} 1"#),
        "{}",
        metrics.lines().filter(|l| l.contains("mailbox_pushes")).collect::<Vec<_>>().join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ice_through_its_route() {
    let cf = MockCloudflare::start(
        "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "cf-api-token_0123456789",
        None,
    )
    .await
    .unwrap();
    let h = Harness::with(
        Options::default()
            .clock(sealrelay::clock::Clock::manual(T0))
            .var("RELAY_APPS", "chat:ice;notes")
            .var("RELAY_ICE_TTL_S", "600")
            .var("RELAY_ICE_STUN_URLS", "stun:stun.example.com:3478")
            .var(
                "RELAY_ICE_TURN_URLS",
                "turn:turn.example.com:3478?transport=udp",
            )
            .var("RELAY_ICE_TURN_SECRET", "coturn-static-auth-secret")
            .var(
                "RELAY_ICE_CLOUDFLARE_KEY_ID",
                "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            )
            .var("RELAY_ICE_CLOUDFLARE_API_TOKEN", "cf-api-token_0123456789")
            .var("RELAY_ICE_CLOUDFLARE_URL", &cf.url()),
    )
    .await;
    let m = Mb::new(h.addr(), "chat", &mailbox_id(1), &bearer(1));
    assert_eq!(
        m.call("GET", "/ice", &[], Vec::new()).await.status,
        404,
        "not claimed"
    );
    assert_eq!(m.claim().await, 201);
    let r = m.call("GET", "/ice", &[], Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["ttl"], 600);
    let servers = v["iceServers"].as_array().unwrap();
    assert_eq!(servers[0], json!({"urls": ["stun:stun.example.com:3478"]}));
    let username = servers[1]["username"].as_str().unwrap();
    let (expiry, suffix) = username.split_once(':').unwrap();
    assert_eq!(expiry.parse::<i64>().unwrap(), T0 / 1000 + 600);
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("chat/{}", mailbox_id(1)).as_bytes(),
    );
    let hex: String = d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(suffix, hex);
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        b"coturn-static-auth-secret",
    );
    use base64::Engine;
    let expect = base64::engine::general_purpose::STANDARD
        .encode(ring::hmac::sign(&key, username.as_bytes()));
    assert_eq!(servers[1]["credential"], expect.as_str());
    assert!(servers.len() > 2, "Cloudflare's entries appended: {v}");
    assert_eq!(cf.received().len(), 1);
    // The ICE bucket: 6, then 429 (five more, one already spent).
    for _ in 0..5 {
        assert_eq!(m.call("GET", "/ice", &[], Vec::new()).await.status, 200);
    }
    let r = m.call("GET", "/ice", &[], Vec::new()).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (429, r#"{"error":"rate_limited","status":429}"#)
    );
    assert_eq!(r.header("retry-after"), Some("30"));
    // Cloudflare failing makes the whole answer 502.
    cf.set_reply(sealrelay_testkit::mock_cloudflare::Reply::Raw(
        500,
        String::new(),
    ));
    let other = Mb::new(h.addr(), "chat", &mailbox_id(2), &bearer(2));
    assert_eq!(other.claim().await, 201);
    let r = other.call("GET", "/ice", &[], Vec::new()).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (502, r#"{"error":"upstream_unavailable","status":502}"#)
    );
    // An app without ice: the one 404.
    let notes = Mb::new(h.addr(), "notes", &mailbox_id(3), &bearer(3));
    assert_eq!(notes.claim().await, 201);
    assert_eq!(notes.call("GET", "/ice", &[], Vec::new()).await.status, 404);
}

#[test]
fn ice_without_a_provider_stops_start_up() {
    let map: std::collections::HashMap<String, String> =
        [("RELAY_APPS".to_owned(), "chat:ice".to_owned())]
            .into_iter()
            .collect();
    let e = sealrelay::config::Config::load(&move |k: &str| map.get(k).cloned())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("RELAY_APPS") && e.contains("no ICE provider"),
        "{e}"
    );
}

/// Every mailbox request costs one store round trip (one script); a watch upgrade costs one
/// more (the channel's subscription).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_request() {
    let redis = RedisServer::start();
    let h = Harness::with(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_APPS", "chat:push=com.example.cronstable"),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.admin("/readyz").await.status != 200 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = Mb::new(h.addr(), "chat", &mailbox_id(1), &bearer(1));
    assert_eq!(m.claim().await, 201, "warm-up: the script loaded");
    // The relay's own count of store round trips by operation (the retry worker's and the
    // queue gauges' polls run beside, under their queue_* names).
    let ops = || async {
        let text = h.admin("/metrics").await.body;
        let mut out = std::collections::BTreeMap::new();
        for l in text.lines() {
            let Some(rest) = l.strip_prefix(r#"sealrelay_store_duration_seconds_count{op=""#)
            else {
                continue;
            };
            let (op, n) = rest.split_once(r#""} "#).unwrap();
            if !op.starts_with("queue_") {
                out.insert(op.to_owned(), n.parse::<u64>().unwrap());
            }
        }
        out
    };
    let calls = |before: &std::collections::BTreeMap<String, u64>,
                 after: &std::collections::BTreeMap<String, u64>| {
        after
            .iter()
            .filter_map(|(k, v)| {
                let d = v - before.get(k).copied().unwrap_or(0);
                (d > 0).then(|| (k.clone(), d))
            })
            .collect::<Vec<_>>()
    };
    // The relay's own subscription (the signers channel, followed from start-up) may land
    // after readiness; it is not a request's round trip, so the counting starts after it
    // succeeded (an attempt that failed, the subscriber not yet connected on a loaded
    // machine, is counted too and tried again half a second later).
    let subscribed = || async {
        let text = h.admin("/metrics").await.body;
        let count = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .map_or(0, |n| n.trim().parse::<u64>().unwrap())
        };
        count(r#"sealrelay_store_duration_seconds_count{op="fanout_subscribe"} "#)
            > count(r#"sealrelay_store_errors_total{op="fanout_subscribe"} "#)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !subscribed().await {
        assert!(
            Instant::now() < deadline,
            "the signers channel was never followed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reg =
        json!({"service": "apns", "token": device(5), "environment": "production", "tag": "t"});
    macro_rules! one {
        ($name:expr, $e:expr) => {{
            let before = ops().await;
            let status: u16 = $e;
            assert!(status < 300, "{}: {status}", $name);
            assert_eq!(
                calls(&before, &ops().await),
                vec![("mailbox".to_owned(), 1)],
                "{}",
                $name
            );
        }};
    }
    one!("claim", m.claim().await);
    one!("put", m.put("p2c", 1, b"x").await.status);
    one!(
        "put notify",
        m.put_notify("p2c", 2, b"x", "alert").await.status
    );
    one!("list", m.list("p2c", "").await.status);
    one!("get", m.call("GET", "/p2c/1", &[], Vec::new()).await.status);
    one!("head", m.call("HEAD", "/p2c", &[], Vec::new()).await.status);
    one!(
        "prune",
        m.call("DELETE", "/p2c?upto=1", &[], Vec::new())
            .await
            .status
    );
    one!("register", m.register("c2p", &reg).await.status);
    one!(
        "unregister",
        m.call("DELETE", "/c2p/push", &[], Vec::new()).await.status
    );
    let before = ops().await;
    let _w = m.watch("p2c").await;
    assert_eq!(
        calls(&before, &ops().await),
        vec![
            ("fanout_subscribe".to_owned(), 1),
            ("mailbox".to_owned(), 1)
        ],
        "watch: the subscription and the script"
    );
    let before = ops().await;
    assert_eq!(m.erase().await, 204);
    assert_eq!(
        calls(&before, &ops().await),
        vec![("mailbox".to_owned(), 1)],
        "erase"
    );
}

/// Nothing secret anywhere: Redis's keys and values, the logs, the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_bearer_or_id_in_redis_logs_or_metrics() {
    use crate::common::process::RelayProcess;
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let redis = RedisServer::start();
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    vars.push(("REDIS_URL".into(), redis.url()));
    vars.push((
        "RELAY_APPS".into(),
        "chat:push=com.example.cronstable,signal".into(),
    ));
    // Every log line, debug included.
    vars.push(("RUST_LOG".into(), "debug".into()));
    let relay = tokio::task::block_in_place(|| RelayProcess::spawn(&vars));
    let addr = format!("127.0.0.1:{}", relay.port).parse().unwrap();
    let id = "secret-mailbox-id-0123456789";
    let token = "Bearer-Token_of-the-link~0123456789abcdef";
    let m = Mb::new(addr, "chat", id, token);
    assert_eq!(m.claim().await, 201);
    let apns_token = format!("{}{}", "feedc0de", "ab".repeat(60));
    let reg = json!({"service": "apns", "token": apns_token, "environment": "production", "tag": "TagOfTheLink"});
    assert_eq!(m.register("p2c", &reg).await.status, 204);
    assert_eq!(
        m.put_notify("p2c", 1, b"the envelope bytes", "alert")
            .await
            .status,
        201
    );
    let mut w = m.socket("/p2c/watch", false).await.unwrap().0;
    send_text(&mut w, "ping").await;
    assert_eq!(
        next_text(&mut w, Duration::from_secs(5)).await.as_deref(),
        Some("pong")
    );
    let mut p = m.socket("/signal/primary", false).await.unwrap().0;
    let mut c = m.socket("/signal/companion", true).await.unwrap().0;
    assert_eq!(
        next_text(&mut c, Duration::from_secs(5)).await.as_deref(),
        Some("peer 1")
    );
    send_binary(&mut p, b"sealed frame".to_vec()).await;
    assert_eq!(
        m.with_bearer("Wrong-Bearer-Token-0123456789").claim().await,
        403
    );
    wait_for(|| !prod.received_for(&apns_token).is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let secrets = [token, apns_token.as_str(), id, "TagOfTheLink"];
    // Redis: every key, and every value of every key.
    let keys = redis.cli(&["--scan"]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert!(keys.len() >= 3, "{keys:?}");
    for k in &keys {
        for s in secrets {
            assert!(!k.contains(s), "key {k} holds {s}");
        }
        let t = redis.cli(&["TYPE", k]);
        let dump = match t.trim() {
            "hash" => redis.cli(&["HGETALL", k]),
            "zset" => redis.cli(&["ZRANGE", k, "0", "-1"]),
            "list" => redis.cli(&["LRANGE", k, "0", "-1"]),
            "string" => redis.cli(&["GET", k]),
            other => panic!("{k}: {other}"),
        };
        for s in [token, apns_token.as_str(), "TagOfTheLink"] {
            assert!(!dump.contains(s), "{k} holds {s}");
        }
    }
    // The logs and the metrics.
    let exposition = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", relay.admin)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(exposition.contains("sealrelay_mailbox_requests_total"));
    let logs = relay.lines().join("\n");
    assert!(
        logs.contains("mailbox"),
        "the relay logged its mailbox requests"
    );
    for s in secrets {
        assert!(!exposition.contains(s), "metrics hold {s}");
        assert!(!logs.contains(s), "logs hold {s}");
    }
    assert!(!logs.contains("the envelope bytes") && !logs.contains("sealed frame"));
}

/// A prune is bounded per script call: a direction of 100,000 envelopes pruned whole
/// (`DELETE .../p2c?upto=100000`) is 100 script calls of at most 1,000 deletions each, and
/// none holds Redis for 10 ms (Redis's slow log, at 10 ms, stays empty). Before, one call
/// deleted all 100,000 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_prune_never_holds_redis_long() {
    let redis = RedisServer::start();
    let h = Harness::with(
        Options::default()
            .var("REDIS_URL", &redis.url())
            .var("RELAY_APPS", "chat")
            .var("RELAY_MAILBOX_MAX_ENVELOPES", "100000"),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.admin("/readyz").await.status != 200 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = Mb::new(h.addr(), "chat", &mailbox_id(5), &bearer(5));
    assert_eq!(m.claim().await, 201);
    let d = ring::digest::digest(&ring::digest::SHA256, format!("chat/{}", m.id).as_bytes());
    let name: String = d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let (e, s) = (
        format!("sealrelay:{{mb:{name}}}:e:p2c"),
        format!("sealrelay:{{mb:{name}}}:s:p2c"),
    );
    // 100,000 envelopes, written straight into the direction's keys, 5,000 a call (so the
    // filling does not stall the relay's own calls).
    for from in (1..=100_000).step_by(5_000) {
        let from = from.to_string();
        redis.cli(&[
            "EVAL",
            "for i = tonumber(ARGV[1]), tonumber(ARGV[1]) + 4999 do redis.call('HSET', KEYS[1], i, 'x'); redis.call('ZADD', KEYS[2], i, i) end",
            "2",
            &e,
            &s,
            &from,
        ]);
    }
    // (A store call that timed out during the filling makes the replica answer 503 until
    // its next probe.)
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let head = m.call("HEAD", "/p2c", &[], Vec::new()).await;
        if head.status == 204 {
            assert_eq!(head.header("x-relay-count"), Some("100000"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} {:?}",
            head.status,
            head.headers
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    redis.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
    redis.cli(&["SLOWLOG", "RESET"]);
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let started = Instant::now();
    let r = m.call("DELETE", "/p2c?upto=100000", &[], Vec::new()).await;
    let took = started.elapsed();
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(redis.cli(&["ZCARD", &s]).trim(), "0");
    assert_eq!(redis.cli(&["EXISTS", &e]).trim(), "0");
    let slow = redis.cli(&["SLOWLOG", "GET", "10"]);
    assert_eq!(
        redis.cli(&["SLOWLOG", "LEN"]).trim(),
        "0",
        "a call held Redis 10 ms or more: {slow}"
    );
    let stats = redis.cli(&["INFO", "commandstats"]);
    let evalsha = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .expect("the prune's script calls");
    let calls: u64 = evalsha
        .split(['=', ','])
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    assert!(calls >= 100, "{evalsha}");
    println!("prune of 100,000 envelopes: {took:?} in all; {evalsha}");
}
