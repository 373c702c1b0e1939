//! The admin API's transports (SIGNED.md, "Transport boundary"): the Unix socket made
//! atomically with mode 0600 in a 0700 directory, peers of another uid refused (the real
//! client binary run as `nobody`), the opt-in loopback TCP listener and its token file's
//! checks, and the three `RELAY_V1_INTAKE` modes with the deprecated socket push.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;

use crate::common::signed::*;
use crate::common::*;
use serde_json::json;

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_is_0600_in_a_0700_directory_and_goes_away_at_stop() {
    let r = SignedRelay::start(Options::default()).await;
    assert_eq!(mode(&r.socket), 0o600);
    assert_eq!(mode(r.socket.parent().unwrap()), 0o700);
    assert!(std::os::unix::fs::FileTypeExt::is_socket(
        &std::fs::symlink_metadata(&r.socket).unwrap().file_type()
    ));
    // No temporary name is left behind.
    let names: Vec<String> = std::fs::read_dir(r.socket.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["admin.sock".to_owned()]);
    let (status, v) = r.admin_call("GET", "/admin/v1/signers", None).await;
    assert_eq!((status, v), (200, json!({"signers": []})));
    let socket = r.socket.clone();
    let _dir = r.dir;
    r.h.relay.shutdown().await;
    assert!(!socket.exists(), "the socket is removed at stop");
}

/// A stale socket file at the path (a relay that was killed) is replaced atomically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.sock");
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale);
    let h =
        Harness::with(Options::default().var("RELAY_ADMIN_SOCKET", &path.display().to_string()))
            .await;
    let (status, _) = admin_call(&path, "GET", "/admin/v1/signers", None).await;
    assert_eq!(status, 200);
    assert_eq!(mode(&path), 0o600);
    drop(h);
}

