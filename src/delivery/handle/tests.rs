//! The delivery core and the retry worker against a scripted push service, with a manual
//! clock for the policy and paused tokio time for deadlines: no sleeps cross a window.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::clock::Clock;
use crate::policy::Policy;
use crate::push::{BoxFuture, EnvironmentMode};
use crate::store::queue::QueueKey;
use crate::store::Store;

const T0: i64 = 1_790_000_000_000;

/// One scripted answer: after `delay`, this status and reason; `None` never answers.
#[derive(Debug, Clone)]
struct Step {
    env: Environment,
    delay: Duration,
    answer: Option<(u16, &'static str)>,
}

/// A push service that answers from a script and records what it was asked.
#[derive(Debug, Default)]
struct Scripted {
    steps: Mutex<VecDeque<Step>>,
    calls: Mutex<Vec<Environment>>,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Self {
            steps: Mutex::new(steps.into()),
            calls: Mutex::default(),
        })
    }

    fn calls(&self) -> Vec<Environment> {
        self.calls.lock().unwrap().clone()
    }
}

fn step(env: Environment, delay_ms: u64, answer: Option<(u16, &'static str)>) -> Step {
    Step {
        env,
        delay: Duration::from_millis(delay_ms),
        answer,
    }
}

impl Push for Scripted {
    fn service(&self) -> crate::push::Service {
        crate::push::Service::Apns
    }

    fn render(&self, n: &Notification) -> Bytes {
        crate::push::apns::render(n)
    }

    fn send<'a>(
        &'a self,
        env: Environment,
        _m: &'a Notification,
        _budget: Duration,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(env);
            let s = self
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .expect("a scripted step");
            assert_eq!(s.env, env, "asked on {env:?}, scripted for {:?}", s.env);
            tokio::time::sleep(s.delay).await;
            match s.answer {
                None => std::future::pending().await,
                Some((status, reason)) => crate::push::apns::reason::classify(
                    status,
                    Some(reason)
                        .filter(|r| !r.is_empty())
                        .map(crate::push::apns::reason::tests::parse),
                ),
            }
        })
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_secs(3)
    }
}

fn settings(lease_ms: i64) -> Settings {
    Settings {
        environment: EnvironmentMode::Auto,
        tombstone_ttl_ms: 86_400_000,
        retry_lease_ms: lease_ms,
        alert_title: "t".into(),
        alert_body: "b".into(),
    }
}

fn alert(n: u8) -> Alert {
    Alert {
        device: DeviceToken::parse(&format!("{n:02x}{}", "ab".repeat(31))).unwrap(),
        suite: "x25519".into(),
        ciphertext: "A".repeat(68),
        collapse_id: alert::Id32::parse(&format!("{n:032x}")).unwrap(),
        flap_id: None,
        priority: alert::Priority::TimeSensitive,
        event: false,
    }
}

fn core(store: Arc<Store>, push: Arc<Scripted>, clock: &Clock, lease_ms: i64) -> Arc<Delivery> {
    Arc::new(Delivery::new(
        settings(lease_ms),
        store,
        Sender::Push(push),
        clock.clone(),
    ))
}

/// A store on the real Redis at `url`, keys under `prefix`, its shared queue sealed under
/// `key`, degrading to process memory when Redis fails (as a replica does).
fn redis_store(url: String, prefix: &str, key: &QueueKey) -> Store {
    use crate::store::connection::{RedisSettings, RedisStore};
    use crate::store::fanout::Fanout;
    use crate::store::queue::{RedisQueue, Sealer};
    use crate::store::RedisFailure;
    let s = RedisSettings {
        url,
        prefix: prefix.into(),
        pool_size: 1,
        timeout: Duration::from_millis(300),
    };
    let redis = RedisStore::connect(&s, Policy::defaults()).unwrap();
    let queue = RedisQueue::new(redis.pool().clone(), prefix, Sealer::new(key));
    Store::redis(
        redis,
        Some(queue),
        Fanout::memory(),
        Policy::defaults(),
        RedisFailure::Degrade,
    )
}

