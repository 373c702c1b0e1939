//! The FCM module black box, against the test kit's mock FCM over TLS (a CA made at test
//! time, trusted through `FCM_CA_FILE`): the exact messages, one token request for many
//! sends, refresh before expiry, what each answer means for the registration, the
//! timeout, TLS verification, and that no secret reaches `Debug`, an error or a log line.
//! The mock's own checks are exercised first-hand too, so the client passing them means
//! something.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sealrelay::testing::fcm::{
    is_valid_registration_token, FcmClient, FcmOutcome, Notify, Reason, ServiceAccount, Settings,
    Stage, VerdictClass, SEND_TIMEOUT,
};
use sealrelay_testkit::mock_fcm::{
    KeySource, MockFcm, MockFcmConfig, MockReply, TokenReply, FIXTURE_RSA_OTHER_PEM,
    FIXTURE_RSA_PEM,
};
use sealrelay_testkit::pki::Pki;

const TAG: &str = "Zq3k8r2mT1u0wQ";

/// A registration token shaped like FCM's (`<instance id>:APA91b<...>`), unique per `n`.
fn reg_token(n: usize) -> String {
    format!("dev{n:05}_Xq:APA91bH{}", "k3-Zp9_wQ".repeat(16))
}

fn alert() -> Notify {
    Notify::Alert("New message".into())
}

/// Settings for a client of `mock` with the service account `json`, trusting the mock's CA.
fn settings(mock: &MockFcm, json: &str) -> Settings {
    Settings {
        account: ServiceAccount::from_json(json).unwrap(),
        url: mock.url(),
        ca_file: Some(mock.ca_file().to_owned()),
    }
}

struct Setup {
    mock: MockFcm,
    client: Arc<FcmClient>,
}

async fn setup_with(cfg: MockFcmConfig) -> Setup {
    let mock = MockFcm::start(cfg).await.unwrap();
    let client = Arc::new(FcmClient::new(&settings(&mock, &mock.service_account_json())).unwrap());
    Setup { mock, client }
}

async fn setup() -> Setup {
    setup_with(MockFcmConfig::default()).await
}

fn assert_delivered(o: &FcmOutcome) {
    assert!(matches!(o, FcmOutcome::Delivered { .. }), "{o:?}");
    assert_eq!(o.class(), VerdictClass::Delivered);
    assert!(!o.deletes_registration());
    assert_eq!(o.label(), "delivered");
}