/// The real client, as `nobody`: it cannot reach the 0600 socket at all, and when the
/// modes are opened up by mistake the relay still refuses it by its peer credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_uid_is_refused() {
    if !is_root() {
        panic!("this test runs the client as nobody and needs root (CI runs as root)");
    }
    let r = SignedRelay::start(Options::default()).await;
    // A copy of the binary nobody can run, in a directory nobody can enter.
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("sealrelay");
    std::fs::copy(env!("CARGO_BIN_EXE_sealrelay"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(r.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run_as_nobody = |socket: &std::path::Path| {
        let out = std::process::Command::new(&bin)
            .args(["admin", "--socket"])
            .arg(socket)
            .args(["signers", "list"])
            .env_clear()
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = tokio::task::block_in_place(|| run_as_nobody(&r.socket));
    assert_eq!(code, Some(1));
    assert!(err.contains("Permission denied"), "{err}");
    // Opened up by mistake: the directory and the socket world-accessible.
    std::fs::set_permissions(
        r.socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&r.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err) = tokio::task::block_in_place(|| run_as_nobody(&r.socket));
    assert_eq!(code, Some(1));
    assert!(err.contains("403") && err.contains("forbidden"), "{err}");
    // The relay's own user still gets in.
    let (status, _) = r.admin_call("GET", "/admin/v1/signers", None).await;
    assert_eq!(status, 200);
    let metrics = r.h.admin("/metrics").await.body;
    assert!(
        metrics
            .lines()
            .any(|l| l
                .starts_with(r#"sealrelay_admin_requests_total{transport="unix",status="403"} 1"#)),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("admin_requests"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn token_file(dir: &std::path::Path, mode: u32, text: &str) -> std::path::PathBuf {
    let p = dir.join(format!("token-{mode:o}-{}", text.len()));
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn load_err(vars: &[(&str, &str)]) -> String {
    let map: std::collections::HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match sealrelay::config::Config::load(&move |k: &str| map.get(k).cloned()) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

/// The token file's mode and owner are checked at start-up, and the listener must be
/// loopback and must come with a token.
#[test]
fn the_token_file_and_listener_are_checked_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let token = "0123456789abcdef0123456789abcdef\n";
    let ok = token_file(dir.path(), 0o600, token);
    let ok400 = token_file(dir.path(), 0o400, &token[1..]);
    let loose = token_file(dir.path(), 0o644, &token[2..]);
    let group = token_file(dir.path(), 0o640, &token[3..]);
    let short = token_file(dir.path(), 0o600, "short\n");
    let listen = ("RELAY_ADMIN_API_LISTEN", "127.0.0.1:0");
    for f in [&ok, &ok400] {
        let e = load_err(&[listen, ("RELAY_ADMIN_TOKEN_FILE", f.to_str().unwrap())]);
        assert_eq!(e, "", "{}", f.display());
    }
    for (f, want) in [(&loose, "0644"), (&group, "0640"), (&short, "at least 16")] {
        let e = load_err(&[listen, ("RELAY_ADMIN_TOKEN_FILE", f.to_str().unwrap())]);
        assert!(
            e.contains("RELAY_ADMIN_TOKEN_FILE") && e.contains(want),
            "{e}"
        );
    }
    // A symbolic link is refused, even to a good file: the file is opened once, without
    // following links, and checked as opened.
    let link = dir.path().join("token-link");
    std::os::unix::fs::symlink(&ok, &link).unwrap();
    let e = load_err(&[listen, ("RELAY_ADMIN_TOKEN_FILE", link.to_str().unwrap())]);
    assert!(
        e.contains("RELAY_ADMIN_TOKEN_FILE") && e.contains("symbolic link"),
        "{e}"
    );
    // Unsigned pushes taken only on the admin socket need the socket.
    let e = load_err(&[("RELAY_V1_INTAKE", "local"), ("RELAY_ADMIN_SOCKET", "")]);
    assert!(
        e.contains("RELAY_V1_INTAKE=local") && e.contains("RELAY_ADMIN_SOCKET"),
        "{e}"
    );
    let e = load_err(&[("RELAY_V1_INTAKE", "off"), ("RELAY_ADMIN_SOCKET", "")]);
    assert_eq!(e, "", "off needs no socket");
    let e = load_err(&[listen, ("RELAY_ADMIN_TOKEN_FILE", "/nonexistent/token")]);
    assert!(
        e.contains("RELAY_ADMIN_TOKEN_FILE") && e.contains("cannot be read"),
        "{e}"
    );
    if is_root() {
        let theirs = token_file(dir.path(), 0o600, &token[4..]);
        std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
        assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), NOBODY);
        let e = load_err(&[listen, ("RELAY_ADMIN_TOKEN_FILE", theirs.to_str().unwrap())]);
        assert!(
            e.contains("RELAY_ADMIN_TOKEN_FILE") && e.contains("owned by uid 65534"),
            "{e}"
        );
    }
    let e = load_err(&[
        ("RELAY_ADMIN_API_LISTEN", "0.0.0.0:9091"),
        ("RELAY_ADMIN_TOKEN_FILE", ok.to_str().unwrap()),
    ]);
    assert!(
        e.contains("RELAY_ADMIN_API_LISTEN") && e.contains("loopback"),
        "{e}"
    );
    let e = load_err(&[listen]);
    assert!(e.contains("needs RELAY_ADMIN_TOKEN_FILE"), "{e}");
    let e = load_err(&[("RELAY_ADMIN_TOKEN_FILE", ok.to_str().unwrap())]);
    assert!(e.contains("RELAY_ADMIN_API_LISTEN is not"), "{e}");
    let e = load_err(&[("RELAY_ADMIN_SOCKET", &format!("/tmp/{}", "x".repeat(120)))]);
    assert!(
        e.contains("RELAY_ADMIN_SOCKET") && e.contains("107 bytes"),
        "{e}"
    );
    let e = load_err(&[("RELAY_V1_INTAKE", "private")]);
    assert!(
        e.contains("RELAY_V1_INTAKE") && e.contains("public, local or off"),
        "{e}"
    );
    let e = load_err(&[("RELAY_V1_SUNSET", "2027-07-01")]);
    assert!(
        e.contains("RELAY_V1_SUNSET") && e.contains("HTTP date"),
        "{e}"
    );
}

/// An explicitly named socket that cannot be made stops start-up, naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_socket_that_cannot_be_made_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let path = file.join("admin.sock");
    let vars = vec![
        ("RELAY_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
        ("RELAY_ADMIN_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
        ("RELAY_DRY_RUN".to_owned(), "true".to_owned()),
        ("RELAY_ADMIN_SOCKET".to_owned(), path.display().to_string()),
    ];
    let e = match sealrelay::app::spawn(config(&vars), sealrelay::clock::Clock::System).await {
        Ok(_) => panic!("started without its socket"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("RELAY_ADMIN_SOCKET") && e.contains("cannot create"),
        "{e}"
    );
}

/// Over loopback TCP every request needs the bearer token; the unsigned push is refused
/// there (TCP rejects unsigned pushes) while the signer API works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_tcp_takes_the_bearer_token_and_no_unsigned_push() {
    let dir = tempfile::tempdir().unwrap();
    let token = "f3b1c0de9a8b7c6d5e4f30211203f4e5";
    let file = token_file(dir.path(), 0o600, &format!("{token}\n"));
    let h = Harness::with(
        Options::default()
            .var("RELAY_ADMIN_API_LISTEN", "127.0.0.1:0")
            .var("RELAY_ADMIN_TOKEN_FILE", file.to_str().unwrap()),
    )
    .await;
    let addr = h.relay.admin_api_addr.expect("the TCP admin API listens");
    assert!(addr.ip().is_loopback());
    let call = |auth: Option<String>, method: &'static str, path: &'static str, body: Vec<u8>| async move {
        let mut headers = vec![("content-type", "application/json".to_owned())];
        if let Some(a) = auth {
            headers.push(("authorization", a));
        }
        sealrelay::cli::Endpoint::Url(format!("http://{addr}"))
            .call(method.parse().unwrap(), path, &headers, body)
            .await
            .unwrap()
    };
    for auth in [
        None,
        Some("Bearer wrong".to_owned()),
        Some(format!("Bearer {token}x")),
        Some(token.to_owned()),
    ] {
        let (status, body) = call(auth.clone(), "GET", "/admin/v1/signers", Vec::new()).await;
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert!(body.contains(r#""code":"unauthorized""#), "{body}");
    }
    let good = Some(format!("Bearer {token}"));
    let (status, body) = call(good.clone(), "GET", "/admin/v1/signers", Vec::new()).await;
    assert_eq!((status, body.as_str()), (200, r#"{"signers":[]}"#));
    let s = Signer::new("tcp");
    let enrol = serde_json::to_vec(&json!({"publicKey": s.public(), "topics": [TOPIC]})).unwrap();
    let (status, _) = call(good.clone(), "PUT", "/admin/v1/signers/ed25519:tcp", enrol).await;
    assert_eq!(status, 201);
    let v1 = serde_json::to_vec(&envelope(&device(1), &id(1))).unwrap();
    let (status, body) = call(good.clone(), "POST", "/admin/v1/push", v1).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains(r#""code":"forbidden""#), "{body}");
    assert!(h.prod.received().is_empty());
    // The CLI over TCP.
    let client = sealrelay::cli::admin::AdminClient::new(
        std::path::Path::new("/nonexistent"),
        Some(&format!("http://{addr}")),
        Some(&file),
    )
    .unwrap();
    let list = client.list(false).await.unwrap();
    assert!(
        list.ok && list.text.contains("ed25519:tcp"),
        "{}",
        list.text
    );
}

async fn socket_push(
    r: &SignedRelay,
    n: u32,
) -> (u16, std::collections::HashMap<String, String>, String) {
    let body = serde_json::to_vec(&envelope(&device(n), &id(n))).unwrap();
    let resp = sealrelay::cli::Endpoint::Socket(r.socket.clone())
        .send(
            "POST".parse().unwrap(),
            "/admin/v1/push",
            &[("content-type", "application/json".to_owned())],
            body,
        )
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// `public`: both take unsigned pushes (the socket's with Deprecation and Sunset);
/// `local`: only the socket; `off`: neither, each with its exact 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_v1_intake_modes() {
    let sunset = "Wed, 01 Jul 2027 00:00:00 GMT";
    let public = SignedRelay::start(Options::default().var("RELAY_V1_SUNSET", sunset)).await;
    assert_eq!(
        public.h.post(&envelope(&device(1), &id(1))).await.status,
        202
    );
    let (status, headers, body) = socket_push(&public, 2).await;
    assert_eq!(
        (status, body.as_str()),
        (202, r#"{"v":1,"outcome":"forwarded"}"#)
    );
    assert_eq!(headers.get("deprecation").map(String::as_str), Some("true"));
    assert_eq!(headers.get("sunset").map(String::as_str), Some(sunset));
    // The socket's push is the v1 answer, refusals included.
    let bad = sealrelay::cli::Endpoint::Socket(public.socket.clone())
        .call(
            "POST".parse().unwrap(),
            "/admin/v1/push",
            &[],
            b"{}".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(bad.0, 400);
    assert!(bad.1.starts_with(r#"{"v":1,"error":"#), "{}", bad.1);
    assert_eq!(public.h.prod.received().len(), 2);

    let local = SignedRelay::start(Options::default().var("RELAY_V1_INTAKE", "local")).await;
    let r = local.h.post(&envelope(&device(3), &id(3))).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            403,
            r#"{"v":1,"error":"unsigned pushes are accepted only on the local admin socket"}"#
        )
    );
    let (status, headers, body) = socket_push(&local, 4).await;
    assert_eq!(
        (status, body.as_str()),
        (202, r#"{"v":1,"outcome":"forwarded"}"#)
    );
    assert_eq!(headers.get("deprecation").map(String::as_str), Some("true"));
    assert!(!headers.contains_key("sunset"));
    assert_eq!(local.h.prod.received().len(), 1);

    let off = SignedRelay::start(Options::default().var("RELAY_V1_INTAKE", "off")).await;
    let r = off.h.post(&envelope(&device(5), &id(5))).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (403, r#"{"v":1,"error":"unsigned pushes are not accepted"}"#)
    );
    let (status, _, body) = socket_push(&off, 6).await;
    assert_eq!(
        (status, body.as_str()),
        (403, r#"{"v":1,"error":"unsigned pushes are not accepted"}"#)
    );
    assert!(off.h.prod.received().is_empty());
    // Signed pushes are unaffected.
    let s = Signer::new("ops");
    off.enroll(&s, &[TOPIC]).await;
    let now = sealrelay::clock::Clock::System.now_ms();
    let resp = off
        .push(&s.sign(s.request(&rid(1), &[device(7)], now)))
        .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
}

/// A small-order public key (here the identity, `01 00..00`) is refused at enrolment with a
/// 400 that says why, nothing is enrolled, and a push "signed" with the signature that
/// verifies under that key for every message (`01 00..00 || 00..00`) is refused as from an
/// unknown signer and reaches no device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_order_key_is_refused_and_cannot_forge_a_push() {
    use base64::Engine as _;
    let r = SignedRelay::start(Options::default()).await;
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let weak = base64::engine::general_purpose::STANDARD.encode(identity);
    let (status, v) = r
        .admin_call(
            "PUT",
            "/admin/v1/signers/ed25519:forger",
            Some(json!({"publicKey": weak, "topics": [TOPIC]})),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v.to_string().contains("weak or non-canonical Ed25519 key"),
        "{v}"
    );
    let (status, v) = r.admin_call("GET", "/admin/v1/signers", None).await;
    assert_eq!((status, v), (200, json!({"signers": []})));

    let forger = Signer::new("forger");
    let now = sealrelay::clock::Clock::System.now_ms();
    let mut request = forger.request(&rid(1), &[device(1)], now);
    let mut signature = [0u8; 64];
    signature[0] = 1;
    request.insert(
        "signature".to_owned(),
        json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature)),
    );
    let resp = r.push(&serde_json::Value::Object(request)).await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert!(r.h.prod.received().is_empty());
}
