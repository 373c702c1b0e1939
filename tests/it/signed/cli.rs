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

/// A relay process on the mock APNs with its admin socket in a directory of its own.
struct Relay {
    prod: MockApns,
    _sandbox: MockApns,
    relay: RelayProcess,
    dir: tempfile::TempDir,
}

impl Relay {
    async fn start() -> Self {
        let pki = pki();
        let key = auth_key();
        let prod = mock(&pki, &key).await;
        let sandbox = mock(&pki, &key).await;
        let dir = tempfile::tempdir().unwrap();
        let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
        let socket = dir.path().join("admin.sock");
        vars.push(("RELAY_ADMIN_SOCKET".into(), socket.display().to_string()));
        let relay = tokio::task::block_in_place(|| RelayProcess::spawn(&vars));
        Self {
            prod,
            _sandbox: sandbox,
            relay,
            dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_from_the_command_line() {
    // (The sandbox mock is bound, not dropped: the relay keeps its endpoint.)
    let Relay {
        prod,
        _sandbox,
        relay,
        dir,
    } = Relay::start().await;
    let socket = dir.path().join("admin.sock");
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

/// Retrying is safe (issue: the CLI's retry was a conflict). The first answer is lost on the
/// way back (the relay took the push): the client sends the same bytes again and gets the
/// replay. Run again with the same request id, it resends the kept bytes (200). With the
/// kept request gone, a newly signed one under the same id is a 409 for the client's own id:
/// it reads the receipt. One push in all, exit 0 every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_id_run_three_times_is_one_push() {
    use std::os::unix::fs::PermissionsExt;
    // (The sandbox mock is bound, not dropped: the relay keeps its endpoint.)
    let Relay {
        prod,
        _sandbox,
        relay,
        dir,
    } = Relay::start().await;
    let socket = dir.path().join("admin.sock");
    let relay_url = relay.url();
    let link = sealrelay_testkit::link::Link::start().await;
    link.set_target(
        relay_url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap(),
    );
    link.lose_answers(1);
    let key_file = dir.path().join("ops.pem");
    let key_file = key_file.to_str().unwrap();
    let run = |args: &[&str]| tokio::task::block_in_place(|| sealrelay(args));
    assert_eq!(run(&["keygen", "--out", key_file]).0, 0);
    let socket = socket.to_str().unwrap();
    let enrol = [
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
    ];
    assert_eq!(run(&enrol).0, 0);
    let dev = device(7);
    let target = format!("{dev}={}", "A".repeat(68));
    let id = "0b5b2b4e-8a0c-4d7e-9f11-3c2d1e0f9a87";
    let push = |url: &str| {
        run(&[
            "push",
            "--url",
            url,
            "--key",
            key_file,
            "--key-id",
            "ed25519:ops",
            "--target",
            &target,
            "--request-id",
            id,
        ])
    };
    let receipt_of = |out: &str| -> serde_json::Value {
        let end = out.find("\n}\n").expect("a receipt is printed") + 3;
        serde_json::from_str(&out[..end]).unwrap()
    };

    // 1. The answer is lost: the same bytes again, the replay's receipt.
    let (code, out, err) = push(&link.url());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("sending the same request again"),
        "the lost answer was retried: {err}"
    );
    assert_eq!(receipt_of(&out)["pushId"], id);
    let kept = format!("{key_file}.requests/{id}.json");
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the kept request is the owner's alone");
    let kept_bytes = std::fs::read(&kept).unwrap();

    // 2. The same command again: the kept bytes, answered as a replay.
    let (code, out, err) = push(relay_url.trim_end_matches('/'));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(receipt_of(&out)["pushId"], id);
    assert!(!err.contains("was taken before"), "{err}");
    assert!(
        err.contains(&format!("resending request {id} as kept in")),
        "{err}"
    );
    assert_eq!(std::fs::read(&kept).unwrap(), kept_bytes, "resent as kept");

    // 3. Without the kept bytes: a new signature under the same id is the client's own
    //    conflict, answered with the receipt.
    std::fs::remove_file(&kept).unwrap();
    let (code, out, err) = push(relay_url.trim_end_matches('/'));
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("was taken before"), "{err}");
    assert_eq!(receipt_of(&out)["pushId"], id);

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while prod.received_for(&dev).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(prod.received_for(&dev).len(), 1, "one push in all");

    // 4. A kept request past the freshness window that the relay never took (signed ten
    //    minutes ago, never sent): refused as stale, then signed afresh under its id.
    let other = device(8);
    let fresh_id = "5f0c8d2a-1b3e-4c5d-8e6f-7a8b9c0d1e2f";
    let args = sealrelay::cli::push::Args {
        url: relay_url.clone(),
        key: key_file.into(),
        key_id: "ed25519:ops".into(),
        topic: None,
        targets: vec![(other.clone(), "B".repeat(68))],
        suite: None,
        collapse_id: None,
        flap_id: None,
        priority: "time-sensitive".into(),
        event: false,
        request_id: Some(fresh_id.into()),
        save: None,
        wait: false,
        wait_timeout: std::time::Duration::from_secs(5),
    };
    let signer = sealrelay::cli::keygen::load(std::path::Path::new(key_file)).unwrap();
    let ten_minutes_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 600_000;
    let old = sealrelay::cli::push::request(&args, &signer, ten_minutes_ago);
    let kept = format!("{key_file}.requests/{fresh_id}.json");
    std::fs::write(
        &kept,
        serde_json::to_vec(&serde_json::Value::Object(old)).unwrap(),
    )
    .unwrap();
    let target = format!("{other}={}", "B".repeat(68));
    let (code, out, err) = run(&[
        "push",
        "--url",
        relay_url.trim_end_matches('/'),
        "--key",
        key_file,
        "--key-id",
        "ed25519:ops",
        "--target",
        &target,
        "--request-id",
        fresh_id,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(receipt_of(&out)["pushId"], fresh_id);
    assert!(out.contains("\"state\": \"delivered\""), "{out}");
    let resigned: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
    assert!(
        resigned["issuedAtMs"].as_u64().unwrap() > ten_minutes_ago + 60_000,
        "the kept request is the newly signed one"
    );
    assert_eq!(prod.received_for(&other).len(), 1);
}
