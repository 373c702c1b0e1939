//! The fan-out across replicas, standalone and on a Cluster, and after a reconnect.

use super::*;

async fn two_fanouts(url: &str) -> (crate::store::fanout::Fanout, crate::store::fanout::Fanout) {
    let s = settings(url, "fan:");
    let mut out = Vec::new();
    for _ in 0..2 {
        let redis = RedisStore::connect(&s, Policy::defaults()).unwrap();
        assert!(redis.wait_ready(Duration::from_secs(10)).await);
        out.push(Fanout::redis(&s, redis.pool().clone(), crate::clock::Clock::System).unwrap());
    }
    let b = out.pop().unwrap();
    (out.pop().unwrap(), b)
}

async fn fanout_between_replicas(url: &str, channels: &[crate::store::fanout::Channel]) {
    let (a, b) = two_fanouts(url).await;
    // Held to the end: a channel is released with its last subscriber.
    let mut held = Vec::new();
    for c in channels {
        let mut sub = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                // The subscriber connects in the background: retry until it takes.
                match b.subscribe(c).await {
                    Ok(s) => break s,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await
        .expect("subscribed");
        let mut other = b.subscribe(c).await.unwrap();
        a.publish(c, b"hello", T0).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .unwrap_or_else(|_| panic!("message arrives on the other replica: {c:?}"));
        assert_eq!(got.as_deref(), Some(&b"hello"[..]), "{c:?}");
        let got = tokio::time::timeout(Duration::from_secs(5), other.recv())
            .await
            .unwrap();
        assert_eq!(got.as_deref(), Some(&b"hello"[..]));
        held.push((sub, other));
    }
    assert_eq!(b.channels(), channels.len());
    drop(held);
    assert_eq!(b.channels(), 0, "released with the last subscriber");
}

/// A message published on one replica reaches subscribers on another: sharded channels
/// (a hash tag) and a global one, on one Redis.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_reaches_another_replica_on_redis() {
    let server = RedisServer::start();
    let channels = [
        crate::store::fanout::Channel::sharded("fan:{m:abc}:events".into()),
        crate::store::fanout::Channel::sharded("fan:{m:def}:events".into()),
        crate::store::fanout::Channel::global("fan:signers".into()),
    ];
    fanout_between_replicas(&server.url(), &channels).await;
}

/// The same on a real three-master Cluster, with sharded channels whose tags live on every
/// master.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_reaches_another_replica_on_a_cluster() {
    let cluster = RedisCluster::start();
    let mut channels = Vec::new();
    let mut masters = std::collections::HashSet::new();
    for i in 0..200 {
        let name = format!("fan:{{m:{i}}}:events");
        if masters.insert(cluster.node_of(&format!("{{m:{i}}}"))) {
            channels.push(crate::store::fanout::Channel::sharded(name));
        }
        if masters.len() == 3 {
            break;
        }
    }
    assert_eq!(channels.len(), 3, "a channel on every master");
    channels.push(crate::store::fanout::Channel::global("fan:signers".into()));
    fanout_between_replicas(&cluster.url(), &channels).await;
}

/// After the subscriber's connection drops, it subscribes again by itself and the resync
/// counter grows, so consumers know to re-read what they may have missed.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_resubscribes_after_a_reconnect() {
    let mut server = RedisServer::start();
    let (a, b) = two_fanouts(&server.url()).await;
    let c = crate::store::fanout::Channel::sharded("fan:{m:re}:events".into());
    let mut sub = loop {
        match b.subscribe(&c).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let mut resyncs = b.resyncs();
    let before = *resyncs.borrow();
    server.restart();
    tokio::time::timeout(Duration::from_secs(20), async {
        while *resyncs.borrow() == before {
            resyncs.changed().await.unwrap();
        }
    })
    .await
    .expect("resynced after the reconnect");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let _ = a.publish(&c, b"after", T0).await;
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
            assert_eq!(&m[..], b"after");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never received after the reconnect"
        );
    }
}
