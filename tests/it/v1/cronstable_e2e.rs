//! The strongest proof of compatibility: the real cronstable daemon (1.2.72, from PyPI)
//! pairs a fake phone, sends a test alert and a job-failure alert through sealrelay to the
//! mock APNs, and the fake phone's private key opens both ciphertexts (PyNaCl SealedBox).
//!
//! `scripts/test.sh` creates the Python venv and runs this test; by hand:
//! `SEALRELAY_E2E_PYTHON=target/e2e-venv/bin/python cargo test --test cronstable_e2e -- --ignored`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the cronstable daemon in a venv: scripts/test.sh sets SEALRELAY_E2E_PYTHON and runs ignored tests"]
async fn real_cronstable_daemon_through_sealrelay_to_apns() {
    let python = std::env::var("SEALRELAY_E2E_PYTHON")
        .expect("SEALRELAY_E2E_PYTHON must name a python with cronstable[push] and pynacl (scripts/test.sh sets it)");
    let driver = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/e2e/cronstable_driver.py"
    );
    let h = Harness::start().await;
    let token = format!(
        "{}{}",
        "c0ffee",
        "0123456789abcdef".repeat(4).get(..58).unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let relay_url = format!("http://{}/", h.addr());

    let out = {
        let (python, driver, dir, token) = (
            python.clone(),
            driver.to_owned(),
            dir.path().to_owned(),
            token.clone(),
        );
        tokio::task::spawn_blocking(move || {
            Command::new(python)
                .arg(driver)
                .args(["run", "--relay-url", &relay_url, "--workdir"])
                .arg(&dir)
                .args(["--token", &token, "--timeout-s", "90"])
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driver failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["test_status"], 200, "{summary}");
    assert_eq!(summary["failure_reported"], true, "{summary}");

    // Both alerts reached APNs, as the mock saw them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.prod.received_for(&token).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "APNs got {} requests",
            h.prod.received_for(&token).len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = h.prod.received_for(&token);
    assert_eq!(got.len(), 2, "exactly two notifications");
    for r in &got {
        assert_eq!(r.status, 200);
        assert!(r.body.len() <= 4096);
        assert_eq!(r.header("apns-push-type"), "alert");
    }

    // The fake phone opens them.
    let mut child = Command::new(&python)
        .arg(driver)
        .args(["open", "--key"])
        .arg(dir.path().join("key.json"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in &got {
            stdin.write_all(&r.body).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
    }
    let opened = child.wait_with_output().unwrap();
    assert!(
        opened.status.success(),
        "{}",
        String::from_utf8_lossy(&opened.stderr)
    );
    let plaintexts: Vec<serde_json::Value> = String::from_utf8_lossy(&opened.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut kinds: Vec<&str> = plaintexts
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, vec!["failure", "test"]);
    let failure = plaintexts.iter().find(|p| p["kind"] == "failure").unwrap();
    assert_eq!(failure["exit_code"], 3);
    assert_eq!(failure["v"], 1);
    // The failure alert is time-sensitive: APNs priority 10 and a sound.
    let failure_req = got
        .iter()
        .find(|r| r.header("apns-priority") == "10")
        .expect("a time-sensitive notification");
    let body: serde_json::Value = serde_json::from_slice(&failure_req.body).unwrap();
    assert_eq!(body["aps"]["mutable-content"], 1);
    assert_eq!(body["suite"], "x25519");
}