/// (class, reason, status, stage, deletes the registration)
fn shape(o: &FcmOutcome) -> (VerdictClass, Reason, u16, Option<Stage>, bool) {
    (
        o.class(),
        o.reason(),
        o.status(),
        o.failure().map(|f| f.stage),
        o.deletes_registration(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_and_silent_are_exactly_the_spec_json() {
    let s = setup().await;
    assert_eq!(s.client.project_id(), "sealrelay-test");
    assert_delivered(&s.client.send(&reg_token(1), TAG, alert()).await);
    assert_delivered(&s.client.send(&reg_token(2), TAG, Notify::Silent).await);
    let text = "Ünïcode \"quoted\" \\ \n</script>";
    assert_delivered(
        &s.client
            .send(&reg_token(3), "tag_3-x", Notify::Alert(text.into()))
            .await,
    );
    let m = s.mock.messages();
    assert_eq!(m.len(), 3);
    assert_eq!(
        std::str::from_utf8(&m[0].body).unwrap(),
        format!(
            r#"{{"message":{{"token":"{}","data":{{"zerobyte_tag":"Zq3k8r2mT1u0wQ","zerobyte_notify":"alert","zerobyte_alert":"New message"}},"android":{{"priority":"high","ttl":"604800s"}}}}}}"#,
            reg_token(1)
        )
    );
    assert_eq!(
        std::str::from_utf8(&m[1].body).unwrap(),
        format!(
            r#"{{"message":{{"token":"{}","data":{{"zerobyte_tag":"Zq3k8r2mT1u0wQ","zerobyte_notify":"silent"}},"android":{{"priority":"normal","ttl":"3600s"}}}}}}"#,
            reg_token(2)
        )
    );
    assert_eq!(
        std::str::from_utf8(&m[2].body).unwrap(),
        format!(
            r#"{{"message":{{"token":"{}","data":{{"zerobyte_tag":"tag_3-x","zerobyte_notify":"alert","zerobyte_alert":"Ünïcode \"quoted\" \\ \n</script>"}},"android":{{"priority":"high","ttl":"604800s"}}}}}}"#,
            reg_token(3)
        )
    );
    assert_eq!(m[2].data("zerobyte_alert"), Some(text));
    assert_eq!(m[1].data("zerobyte_alert"), None);
    // POST <FCM_URL>/v1/projects/<project>/messages:send with the issued bearer (the mock
    // records only requests to that path, for that project, with a token it issued).
    let issued = s.mock.issued_access_tokens();
    assert_eq!(issued.len(), 1);
    for x in &m {
        assert_eq!(x.header("authorization"), format!("Bearer {}", issued[0]));
        assert!(x.header("content-type").starts_with("application/json"));
        assert_eq!(x.status, 200);
    }
    // Google offers h2 by ALPN: the client takes it, on one connection.
    assert!(m.iter().all(|x| x.version == "HTTP/2.0"), "{m:?}");
    assert_eq!(s.mock.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http11_only_upstream_works_too() {
    let s = setup_with(MockFcmConfig {
        http2: false,
        ..Default::default()
    })
    .await;
    for i in 0..3 {
        assert_delivered(&s.client.send(&reg_token(i), TAG, Notify::Silent).await);
    }
    let m = s.mock.messages();
    assert_eq!(m.len(), 3);
    assert!(m.iter().all(|x| x.version == "HTTP/1.1"), "{m:?}");
    assert_eq!(s.mock.token_requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_request_serves_many_sends() {
    let s = setup().await;
    for i in 0..25 {
        let o = s.client.send(&reg_token(i), TAG, alert()).await;
        let FcmOutcome::Delivered { name } = &o else {
            panic!("{o:?}")
        };
        assert!(name
            .as_deref()
            .unwrap()
            .starts_with("projects/sealrelay-test/messages/0:"));
    }
    assert_eq!(s.mock.token_requests(), 1);
    assert_eq!(s.mock.delivered(), 25);
    let tokens: std::collections::HashSet<String> = s
        .mock
        .messages()
        .into_iter()
        .map(|m| m.access_token)
        .collect();
    assert_eq!(tokens.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_sends_share_one_token_request() {
    let s = setup().await;
    // A slow token endpoint: all 50 sends arrive while the first request is in flight.
    s.mock.set_token_delay(Duration::from_millis(400));
    let mut tasks = Vec::new();
    for i in 0..50 {
        let c = s.client.clone();
        tasks.push(tokio::spawn(async move {
            c.send(&reg_token(i), TAG, alert()).await
        }));
    }
    for t in tasks {
        assert_delivered(&t.await.unwrap());
    }
    assert_eq!(s.mock.token_requests(), 1);
    assert_eq!(s.mock.tokens_issued(), 1);
    assert_eq!(s.mock.delivered(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_share_a_failed_token_request() {
    let s = setup().await;
    s.mock.set_token_delay(Duration::from_millis(300));
    s.mock.token_reply_times(
        TokenReply {
            retry_after_s: Some(9),
            ..TokenReply::unavailable()
        },
        1,
    );
    let mut tasks = Vec::new();
    for i in 0..30 {
        let c = s.client.clone();
        tasks.push(tokio::spawn(async move {
            c.send(&reg_token(i), TAG, alert()).await
        }));
    }
    for t in tasks {
        let o = t.await.unwrap();
        assert_eq!(
            shape(&o),
            (
                VerdictClass::Retryable,
                Reason::Unavailable,
                503,
                Some(Stage::Token),
                false
            )
        );
        assert_eq!(o.retry_after(), Some(Duration::from_secs(9)));
    }
    assert_eq!(s.mock.token_requests(), 1);
    assert_eq!(s.mock.send_requests(), 0);
    // The endpoint is back: the next send asks again and gets through.
    s.mock.set_token_delay(Duration::ZERO);
    assert_delivered(&s.client.send(&reg_token(1), TAG, alert()).await);
    assert_eq!(s.mock.token_requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_replaced_before_it_expires() {
    // 8 s tokens: replaced after half their life (4 s), while still valid.
    let s = setup_with(MockFcmConfig {
        token_lifetime_s: 8,
        ..Default::default()
    })
    .await;
    let t0 = Instant::now();
    assert_delivered(&s.client.send(&reg_token(1), TAG, alert()).await);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_delivered(&s.client.send(&reg_token(1), TAG, alert()).await);
    assert_eq!(s.mock.token_requests(), 1, "reused while fresh");
    tokio::time::sleep(Duration::from_millis(4400).saturating_sub(t0.elapsed())).await;
    assert_delivered(&s.client.send(&reg_token(1), TAG, alert()).await);
    assert_eq!(s.mock.token_requests(), 2, "replaced in the refresh window");
    let m = s.mock.messages();
    assert_eq!(m[0].access_token, m[1].access_token);
    assert_ne!(m[1].access_token, m[2].access_token);
    // The old token was still valid when it was replaced: FCM never refused one, and it
    // still accepts it now.
    assert_eq!(s.mock.unauthorized(), 0);
    let raw = Raw::new(s.mock.ca_pem());
    let (status, body) = raw
        .post(
            &format!("{}/v1/projects/sealrelay-test/messages:send", s.mock.url()),
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {}", m[0].access_token)),
            ],
            std::str::from_utf8(&m[0].body).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(t0.elapsed() < Duration::from_secs(7), "{:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_refreshes_the_token_once() {
    let s = setup().await;
    assert_delivered(&s.client.send(&reg_token(1), TAG, alert()).await);
    // FCM stops accepting the cached token: one refresh, one retry, delivered.
    s.mock.expire_access_tokens();
    assert_delivered(&s.client.send(&reg_token(2), TAG, alert()).await);
    assert_eq!(s.mock.token_requests(), 2);
    assert_eq!(s.mock.send_requests(), 3);
    assert_eq!(s.mock.unauthorized(), 1);
    // Tokens dead on arrival: after the one retry, the relay is misconfigured.
    s.mock.set_token_lifetime(0);
    s.mock.expire_access_tokens();
    let before = s.mock.send_requests();
    let o = s.client.send(&reg_token(3), TAG, alert()).await;
    assert_eq!(
        shape(&o),
        (
            VerdictClass::Misconfigured,
            Reason::Auth,
            401,
            Some(Stage::Send),
            false
        )
    );
    assert_eq!(s.mock.send_requests() - before, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_unregistered_deletes_the_registration() {
    let s = setup().await;
    let raw_unregistered_400 = sealrelay_testkit::mock_fcm::google_error_body(
        400,
        "INVALID_ARGUMENT",
        "The registration token is not registered",
        Some("UNREGISTERED"),
        None,
    );
    let cases: Vec<(MockReply, VerdictClass, Reason, u16, bool)> = vec![
        (
            MockReply::Unregistered,
            VerdictClass::TokenDead,
            Reason::Unregistered,
            404,
            true,
        ),
        (
            MockReply::Raw {
                status: 400,
                body: raw_unregistered_400,
            },
            VerdictClass::TokenDead,
            Reason::Unregistered,
            400,
            true,
        ),
        // A payload error: this message cannot succeed, the device is fine.
        (
            MockReply::InvalidArgument,
            VerdictClass::Rejected,
            Reason::InvalidArgument,
            400,
            false,
        ),
        // A 404 without UNREGISTERED (a wrong URL, project or proxy) must never wipe
        // registrations.
        (
            MockReply::Raw {
                status: 404,
                body: "<html>Not Found</html>".into(),
            },
            VerdictClass::Misconfigured,
            Reason::NotFound,
            404,
            false,
        ),
        (
            MockReply::Raw {
                status: 404,
                body: sealrelay_testkit::mock_fcm::google_error_body(
                    404,
                    "NOT_FOUND",
                    "Requested entity was not found.",
                    None,
                    None,
                ),
            },
            VerdictClass::Misconfigured,
            Reason::NotFound,
            404,
            false,
        ),
    ];
    for (i, (reply, class, reason, status, deletes)) in cases.into_iter().enumerate() {
        let token = reg_token(100 + i);
        s.mock.reply_times(&token, reply.clone(), 1);
        let o = s.client.send(&token, TAG, alert()).await;
        assert_eq!(
            shape(&o),
            (class, reason, status, Some(Stage::Send), deletes),
            "{reply:?}"
        );
        assert_eq!(o.label(), reason.label());
    }
    assert_eq!(s.mock.send_requests(), 5, "no retries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_the_relay_itself_are_misconfigured() {
    let s = setup().await;
    let cases: Vec<(MockReply, Reason, u16)> = vec![
        (MockReply::ThirdPartyAuthError, Reason::ThirdPartyAuth, 401),
        (MockReply::SenderIdMismatch, Reason::SenderIdMismatch, 403),
        (
            MockReply::Raw {
                status: 403,
                body: "{}".into(),
            },
            Reason::Auth,
            403,
        ),
    ];
    for (i, (reply, reason, status)) in cases.into_iter().enumerate() {
        let token = reg_token(200 + i);
        s.mock.reply_times(&token, reply.clone(), 1);
        let before = s.mock.send_requests();
        let o = s.client.send(&token, TAG, alert()).await;
        assert_eq!(
            shape(&o),
            (
                VerdictClass::Misconfigured,
                reason,
                status,
                Some(Stage::Send),
                false
            ),
            "{reply:?}"
        );
        // A new access token cannot fix these: no retry.
        assert_eq!(s.mock.send_requests() - before, 1, "{reply:?}");
    }
    // Another project than the service account's: FCM's 403 PERMISSION_DENIED.
    let mut v: serde_json::Value = serde_json::from_str(&s.mock.service_account_json()).unwrap();
    v["project_id"] = "someone-else".into();
    let other = FcmClient::new(&settings(&s.mock, &v.to_string())).unwrap();
    let o = other.send(&reg_token(1), TAG, alert()).await;
    assert_eq!(
        shape(&o),
        (
            VerdictClass::Misconfigured,
            Reason::Auth,
            403,
            Some(Stage::Send),
            false
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_outages_and_silence_are_retryable() {
    let s = setup().await;
    let cases: Vec<(MockReply, Reason, u16, Option<u64>)> = vec![
        (
            MockReply::QuotaExceeded {
                retry_after_s: Some(17),
            },
            Reason::Quota,
            429,
            Some(17),
        ),
        (
            MockReply::Unavailable {
                retry_after_s: None,
            },
            Reason::Unavailable,
            503,
            None,
        ),
        (MockReply::Internal, Reason::Internal, 500, None),
        (
            MockReply::Raw {
                status: 502,
                body: "<html>bad gateway</html>".into(),
            },
            Reason::Unavailable,
            502,
            None,
        ),
    ];
    for (i, (reply, reason, status, retry_after)) in cases.into_iter().enumerate() {
        let token = reg_token(300 + i);
        s.mock.reply_times(&token, reply.clone(), 1);
        let o = s.client.send(&token, TAG, alert()).await;
        assert_eq!(
            shape(&o),
            (
                VerdictClass::Retryable,
                reason,
                status,
                Some(Stage::Send),
                false
            ),
            "{reply:?}"
        );
        assert_eq!(o.retry_after(), retry_after.map(Duration::from_secs));
        // The script was one-shot: the next send is delivered.
        assert_delivered(&s.client.send(&token, TAG, alert()).await);
    }

    // FCM unreachable (its port closed), the token endpoint fine.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_url = format!("https://127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let mut st = settings(&s.mock, &s.mock.service_account_json());
    st.url = closed_url;
    let o = FcmClient::new(&st)
        .unwrap()
        .send(&reg_token(1), TAG, alert())
        .await;
    assert_eq!(
        shape(&o),
        (
            VerdictClass::Retryable,
            Reason::Unreachable,
            0,
            Some(Stage::Send),
            false
        )
    );
    // Nothing answers at all: the token request fails first.
    let gone = MockFcm::start(MockFcmConfig::default()).await.unwrap();
    let st = settings(&gone, &gone.service_account_json());
    let ca = Pki::new(); // keep a CA file alive after the mock goes
    let st = Settings {
        ca_file: Some(ca.ca_file.clone()),
        ..st
    };
    drop(gone);
    let o = FcmClient::new(&st)
        .unwrap()
        .send(&reg_token(1), TAG, alert())
        .await;
    assert_eq!(
        shape(&o),
        (
            VerdictClass::Retryable,
            Reason::Unreachable,
            0,
            Some(Stage::Token),
            false
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assertion_signed_with_the_wrong_key_is_refused() {
    let s = setup().await;
    // Same account, kid and e-mail, another key: the mock's signature check refuses it.
    let forged = s
        .mock
        .service_account()
        .with_private_key(FIXTURE_RSA_OTHER_PEM)
        .to_json();
    let client = FcmClient::new(&settings(&s.mock, &forged)).unwrap();
    let o = client.send(&reg_token(1), TAG, alert()).await;
    assert_eq!(
        shape(&o),
        (
            VerdictClass::Misconfigured,
            Reason::TokenRefused,
            400,
            Some(Stage::Token),
            false
        )
    );
    assert_eq!(
        client.check_credentials().await.unwrap_err().reason(),
        Reason::TokenRefused
    );
    assert_eq!(
        s.mock.token_rejections(),
        vec!["Invalid JWT Signature.".to_string(); 2]
    );
    assert_eq!(s.mock.tokens_issued(), 0);
    assert_eq!(s.mock.send_requests(), 0);
    // The right key works; an audience the assertion does not carry is refused.
    assert_eq!(s.client.check_credentials().await, Ok(()));
    let fresh = FcmClient::new(&settings(&s.mock, &s.mock.service_account_json())).unwrap();
    s.mock
        .set_expected_audience("https://oauth2.googleapis.com/token");
    let o = fresh.send(&reg_token(1), TAG, alert()).await;
    assert_eq!(o.reason(), Reason::TokenRefused);
    assert!(s.mock.token_rejections()[2].contains("Failed audience check"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_misconfigured() {
    let s = setup().await;
    let json = s.mock.service_account_json();
    let other = Pki::new();
    // Another CA than the mock's, or only the public roots.
    for ca_file in [Some(other.ca_file.clone()), None] {
        let st = Settings {
            ca_file,
            ..settings(&s.mock, &json)
        };
        let o = FcmClient::new(&st)
            .unwrap()
            .send(&reg_token(1), TAG, alert())
            .await;
        assert_eq!(
            shape(&o),
            (
                VerdictClass::Misconfigured,
                Reason::Tls,
                0,
                Some(Stage::Token),
                false
            )
        );
    }
    assert_eq!(s.mock.connections(), 0, "no handshake completed");
    assert_eq!(s.mock.token_requests(), 0);
    // A CA file that holds no certificate is refused when the client is built.
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "hello").unwrap();
    let st = Settings {
        ca_file: Some(bad.path().to_owned()),
        ..settings(&s.mock, &json)
    };
    let e = FcmClient::new(&st).unwrap_err().to_string();
    assert!(e.starts_with("FCM_CA_FILE="), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_send_is_bounded_by_the_timeout() {
    assert_eq!(SEND_TIMEOUT, Duration::from_secs(10));
    // A silent FCM, a silent token endpoint, and two slow ones whose sum passes the bound:
    // the bound is for the whole send, not for each request.
    let slow_send = setup().await;
    slow_send.mock.reply_times(
        &reg_token(1),
        MockReply::Deliver.after(Duration::from_secs(30)),
        1,
    );
    let slow_token = setup().await;
    slow_token.mock.set_token_delay(Duration::from_secs(30));
    let both = setup().await;
    both.mock.set_token_delay(Duration::from_secs(6));
    both.mock.reply_times(
        &reg_token(1),
        MockReply::Deliver.after(Duration::from_secs(6)),
        1,
    );
    let timed = |s: &Setup| {
        let c = s.client.clone();
        async move {
            let t = Instant::now();
            let o = c.send(&reg_token(1), TAG, alert()).await;
            (o, t.elapsed())
        }
    };
    let ((a, ta), (b, tb), (c, tc)) =
        tokio::join!(timed(&slow_send), timed(&slow_token), timed(&both));
    let timeout = |stage| {
        (
            VerdictClass::Retryable,
            Reason::Timeout,
            0,
            Some(stage),
            false,
        )
    };
    assert_eq!(shape(&a), timeout(Stage::Send));
    assert_eq!(shape(&b), timeout(Stage::Token));
    assert_eq!(shape(&c), timeout(Stage::Send));
    for t in [ta, tb, tc] {
        assert!(
            t >= Duration::from_millis(9900) && t < Duration::from_millis(11_500),
            "{t:?}"
        );
    }
    // The slow pair did reach FCM: the token came after 6 s, the send was cut at 10 s.
    assert_eq!(both.mock.tokens_issued(), 1);
    assert_eq!(both.mock.send_requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_is_rejected_without_a_request() {
    let s = setup().await;
    assert!(is_valid_registration_token(&reg_token(1)));
    assert!(is_valid_registration_token(&"a".repeat(32)));
    assert!(is_valid_registration_token(&"A-z_0:9".repeat(146)));
    assert!(!is_valid_registration_token(&"a".repeat(31)));
    assert!(!is_valid_registration_token(&"a".repeat(1025)));
    assert!(!is_valid_registration_token(&format!(
        "{}.x",
        "a".repeat(40)
    )));
    for (token, tag, notify) in [
        ("short".to_owned(), TAG, alert()),
        (format!("{} x", reg_token(1)), TAG, alert()),
        (reg_token(1), "bad tag", Notify::Silent),
        (reg_token(1), "", Notify::Silent),
        (reg_token(1), TAG, Notify::Alert("é".repeat(161))),
    ] {
        let o = s.client.send(&token, tag, notify).await;
        assert_eq!(
            shape(&o),
            (
                VerdictClass::Rejected,
                Reason::InvalidInput,
                0,
                Some(Stage::Send),
                false
            )
        );
    }
    assert_eq!(s.mock.token_requests(), 0);
    assert_eq!(s.mock.send_requests(), 0);
    // 160 characters is the limit, not past it.
    assert_delivered(
        &s.client
            .send(&reg_token(1), TAG, Notify::Alert("é".repeat(160)))
            .await,
    );
}

/// Log lines captured on this test's thread.
#[derive(Clone, Default)]
struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One runtime thread, so the thread-local subscriber sees every line the client logs.
#[tokio::test(flavor = "current_thread")]
async fn no_secret_in_debug_errors_or_logs() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut texts: Vec<String> = Vec::new();
    let s = setup().await;
    let st = settings(&s.mock, &s.mock.service_account_json());
    texts.push(format!("{st:?} {:?} {:?}", st.account, s.client));

    // Every path: delivered (alert and silent), each scripted error, a 401 refresh.
    let tokens: Vec<String> = (0..10).map(reg_token).collect();
    let replies = [
        MockReply::Unregistered,
        MockReply::InvalidArgument,
        MockReply::QuotaExceeded {
            retry_after_s: Some(5),
        },
        MockReply::Unavailable {
            retry_after_s: None,
        },
        MockReply::Internal,
        MockReply::SenderIdMismatch,
        MockReply::ThirdPartyAuthError,
    ];
    for (i, r) in replies.iter().enumerate() {
        s.mock.reply_times(&tokens[i], r.clone(), 1);
    }
    for (i, t) in tokens.iter().enumerate() {
        let n = if i % 2 == 0 { alert() } else { Notify::Silent };
        let o = s.client.send(t, TAG, n).await;
        texts.push(format!("{o:?} {}", o.label()));
    }
    s.mock.expire_access_tokens();
    texts.push(format!(
        "{:?}",
        s.client.send(&tokens[0], TAG, alert()).await
    ));
    texts.push(format!("{:?}", s.client));
    // A refused token request, a refused assertion, malformed input.
    s.mock
        .token_reply_times(TokenReply::invalid_grant("Invalid JWT Signature."), 1);
    s.mock.expire_access_tokens();
    texts.push(format!(
        "{:?}",
        s.client.send(&tokens[1], TAG, alert()).await
    ));
    let forged = s
        .mock
        .service_account()
        .with_private_key(FIXTURE_RSA_OTHER_PEM)
        .to_json();
    let c = FcmClient::new(&settings(&s.mock, &forged)).unwrap();
    texts.push(format!(
        "{:?} {c:?}",
        c.send(&tokens[2], TAG, alert()).await
    ));
    texts.push(format!(
        "{:?}",
        s.client
            .send(&format!("{}!", tokens[3]), TAG, alert())
            .await
    ));
    // A TLS failure.
    let untrusted = Settings {
        ca_file: None,
        ..settings(&s.mock, &s.mock.service_account_json())
    };
    texts.push(format!(
        "{:?}",
        FcmClient::new(&untrusted)
            .unwrap()
            .send(&tokens[4], TAG, alert())
            .await
    ));

    // Errors whose input held the key: the parser's and the configuration's.
    let json = s.mock.service_account_json();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["private_key"] = FIXTURE_RSA_PEM.replace("MII", "MIJ").into();
    let e = ServiceAccount::from_json(&v.to_string()).unwrap_err();
    texts.push(format!("{e} {e:?}"));
    let e = ServiceAccount::from_json(&json[..json.len() / 2]).unwrap_err();
    texts.push(format!("{e} {e:?}"));
    for bad in [v.to_string(), json[..json.len() / 2].to_owned()] {
        let e = sealrelay::config::Config::load(&|k: &str| {
            (k == "FCM_SERVICE_ACCOUNT").then(|| bad.clone())
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("FCM_SERVICE_ACCOUNT is not valid"),
            "{e}"
        );
        texts.push(format!("{e} {e:?}"));
    }
    // A configuration that loaded the module, as the binary would print it.
    let cfg = sealrelay::config::Config::load(&|k: &str| {
        (k == "FCM_SERVICE_ACCOUNT").then(|| json.clone())
    })
    .unwrap();
    let shown = format!("{cfg:?}");
    assert!(shown.contains("sealrelay-test"), "the module is in it");
    texts.push(shown);
    // The mock's own types.
    texts.push(format!(
        "{:?} {:?} {:?} {:?}",
        s.mock,
        s.mock.service_account(),
        s.mock.messages(),
        KeySource::Pem(FIXTURE_RSA_PEM.into())
    ));

    let logs = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    // Positive controls: the capture works and holds the interesting lines.
    assert!(logs.contains("FCM message not delivered"), "{logs}");
    assert!(
        logs.contains("FCM registration token is unregistered"),
        "{logs}"
    );
    assert!(logs.contains("FCM token endpoint refused"), "{logs}");
    assert!(logs.contains("FCM request failed"), "{logs}");

    let mut secrets: Vec<(&str, String)> = Vec::new();
    for t in &tokens {
        secrets.push(("registration token", t.clone()));
        secrets.push(("registration token part", t[t.len() - 24..].to_owned()));
    }
    let issued = s.mock.issued_access_tokens();
    assert!(issued.len() >= 2, "{}", issued.len());
    for t in issued {
        secrets.push(("access token", t[t.len() - 24..].to_owned()));
    }
    let assertions = s.mock.assertions();
    assert!(assertions.len() >= 3, "{}", assertions.len());
    for a in assertions {
        for part in a.split('.') {
            secrets.push((
                "assertion part",
                part[part.len().saturating_sub(24)..].to_owned(),
            ));
        }
    }
    for pem in [FIXTURE_RSA_PEM, FIXTURE_RSA_OTHER_PEM] {
        for line in pem
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() >= 20)
        {
            secrets.push(("private key", line[..20].to_owned()));
        }
    }
    secrets.push(("private key", "PRIVATE KEY".into()));
    // The scan does catch a planted secret.
    let planted = format!("oops {}", tokens[5]);
    assert!(secrets.iter().any(|(_, x)| planted.contains(x.as_str())));

    texts.push(logs);
    for text in &texts {
        for (what, secret) in &secrets {
            if let Some(at) = text.find(secret.as_str()) {
                panic!(
                    "{what} found in: {}",
                    text[at.saturating_sub(200)..]
                        .chars()
                        .take(400)
                        .collect::<String>()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The mock's own checks, poked with hand-made requests: each can fail.

/// A raw HTTPS client trusting only `ca_pem`.
struct Raw(
    hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Full<bytes::Bytes>,
    >,
);

impl Raw {
    fn new(ca_pem: &str) -> Self {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_all_versions()
            .build();
        Self(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector),
        )
    }

    async fn post(&self, url: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        use http_body_util::BodyExt;
        let mut b = hyper::Request::builder().method("POST").uri(url);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_owned(),
            )))
            .unwrap();
        let resp = self.0.request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    async fn token(&self, url: &str, assertion: &str) -> (u16, serde_json::Value) {
        let body = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let (status, text) = self
            .post(
                url,
                &[("content-type", "application/x-www-form-urlencoded")],
                &body,
            )
            .await;
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Signs `claims` with `key_pem` (RS256 unless `alg` says otherwise) and header `kid`.
fn sign(
    alg: jsonwebtoken::Algorithm,
    kid: Option<&str>,
    key_pem: &str,
    claims: &serde_json::Value,
) -> String {
    let mut h = jsonwebtoken::Header::new(alg);
    h.kid = kid.map(str::to_owned);
    let key = match alg {
        jsonwebtoken::Algorithm::HS256 => jsonwebtoken::EncodingKey::from_secret(b"guessable"),
        _ => jsonwebtoken::EncodingKey::from_rsa_pem(key_pem.as_bytes()).unwrap(),
    };
    jsonwebtoken::encode(&h, claims, &key).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_checks_every_part_of_the_assertion() {
    use jsonwebtoken::Algorithm::{HS256, RS256, RS512};
    let mock = MockFcm::start(MockFcmConfig::default()).await.unwrap();
    let raw = Raw::new(mock.ca_pem());
    let url = mock.token_url();
    let a = mock.service_account().clone();
    let kid = a.private_key_id.as_str();
    let t = unix_now();
    let scope = sealrelay::testing::fcm::FCM_SCOPE;
    let good = serde_json::json!({"iss": a.client_email, "scope": scope, "aud": url, "iat": t, "exp": t + 3600});
    let with = |k: &str, v: serde_json::Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    let without = |k: &str| {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove(k);
        c
    };

    // The controls: a correct assertion, one without kid, one with more scopes.
    for jwt in [
        sign(RS256, Some(kid), FIXTURE_RSA_PEM, &good),
        sign(RS256, None, FIXTURE_RSA_PEM, &good),
        sign(
            RS256,
            Some(kid),
            FIXTURE_RSA_PEM,
            &with(
                "scope",
                format!("https://www.googleapis.com/auth/cloud-platform {scope}").into(),
            ),
        ),
    ] {
        let (status, body) = raw.token(&url, &jwt).await;
        assert_eq!(status, 200, "{body}");
        assert!(body["access_token"].as_str().unwrap().starts_with("ya29."));
        assert_eq!(body["expires_in"], 3599);
        assert_eq!(body["token_type"], "Bearer");
    }
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "wrong key",
            sign(RS256, Some(kid), FIXTURE_RSA_OTHER_PEM, &good),
            "invalid_grant",
        ),
        (
            "HS256",
            sign(HS256, Some(kid), FIXTURE_RSA_PEM, &good),
            "invalid_grant",
        ),
        (
            "RS512",
            sign(RS512, Some(kid), FIXTURE_RSA_PEM, &good),
            "invalid_grant",
        ),
        (
            "wrong kid",
            sign(RS256, Some("0000"), FIXTURE_RSA_PEM, &good),
            "invalid_grant",
        ),
        (
            "wrong iss",
            sign(
                RS256,
                Some(kid),
                FIXTURE_RSA_PEM,
                &with("iss", "x@evil.example".into()),
            ),
            "invalid_grant",
        ),
        (
            "no scope",
            sign(RS256, Some(kid), FIXTURE_RSA_PEM, &without("scope")),
            "invalid_scope",
        ),
        (
            "scope prefix",
            sign(
                RS256,
                Some(kid),
                FIXTURE_RSA_PEM,
                &with("scope", format!("{scope}.x").into()),
            ),
            "invalid_scope",
        ),
        (
            "wrong aud",
            sign(
                RS256,
                Some(kid),
                FIXTURE_RSA_PEM,
                &with("aud", "https://oauth2.googleapis.com/token".into()),
            ),
            "invalid_grant",
        ),
        (
            "iat in the future",
            sign(
                RS256,
                Some(kid),
                FIXTURE_RSA_PEM,
                &serde_json::json!({"iss": a.client_email, "scope": scope, "aud": url, "iat": t + 120, "exp": t + 3720}),
            ),
            "invalid_grant",
        ),
        (
            "longer than an hour",
            sign(
                RS256,
                Some(kid),
                FIXTURE_RSA_PEM,
                &with("exp", (t + 3601).into()),
            ),
            "invalid_grant",
        ),
        (
            "expired",
            sign(
                RS256,
                Some(kid),
                FIXTURE_RSA_PEM,
                &serde_json::json!({"iss": a.client_email, "scope": scope, "aud": url, "iat": t - 4000, "exp": t - 400}),
            ),
            "invalid_grant",
        ),
        ("not a JWT", "not.a.jwt".to_owned(), "invalid_grant"),
    ];
    for (name, jwt, error) in &cases {
        let (status, body) = raw.token(&url, jwt).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert_eq!(body["error"], *error, "{name}: {body}");
    }
    assert_eq!(mock.token_requests(), 3 + cases.len());
    assert_eq!(mock.tokens_issued(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_checks_auth_project_and_shape() {
    let mock = MockFcm::start(MockFcmConfig::default()).await.unwrap();
    let raw = Raw::new(mock.ca_pem());
    let a = mock.service_account().clone();
    let t = unix_now();
    let claims = serde_json::json!({"iss": a.client_email, "scope": sealrelay::testing::fcm::FCM_SCOPE, "aud": mock.token_url(), "iat": t, "exp": t + 3600});
    let (_, tok) = raw
        .token(
            &mock.token_url(),
            &sign(
                jsonwebtoken::Algorithm::RS256,
                Some(&a.private_key_id),
                FIXTURE_RSA_PEM,
                &claims,
            ),
        )
        .await;
    let bearer = format!("Bearer {}", tok["access_token"].as_str().unwrap());
    let send_url = format!("{}/v1/projects/sealrelay-test/messages:send", mock.url());
    let token = reg_token(1);
    let good = format!(
        r#"{{"message":{{"token":"{token}","data":{{"zerobyte_tag":"x","zerobyte_notify":"silent"}},"android":{{"priority":"normal","ttl":"3600s"}}}}}}"#
    );
    let json = ("content-type", "application/json");
    let auth = ("authorization", bearer.as_str());
    assert_eq!(raw.post(&send_url, &[json, auth], &good).await.0, 200);
    for h in [
        vec![json],
        vec![json, ("authorization", "Bearer ya29.forged")],
    ] {
        let (status, body) = raw.post(&send_url, &h, &good).await;
        assert_eq!(status, 401);
        assert!(body.contains("UNAUTHENTICATED"), "{body}");
    }
    let other = format!("{}/v1/projects/other/messages:send", mock.url());
    let (status, body) = raw.post(&other, &[json, auth], &good).await;
    assert_eq!((status, body.contains("PERMISSION_DENIED")), (403, true));
    for bad in [
        good.replace(r#""priority":"normal""#, r#""priority":"urgent""#),
        good.replace(r#""ttl":"3600s""#, r#""ttl":"3600""#),
        good.replace(r#""zerobyte_notify":"silent""#, r#""zerobyte_notify":1"#),
        good.replace(r#""android":"#, r#""notification":{},"android":"#),
        good.replace(&token, "short"),
        "{}".to_owned(),
    ] {
        let (status, body) = raw.post(&send_url, &[json, auth], &bad).await;
        assert_eq!(status, 400, "{bad}");
        assert!(body.contains("INVALID_ARGUMENT"), "{body}");
    }
    // Only the well-formed, authorized message was recorded.
    assert_eq!(mock.messages().len(), 1);
    // Issued tokens expire with the mock's clock.
    mock.advance_clock(3600);
    assert_eq!(raw.post(&send_url, &[json, auth], &good).await.0, 401);
    assert_eq!(mock.unauthorized(), 3);
}
