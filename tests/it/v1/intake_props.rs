//! Arbitrary bodies never panic intake and always get a 2xx or a 4xx.

use crate::common::{self, config};
use axum::body::Body;
use proptest::prelude::*;
use sealrelay::app::App;
use sealrelay::clock::Clock;
use serde_json::json;
use std::sync::Arc;
use tower::ServiceExt;

/// A dry-run relay on the in-process store, driven without a socket.
fn relay(rt: &tokio::runtime::Runtime) -> Arc<App> {
    let cfg = config(&[("RELAY_DRY_RUN".to_owned(), "true".to_owned())]);
    let _guard = rt.enter();
    Arc::new(App::build(cfg, Clock::System).unwrap())
}

fn status_of(rt: &tokio::runtime::Runtime, relay: &Arc<App>, body: Vec<u8>) -> u16 {
    rt.block_on(async {
        let req = axum::http::Request::post("/")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        relay
            .public_router()
            .oneshot(req)
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[ -~]{0,40}".prop_map(|s| json!(s)),
        "[0-9a-f]{16,70}".prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::hash_map("[a-zA-Z]{1,10}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(body in prop::collection::vec(any::<u8>(), 0..9000)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let s = status_of(&rt, &relay(&rt), body);
        prop_assert!((200..500).contains(&s), "status {s}");
    }

    #[test]
    fn arbitrary_json(v in json_value()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let s = status_of(&rt, &relay(&rt), serde_json::to_vec(&v).unwrap());
        prop_assert_eq!(s, 400);
    }

    #[test]
    fn envelopes_with_any_field_replaced(field in prop::sample::select(vec!["v", "device", "suite", "ciphertext", "collapseId", "flapId", "priority", "event"]), v in json_value()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut e = common::envelope(&common::device(1), &common::id(1));
        e[field] = v;
        let s = status_of(&rt, &relay(&rt), serde_json::to_vec(&e).unwrap());
        prop_assert!(s == 202 || s == 400, "status {s}");
    }
}
