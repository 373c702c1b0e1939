//! The binary as the client, end to end against a relay process and the mock APNs: the
//! walkthrough of docs/signed.md (keygen, enrol over the admin socket, a signed push
//! followed until settled), then the receipt, the list, a revocation and its refusal, with
//! exit codes.

use std::process::Command;

use crate::common::process::RelayProcess;
use crate::common::*;

fn sealrelay(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sealrelay"))
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_from_the_command_line() {
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("admin.sock");
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    vars.push(("RELAY_ADMIN_SOCKET".into(), socket.display().to_string()));
    let relay = tokio::task::block_in_place(|| RelayProcess::spawn(&vars));
    let url = relay.url();
    let url = url.trim_end_matches('/');
    let socket = socket.to_str().unwrap();
    let key_file = dir.path().join("ops.pem");
    let key_file = key_file.to_str().unwrap();
    let dev = device(1);
    let target = format!("{dev}={}", "A".repeat(68));

    let run = |args: &[&str]| tokio::task::block_in_place(|| sealrelay(args));
    let (code, public, err) = run(&["keygen", "--out", key_file]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(public.trim().len(), 44, "{public}");
    let (code, out, err) = run(&[
        "admin",
        "--socket",
        socket,
        "signers",
        "add",
        "ed25519:ops",
        "--key",
        key_file,
        "--topic",
        TOPIC,
    ]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("enrolled ed25519:ops: topics {TOPIC}").as_str()),
        "{err}"
    );
    let (code, out, err) = run(&[
        "push",
        "--url",
        url,
        "--key",
        key_file,
        "--key-id",
        "ed25519:ops",
        "--target",
        &target,
        "--wait",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let receipt_end = out.find("\n}\n").expect("the receipt is printed") + 3;
    let receipt: serde_json::Value = serde_json::from_str(&out[..receipt_end]).unwrap();
    assert_eq!(receipt["state"], "settled");
    let push_id = receipt["pushId"].as_str().unwrap().to_owned();
    assert_eq!(
        out[receipt_end..].trim(),
        format!("push {push_id}: 1 delivered")
    );
    assert_eq!(prod.received_for(&dev).len(), 1);

    let (code, out, _) = run(&["admin", "--socket", socket, "receipt", &push_id]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["pushId"], push_id);
    let (code, out, _) = run(&["admin", "--socket", socket, "signers", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.lines().nth(1).unwrap().starts_with("ed25519:ops") && out.contains("active"),
        "{out}"
    );

    // A queued target: --wait prints its progress until the retry delivers it.
    prod.reply_times(&device(2), Reply::new(503, None), 1);
    let target2 = format!("{}={}", device(2), "B".repeat(68));
    let (code, out, err) = run(&[
        "push",
        "--url",
        url,
        "--key",
        key_file,
        "--key-id",
        "ed25519:ops",
        "--target",
        &target2,
        "--priority",
        "passive",
        "--wait",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"state\": \"queued\""), "{out}");
    let hash = out.lines().rev().nth(1).unwrap();
    assert!(hash.ends_with("  delivered"), "{out}");
    assert!(out.trim_end().ends_with(": 1 delivered"), "{out}");

    // A dead token: exit status 2.
    prod.reply_always(&device(3), Reply::new(410, Some("Unregistered")));
    let target3 = format!("{}={}", device(3), "C".repeat(68));
    let (code, out, _) = run(&[
        "push",
        "--url",
        url,
        "--key",
        key_file,
        "--key-id",
        "ed25519:ops",
        "--target",
        &target3,
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.trim_end().ends_with(": 1 rejected"), "{out}");

    let (code, out, _) = run(&[
        "admin",
        "--socket",
        socket,
        "signers",
        "revoke",
        "ed25519:ops",
    ]);
    assert_eq!((code, out.trim()), (0, "revoked ed25519:ops"));
    let (code, out, _) = run(&[
        "push",
        "--url",
        url,
        "--key",
        key_file,
        "--key-id",
        "ed25519:ops",
        "--target",
        &target,
    ]);
    assert_eq!(code, 1);
    assert!(out.starts_with("403 revoked_signer: "), "{out}");
    let (code, _, err) = run(&[
        "admin",
        "--socket",
        "/nonexistent/admin.sock",
        "signers",
        "list",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot connect to the admin socket"), "{err}");
    let (code, _, err) = run(&["keygen", "--out", key_file]);
    assert_eq!(code, 1);
    assert!(err.contains("never overwrites"), "{err}");
}
