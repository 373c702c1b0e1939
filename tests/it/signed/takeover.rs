//! A push whose replica was killed (kill -9) while it delivered, and whose client never
//! comes back, is delivered by another replica: the request kept, sealed, beside the push's
//! lease lets the first reader past the bound take the push over, instead of settling it
//! `failed` (`relay_interrupted`) with nothing sent.

use std::time::{Duration, Instant};

use crate::common::process::RelayProcess;
use crate::common::signed::*;
use crate::common::*;
use sealrelay::clock::Clock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_left_by_a_killed_replica_is_delivered_by_a_readers_replica() {
    let redis = RedisServer::start();
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("admin.sock");
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    for (k, v) in [
        ("REDIS_URL", redis.url()),
        (
            "RELAY_QUEUE_KEY",
            "takeover-test-queue-key-0123456789abcdef".to_owned(),
        ),
        ("APNS_REQUEST_TIMEOUT_MS", "1000".to_owned()),
        // Abandoned past twice the lease: 5 s.
        ("RELAY_RETRY_LEASE_MS", "2500".to_owned()),
    ] {
        vars.push((k.to_owned(), v));
    }
    let mut one_vars = vars.clone();
    one_vars.push(("RELAY_ADMIN_SOCKET".into(), socket.display().to_string()));
    let mut one = tokio::task::block_in_place(|| RelayProcess::spawn(&one_vars));
    let two = tokio::task::block_in_place(|| RelayProcess::spawn(&vars));
    let ops = Signer::new("ops");
    let (status, v) = admin_call(
        &socket,
        "PUT",
        &format!("/admin/v1/signers/{}", ops.id),
        Some(serde_json::json!({"publicKey": ops.public(), "topics": [TOPIC]})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();

    // APNs holds its answer; the replica delivering is killed while it waits.
    prod.set_delay(Duration::from_secs(3));
    let before = prod.started();
    let body = ops.sign(ops.request(&rid(7), &[device(7)], Clock::System.now_ms()));
    let post = {
        let (client, url) = (client.clone(), format!("{}v2/pushes", one.url()));
        let req = hyper::Request::post(url)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                serde_json::to_vec(&body).unwrap(),
            )))
            .unwrap();
        // Its answer never comes: the replica is killed first.
        tokio::spawn(async move { client.request(req).await.is_err() })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while prod.started() <= before {
        assert!(Instant::now() < deadline, "the APNs request never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    one.kill9();
    let killed = Instant::now();
    assert!(post.await.unwrap(), "the killed replica answered");
    prod.set_delay(Duration::ZERO);

    // The client never comes back; a reader on the other replica does.
    let path = format!("/v2/pushes/{}", rid(7));
    let url = format!("{}{}", two.url(), path.trim_start_matches('/'));
    let read = || async {
        let auth = ops.read_auth(&path, Clock::System.now_ms());
        request_headers(&client, "GET", &url, &[("authorization", auth)], Vec::new()).await
    };
    let first = read().await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["state"], "pending", "{}", first.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    let settled = loop {
        let r = read().await.json();
        if r["state"] == "settled" {
            break r;
        }
        assert!(Instant::now() < deadline, "never settled: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = killed.elapsed();
    let target = &settled["targets"][hash16(&device(7))];
    assert_eq!(target["state"], "delivered", "{settled}");
    println!("delivered by the reader's replica {took:?} after the kill");
    // Two requests reached APNs (at least once): the killed replica's, whose connection
    // died with it, and the taker's, answered 200.
    assert_eq!(prod.started() - before, 2);
    let sent = prod.received_for(&device(7));
    assert_eq!(sent.iter().filter(|r| r.status == 200).count(), 1);
}