/// Waits until every store in `stores` is connected.
async fn until_ready(stores: &[&Store]) {
    while !stores.iter().all(|s| s.ready()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// After an environment fallback that failed transiently, the queued item names the
/// environment the attempt ended on, so the retry never goes back to the one that
/// rejected the token.
#[tokio::test(start_paused = true)]
async fn a_retry_goes_to_the_environment_the_last_attempt_ended_on() {
    use Environment::{Production as P, Sandbox as S};
    let clock = Clock::manual(T0);
    let store = Arc::new(Store::memory(Policy::defaults()));
    let push = Scripted::new(vec![
        step(P, 0, Some((400, "BadDeviceToken"))),
        step(S, 0, Some((503, "ServiceUnavailable"))),
        step(S, 0, Some((200, ""))),
    ]);
    let d = core(store.clone(), push.clone(), &clock, 30_000);
    assert_eq!(d.handle(&alert(1)).await, Outcome::Queued);
    clock.advance_ms(1_000);
    let now = clock.now_ms();
    let mut leases = store.queue().claim(now, now + 30_000, 10).await.leases;
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].claimed.item.env, Environment::Sandbox);
    d.retry(leases.remove(0)).await;
    assert_eq!(push.calls(), vec![P, S, S]);
    assert_eq!(store.queue().local_len(), 0, "delivered and acknowledged");
}

/// One deadline, half the lease, bounds a whole retry attempt: a first environment that
/// answers slowly with BadDeviceToken and a second that never answers end the attempt at
/// the deadline, and the item is rescheduled (still the claimer's, so the write takes).
#[tokio::test(start_paused = true)]
async fn one_deadline_bounds_a_retry_attempt_across_both_environments() {
    use Environment::{Production as P, Sandbox as S};
    let clock = Clock::manual(T0);
    let store = Arc::new(Store::memory(Policy::defaults()));
    let lease_ms = 10_000;
    let push = Scripted::new(vec![
        step(P, 0, Some((503, "ServiceUnavailable"))),
        // The retry: production takes 2.5 s to say BadDeviceToken, sandbox hangs.
        step(P, 2_500, Some((400, "BadDeviceToken"))),
        step(S, 0, None),
    ]);
    let d = core(store.clone(), push.clone(), &clock, lease_ms);
    assert_eq!(d.handle(&alert(2)).await, Outcome::Queued);
    clock.advance_ms(1_000);
    let now = clock.now_ms();
    let lease = store
        .queue()
        .claim(now, now + lease_ms, 10)
        .await
        .leases
        .remove(0);
    let started = tokio::time::Instant::now();
    d.retry(lease).await;
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(lease_ms as u64 / 2),
        "the attempt took {took:?}"
    );
    assert!(took >= Duration::from_millis(4_900), "{took:?}");
    assert_eq!(push.calls(), vec![P, P, S]);
    // Rescheduled for later, with the environment it ended on and two attempts counted.
    let now = clock.now_ms();
    let again = store
        .queue()
        .claim(now + 120_000, now + 200_000, 10)
        .await
        .leases;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].claimed.item.attempts, 2);
    assert_eq!(again[0].claimed.item.env, Environment::Sandbox);
}

/// A claimer whose lease passed to another worker neither delivers-and-deletes nor rolls
/// back: its acknowledgement is stale, so the forward record stays for the new owner.
#[tokio::test(start_paused = true)]
async fn a_stale_claim_settles_nothing() {
    use Environment::Production as P;
    let clock = Clock::manual(T0);
    let store = Arc::new(Store::memory(Policy::defaults()));
    let push = Scripted::new(vec![
        step(P, 0, Some((503, "ServiceUnavailable"))),
        step(P, 0, Some((400, "BadCollapseId"))),
    ]);
    let d = core(store.clone(), push, &clock, 30_000);
    let a = alert(3);
    assert_eq!(d.handle(&a).await, Outcome::Queued);
    clock.advance_ms(1_000);
    let now = clock.now_ms();
    let stale = store
        .queue()
        .claim(now, now + 30_000, 10)
        .await
        .leases
        .remove(0);
    // Its lease runs out; another worker claims the item.
    clock.advance_ms(30_000);
    let now = clock.now_ms();
    let current = store
        .queue()
        .claim(now, now + 30_000, 10)
        .await
        .leases
        .remove(0);
    assert_ne!(stale.claimed.fence, current.claimed.fence);
    // The stale claimer's attempt is refused for good: it must not roll back or delete.
    d.retry(stale).await;
    assert_eq!(
        store.queue().local_len(),
        1,
        "the item is still the new owner's"
    );
    // The alert is still held (coalesces), as the new owner's attempt is pending.
    let now = clock.now_ms();
    let again = store.policy().admit(a.key(), now).await.unwrap();
    assert_eq!(again.decision, Decision::Coalesced);
}

