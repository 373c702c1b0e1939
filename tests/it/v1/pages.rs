//! The hosted pages a daemon's pairing QR points at, on the real relay: statuses, headers,
//! the apple-app-site-association file in its three configurations, and the landing page in
//! a real headless Chromium (`tests/browser/pages.mjs`, driven through playwright-core).

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn pages_answer_get_and_head_and_refuse_other_methods() {
    let h = Harness::start().await;
    for path in ["/pair", "/privacy"] {
        let r = h.request("GET", path, vec![]).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let csp = r.header("content-security-policy").unwrap();
        assert!(csp.starts_with("default-src 'none'"), "{csp}");
        assert!(!csp.contains("http"), "nothing from elsewhere: {csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
        let head = h.request("HEAD", path, vec![]).await;
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        for method in ["POST", "PUT", "DELETE"] {
            let r = h.request(method, path, vec![]).await;
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.header("allow"), Some("GET, HEAD"));
            assert_eq!(r.body, r#"{"v":1,"error":"method not allowed"}"#);
        }
    }
    // The query string does not change the path; a trailing slash is another path.
    assert_eq!(h.request("GET", "/pair?x=1", vec![]).await.status, 200);
    assert_eq!(h.request("GET", "/pair/", vec![]).await.status, 404);
}

#[tokio::test]
async fn the_association_file_follows_the_configuration() {
    let aasa = "/.well-known/apple-app-site-association";
    // With credentials: <APNS_TEAM_ID>.<APNS_TOPIC>.
    let h = Harness::start().await;
    let r = h.request("GET", aasa, vec![]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let details = &v["applinks"]["details"][0];
    assert_eq!(details["appIDs"], json!([format!("{TEAM_ID}.{TOPIC}")]));
    assert_eq!(details["components"][0]["/"], "/pair");
    let r = h.request("POST", aasa, vec![]).await;
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
    // RELAY_AASA_APP_IDS wins.
    let h = Harness::with(Options::default().var(
        "RELAY_AASA_APP_IDS",
        "ABCDE12345.com.example.one, FGHIJ67890.com.example.two",
    ))
    .await;
    let v = h.request("GET", aasa, vec![]).await.json();
    assert_eq!(
        v["applinks"]["details"][0]["appIDs"],
        json!(["ABCDE12345.com.example.one", "FGHIJ67890.com.example.two"])
    );
    // Neither: 404, the relay's one.
    let h = Harness::with(Options::default().without_credentials()).await;
    let r = h.request("GET", aasa, vec![]).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, r#"{"v":1,"error":"not found"}"#)
    );
    assert_eq!(h.request("POST", aasa, vec![]).await.status, 404);
}

#[test]
fn a_bad_app_id_list_stops_start_up() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sealrelay"))
        .env_clear()
        .env("RELAY_AASA_APP_IDS", "com.example.app")
        .arg("check-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RELAY_AASA_APP_IDS"));
}

/// The landing page in Debian's headless Chromium against this relay: with a real pairing
/// fragment (built by cronstable 1.2.72 itself when its venv is at hand) it shows the
/// daemon's name and host and an "Open in the app" link to `cronstable://pair#<fragment>`,
/// never the bearer; without one it explains how to get a code; a malformed one is
/// explained; a hostile name stays text; nothing is loaded from elsewhere and the CSP holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and the browser test's npm install: scripts/test.sh sets them up and runs ignored tests"]
async fn the_landing_page_in_a_real_browser() {
    let h = Harness::start().await;
    let out = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/pages.mjs");
    let mut cmd = std::process::Command::new("node");
    cmd.arg(script)
        .arg(format!("http://{}", h.addr()))
        .arg(out.path());
    if std::env::var_os("SEALRELAY_E2E_PYTHON").is_some() {
        cmd.env("PAGES_REQUIRE_CRONSTABLE", "1");
    }
    // The script has its own 180 s watchdog and exits by itself.
    let result = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&result.stdout);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stdout}\n{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).expect("a JSON summary");
    assert_eq!(summary["ok"], true);
    assert!(
        summary["checks"].as_array().unwrap().len() >= 8,
        "{summary}"
    );
    println!("{stdout}");
    for shot in ["pair-with-code.png", "pair-without-code.png"] {
        let meta = std::fs::metadata(out.path().join(shot)).expect(shot);
        assert!(meta.len() > 10_000, "{shot} is a real screenshot");
    }
}
