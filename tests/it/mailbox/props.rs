//! Arbitrary mailbox requests (methods, paths, headers, bodies, in any order on a few
//! mailboxes) never panic the relay, always get an answer from the contract's set of
//! statuses, and every error body is the spec's shape or the one 404.

use crate::common::config;
use axum::body::Body;
use proptest::prelude::*;
use sealrelay::app::App;
use sealrelay::clock::Clock;
use std::sync::Arc;
use tower::ServiceExt;

fn relay(rt: &tokio::runtime::Runtime) -> Arc<App> {
    let cfg = config(&[
        ("RELAY_DRY_RUN".to_owned(), "true".to_owned()),
        (
            "RELAY_APPS".to_owned(),
            "chat:push=com.example.app,signal;notes".to_owned(),
        ),
        (
            "RELAY_MAILBOX_MAX_ENVELOPE_BYTES".to_owned(),
            "64".to_owned(),
        ),
        ("RELAY_MAILBOX_MAX_ENVELOPES".to_owned(), "4".to_owned()),
    ]);
    let _guard = rt.enter();
    Arc::new(App::build(cfg, Clock::System).unwrap())
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("p2c".to_owned()),
        Just("c2p".to_owned()),
        Just("push".to_owned()),
        Just("watch".to_owned()),
        Just("signal".to_owned()),
        Just("primary".to_owned()),
        Just("ice".to_owned()),
        (0u64..12).prop_map(|n| n.to_string()),
        "[ -~]{0,12}".prop_map(|s| s.replace(['/', '?', '#', ' ', '%'], "")),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("chat"), Just("notes"), Just("nope")],
        prop_oneof![
            Just("mailbox-aaaaaaaaaaa"),
            Just("mailbox-bbbbbbbbbbb"),
            Just("short")
        ],
        proptest::collection::vec(segment(), 0..3),
        prop_oneof![
            Just(""),
            Just("?after=1&limit=2"),
            Just("?upto=3"),
            Just("?limit=0"),
            Just("?after=x")
        ],
    )
        .prop_map(|(app, id, rest, q)| {
            let mut p = format!("/v1/{app}/mailbox/{id}");
            for s in rest {
                p.push('/');
                p.push_str(&s);
            }
            p + q
        })
}

fn header() -> impl Strategy<Value = Option<(&'static str, String)>> {
    prop_oneof![
        Just(None),
        Just(Some((
            "authorization",
            "Bearer Zq3k8r2mT1u0wQabcdefgh".to_owned()
        ))),
        Just(Some((
            "authorization",
            "Bearer Zq3k8r2mT1u0wQabcdefgX".to_owned()
        ))),
        "[ -~]{0,40}".prop_map(|v| Some(("authorization", v))),
        prop_oneof![Just("alert"), Just("silent"), Just("loud")]
            .prop_map(|v| Some(("x-relay-notify", v.to_owned()))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct(
            "proptest-regressions/mailbox-requests.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_sequence_of_requests_panics_or_leaves_the_contract(
        reqs in proptest::collection::vec(
            (
                prop_oneof![Just("GET"), Just("PUT"), Just("DELETE"), Just("HEAD"), Just("POST")],
                path(),
                proptest::collection::vec(header(), 0..3),
                proptest::collection::vec(any::<u8>(), 0..80),
            ),
            1..30,
        )
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let app = relay(&rt);
        for (method, path, headers, body) in reqs {
            let (status, text) = rt.block_on(async {
                let mut req = axum::http::Request::builder().method(method).uri(&path);
                for (k, v) in headers.into_iter().flatten() {
                    req = req.header(k, v);
                }
                let Ok(req) = req.body(Body::from(body)) else {
                    return (0, String::new());
                };
                let resp = app.public_router().oneshot(req).await.unwrap();
                let status = resp.status().as_u16();
                let bytes = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&bytes).into_owned())
            });
            if status == 0 {
                continue;
            }
            prop_assert!(
                [200, 201, 204, 400, 401, 403, 404, 405, 409, 413, 429, 507].contains(&status),
                "{} {} -> {} {}", method, path, status, text
            );
            if method == "HEAD" {
                // HEAD answers carry no body.
                prop_assert!(text.is_empty());
            } else if status == 404 {
                prop_assert_eq!(text.as_str(), r#"{"v":1,"error":"not found"}"#);
            } else if status >= 400 && status != 404 {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(v["status"].as_u64(), Some(status as u64), "{}", text);
                prop_assert!(v["error"].is_string());
            }
        }
    }
}