/// An item past its staleness window is never sent: it expires, and its forward is rolled
/// back so the alert is eligible again.
#[tokio::test(start_paused = true)]
async fn an_item_past_its_window_expires_unsent() {
    use Environment::Production as P;
    let clock = Clock::manual(T0);
    let store = Arc::new(Store::memory(Policy::defaults()));
    let push = Scripted::new(vec![step(P, 0, Some((503, "ServiceUnavailable")))]);
    let d = core(store.clone(), push.clone(), &clock, 30_000);
    let a = alert(4);
    assert_eq!(d.handle(&a).await, Outcome::Queued);
    clock.advance_ms(601_000);
    let now = clock.now_ms();
    let lease = store
        .queue()
        .claim(now, now + 30_000, 10)
        .await
        .leases
        .remove(0);
    d.retry(lease).await;
    assert_eq!(push.calls().len(), 1, "never sent late");
    assert_eq!(store.queue().local_len(), 0);
    let again = store.policy().admit(a.key(), clock.now_ms()).await.unwrap();
    assert!(matches!(again.decision, Decision::Forward(_)));
}

/// Items a degraded replica queued in process are handed to Redis when the worker stops,
/// where another replica can claim them.
#[tokio::test(flavor = "multi_thread")]
async fn the_worker_hands_its_local_queue_to_redis_when_it_stops() {
    let mut server = sealrelay_testkit::redis::RedisServer::start();
    let key = QueueKey::derive(b"shutdown hand-over");
    let store = Arc::new(redis_store(server.url(), "stop:", &key));
    let other = redis_store(server.url(), "stop:", &key);
    until_ready(&[&store, &other]).await;
    server.stop();
    let clock = Clock::System;
    let push = Scripted::new(vec![step(
        Environment::Production,
        0,
        Some((503, "ServiceUnavailable")),
    )]);
    let d = core(store.clone(), push, &clock, 30_000);
    assert_eq!(d.handle(&alert(5)).await, Outcome::Queued);
    assert!(store.degraded());
    assert_eq!(store.queue().local_len(), 1);
    server.restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while store.degraded() {
        assert!(std::time::Instant::now() < deadline, "never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Not in the loop's recovery hand-over: the stop path alone must do it.
    assert!(store.queue().take_recovered());
    let (tx, rx) = tokio::sync::watch::channel(true);
    d.clone().run_retries(rx).await;
    drop(tx);
    assert_eq!(store.queue().local_len(), 0);
    let mut found = Vec::new();
    for _ in 0..crate::store::queue::redis::SHARDS {
        found.extend(
            other
                .queue()
                .claim(clock.now_ms() + 120_000, clock.now_ms() + 200_000, 10)
                .await
                .leases,
        );
    }
    assert_eq!(found.len(), 1);
}

/// What a front-end heard of its queued deliveries' endings.
#[derive(Debug, Default)]
struct Heard(Mutex<Vec<(Reference, String)>>);

#[async_trait::async_trait]
impl Settlement for Heard {
    async fn ended(
        &self,
        reference: &Reference,
        ending: crate::delivery::Ending<'_>,
        _deadline_ms: i64,
    ) {
        self.0
            .lock()
            .unwrap()
            .push((reference.clone(), format!("{ending:?}")));
    }
}

/// A refusal whose acknowledgement's reply is lost is still reported. Redis is paused for
/// writes (`CLIENT PAUSE ... WRITE`) while the retry's ack is sent: the caller gives up
/// after its 300 ms timeout, and the ack runs when the pause ends, so nobody will claim
/// the item again. Before, only an ack answered `Done` was followed by a report, and the
/// push's receipt stayed `queued` until its TTL.
#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_whose_ack_reply_is_lost_is_still_reported() {
    use Environment::Production as P;
    let server = sealrelay_testkit::redis::RedisServer::start();
    let key = QueueKey::derive(b"lost ack");
    let store = Arc::new(redis_store(server.url(), "ack:", &key));
    until_ready(&[&store]).await;
    let clock = Clock::manual(T0);
    let push = Scripted::new(vec![
        // A first item, queued and delivered: its ack loads the script on the server.
        step(P, 0, Some((503, "ServiceUnavailable"))),
        step(P, 0, Some((200, ""))),
        step(P, 0, Some((503, "ServiceUnavailable"))),
        // The retry's refusal, 400 ms in: the pause below has begun by then.
        step(P, 400, Some((400, "BadCollapseId"))),
    ]);
    let heard = Arc::new(Heard::default());
    let d = Arc::new(
        Delivery::new(
            settings(30_000),
            store.clone(),
            Sender::Push(push),
            clock.clone(),
        )
        .with_settlement(heard.clone()),
    );
    let ctx = Context {
        settles: Some(("push-1".into(), "target-1".into())),
        ..Context::default()
    };
    let claim = |at: i64| {
        let store = store.clone();
        async move {
            let mut leases = Vec::new();
            for _ in 0..crate::store::queue::redis::SHARDS {
                leases.extend(store.queue().claim(at, at + 30_000, 10).await.leases);
            }
            leases
        }
    };
    assert_eq!(d.handle(&alert(7)).await, Outcome::Queued);
    let first = claim(clock.now_ms() + 60_000).await;
    assert_eq!(first.len(), 1);
    d.retry(first.into_iter().next().unwrap()).await;
    assert!(
        heard.0.lock().unwrap().is_empty(),
        "nothing asked to hear of it"
    );
    assert_eq!(d.handle_with(&alert(6), &ctx).await, Outcome::Queued);
    let mut leases = claim(clock.now_ms() + 60_000).await;
    assert_eq!(leases.len(), 1);
    let retry = {
        let (d, lease) = (d.clone(), leases.remove(0));
        tokio::spawn(async move { d.retry(lease).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    server.cli(&["CLIENT", "PAUSE", "1200", "WRITE"]);
    retry.await.unwrap();
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].0, ("push-1".to_owned(), "target-1".to_owned()));
    assert!(heard[0].1.contains("Outcome"), "{heard:?}");
    // The ack ran once the pause ended: the item is gone from the shared queue.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let items = server.cli(&["--scan", "--pattern", "ack:{q*}:items"]);
    assert!(items.trim().is_empty(), "still queued: {items}");
}

/// A replica that stops while Redis still fails cannot hand its in-process queue on: each
/// item's front-end hears it is lost (a signed push's receipt then says `failed`,
/// `relay_stopped`, where the store takes the report) instead of waiting for it forever.
#[tokio::test(flavor = "multi_thread")]
async fn items_left_in_process_at_stop_are_reported_lost() {
    let mut server = sealrelay_testkit::redis::RedisServer::start();
    let key = QueueKey::derive(b"lost at stop");
    let store = Arc::new(redis_store(server.url(), "lost:", &key));
    until_ready(&[&store]).await;
    server.stop();
    let push = Scripted::new(vec![step(
        Environment::Production,
        0,
        Some((503, "ServiceUnavailable")),
    )]);
    let heard = Arc::new(Heard::default());
    let d = Arc::new(
        Delivery::new(
            settings(30_000),
            store.clone(),
            Sender::Push(push),
            Clock::System,
        )
        .with_settlement(heard.clone()),
    );
    let ctx = Context {
        settles: Some(("push-2".into(), "target-2".into())),
        ..Context::default()
    };
    assert_eq!(d.handle_with(&alert(8), &ctx).await, Outcome::Queued);
    assert!(store.degraded());
    assert_eq!(store.queue().local_len(), 1);
    let (tx, rx) = tokio::sync::watch::channel(true);
    d.clone().run_retries(rx).await;
    drop(tx);
    assert_eq!(store.queue().local_len(), 0);
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(
        heard,
        vec![(
            ("push-2".to_owned(), "target-2".to_owned()),
            "Lost".to_owned()
        )]
    );
}

/// An item sealed under another queue key (a replica with another `RELAY_QUEUE_KEY`, or a
/// rotated one) cannot be opened, so it is set aside unsent; its front-end still hears so,
/// from the reference kept in the clear beside it, instead of its receipt target staying
/// `queued` until the receipt's TTL.
#[tokio::test(flavor = "multi_thread")]
async fn an_item_that_cannot_be_opened_is_still_reported() {
    let server = sealrelay_testkit::redis::RedisServer::start();
    let writer = Arc::new(redis_store(
        server.url(),
        "aside:",
        &QueueKey::derive(b"old key"),
    ));
    let reader = Arc::new(redis_store(
        server.url(),
        "aside:",
        &QueueKey::derive(b"new key"),
    ));
    until_ready(&[&writer, &reader]).await;
    let clock = Clock::manual(T0);
    let busy = Scripted::new(vec![step(
        Environment::Production,
        0,
        Some((503, "ServiceUnavailable")),
    )]);
    let first = core(writer.clone(), busy, &clock, 30_000);
    let ctx = Context {
        settles: Some(("push-3".into(), "target-3".into())),
        ..Context::default()
    };
    assert_eq!(first.handle_with(&alert(9), &ctx).await, Outcome::Queued);

    // Another replica, another key, two minutes on: nothing it may send.
    let never = Scripted::new(Vec::new());
    let heard = Arc::new(Heard::default());
    let later = Clock::manual(T0 + 120_000);
    let d = Arc::new(
        Delivery::new(
            settings(30_000),
            reader.clone(),
            Sender::Push(never.clone()),
            later,
        )
        .with_settlement(heard.clone()),
    );
    let (tx, rx) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(d.clone().run_retries(rx));
    // One poll per shard at most (100 ms each) finds it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while heard.0.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.send(true).unwrap();
    worker.await.unwrap();
    assert!(never.calls().is_empty(), "nothing sent");
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(
        heard,
        vec![(
            ("push-3".to_owned(), "target-3".to_owned()),
            "SetAside".to_owned()
        )]
    );
    let aside = server.cli(&["--scan", "--pattern", "aside:{q*}:aside"]);
    assert!(!aside.trim().is_empty(), "kept aside for the operator");
}

/// A queue put whose reply is lost (`CLIENT PAUSE ... WRITE` while it is sent) is not a
/// put that did not run: the item lands in the shared queue when the pause ends, while the
/// replica that gave up on the reply has kept it in process too. The notification is still
/// delivered once: the copy kept in process waits, and goes when Redis answers and holds
/// the item. (Before, the replica delivered its copy while Redis was paused, and another
/// replica delivered the shared one: twice.)
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_put_whose_reply_is_lost_delivers_once() {
    use crate::policy::{Ticket, TicketKind};
    use crate::store::queue::Pending;
    use Environment::Production as P;
    let server = sealrelay_testkit::redis::RedisServer::start();
    let key = QueueKey::derive(b"lost put");
    let a = Arc::new(redis_store(server.url(), "lostput:", &key));
    let b = Arc::new(redis_store(server.url(), "lostput:", &key));
    until_ready(&[&a, &b]).await;
    // The put script loaded beforehand, so the paused call is the put itself.
    server.cli(&[
        "SCRIPT",
        "LOAD",
        include_str!("../../store/queue/queue_put.lua"),
    ]);
    let answers = || Scripted::new((0..4).map(|_| step(P, 0, Some((200, "")))).collect());
    let (push_a, push_b) = (answers(), answers());
    let heard = Arc::new(Heard::default());
    let replica = |store: &Arc<Store>, push: &Arc<Scripted>| {
        Arc::new(
            Delivery::new(
                settings(2_000),
                store.clone(),
                Sender::Push(push.clone()),
                Clock::System,
            )
            .with_settlement(heard.clone()),
        )
    };
    let (da, db) = (replica(&a, &push_a), replica(&b, &push_b));
    let now = Clock::System.now_ms();
    let item = Pending {
        id: "6b0e8f52-1d6c-4c1e-9a51-0c9d3c1f2a77".into(),
        device: alert(4).device.expose().to_owned(),
        collapse_id: "c".repeat(32),
        flap_key: "c".repeat(32),
        priority: 10,
        expiration_s: ((now + 600_000) / 1000) as u64,
        body: "{}".into(),
        env: P,
        attempts: 1,
        ticket: Ticket {
            at_ms: now,
            kind: TicketKind::Counted { cooled: false },
        },
        topic: None,
        settles: Some(("push-4".into(), "target-4".into())),
    };
    // Due half a second on, inside the two-second pause: the replica that kept it would
    // try it while Redis still does not answer.
    server.cli(&["CLIENT", "PAUSE", "2000", "WRITE"]);
    let paused = std::time::Instant::now();
    a.queue().enqueue(&item, now + 500, now).await.unwrap();
    assert!(a.degraded(), "the put's reply was lost");
    assert_eq!(a.queue().local_len(), 1);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let workers = [
        tokio::spawn(da.clone().run_retries(rx.clone())),
        tokio::spawn(db.clone().run_retries(rx)),
    ];
    // Delivered once the pause is over (claims sent during it were lost too, and hold the
    // item for their 2 s lease)...
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while push_a.calls().len() + push_b.calls().len() < 1 {
        assert!(std::time::Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered = paused.elapsed();
    // ...and not again: past another lease; the copy kept in process went when Redis
    // answered and had the item.
    tokio::time::sleep(Duration::from_secs(3)).await;
    tx.send(true).unwrap();
    for w in workers {
        w.await.unwrap();
    }
    let sends = push_a.calls().len() + push_b.calls().len();
    assert_eq!(sends, 1, "delivered {sends} times");
    assert_eq!(a.queue().local_len(), 0, "the copy kept in process is gone");
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    let items = server.cli(&["--scan", "--pattern", "lostput:{q*}:items"]);
    for k in items.split_whitespace() {
        assert_eq!(server.cli(&["HLEN", k]).trim(), "0", "{k} still holds it");
    }
    println!(
        "lost queue put (CLIENT PAUSE 2000 ms WRITE, timeout 300 ms): delivered once, {delivered:?} after the pause began"
    );
}
