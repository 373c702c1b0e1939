//! Three relay processes sharing one Redis (standalone, then a real three-master Redis
//! Cluster) make the decisions one relay would: one forward per alert however many replicas
//! it reaches at once, one bucket per device, shared flap state and environment memory.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::common::process::RelayProcess;

use crate::common::*;
use serde_json::json;

struct Setup {
    prod: MockApns,
    sandbox: MockApns,
    relays: Vec<RelayProcess>,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    _pki: Pki,
}

const PREFIX: &str = "rep:";

async fn setup(redis_url: &str) -> Setup {
    setup_with(redis_url, &[]).await
}

/// [`setup`] with more variables (later ones win).
async fn setup_with(redis_url: &str, extra: &[(&str, &str)]) -> Setup {
    setup_of(3, redis_url, extra).await
}

/// [`setup_with`] with `replicas` relays.
async fn setup_of(replicas: usize, redis_url: &str, extra: &[(&str, &str)]) -> Setup {
    let pki = pki();
    let key = auth_key();
    let prod = mock(&pki, &key).await;
    let sandbox = mock(&pki, &key).await;
    let mut vars = relay_vars(&pki, &key, &prod, &sandbox);
    vars.retain(|(k, _)| k != "RELAY_LISTEN" && k != "RELAY_ADMIN_LISTEN");
    for (k, v) in [
        ("REDIS_URL", redis_url),
        ("RELAY_REDIS_PREFIX", PREFIX),
        ("RELAY_RATE_CAPACITY", "5"),
        ("RELAY_FLAP_MAX_FORWARDS", "3"),
        ("RELAY_REDIS_TIMEOUT_MS", "2000"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    {
        vars.push((k.to_owned(), v.to_owned()));
    }
    let relays = (0..replicas).map(|_| RelayProcess::spawn(&vars)).collect();
    Setup {
        prod,
        sandbox,
        relays,
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
        _pki: pki,
    }
}

impl Setup {
    async fn post(&self, replica: usize, body: &serde_json::Value) -> Resp {
        request(
            &self.client,
            "POST",
            &self.relays[replica].url(),
            serde_json::to_vec(body).unwrap(),
        )
        .await
    }
}

/// POSTs `body` to `url` in a task, on a connection of its own (a client of its own), so
/// that the kernel may hand it to any core's listener of a per-core replica.
fn post_alone(url: String, body: &serde_json::Value) -> tokio::task::JoinHandle<Resp> {
    let body = serde_json::to_vec(body).unwrap();
    tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        request(&client, "POST", &url, body).await
    })
}

/// A device's key in Redis: its hash tag is the first 32 hex characters of SHA-256 of the
/// (lowercase) token.
fn store_key(device: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        device.to_ascii_lowercase().as_bytes(),
    );
    let hex: String = d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{PREFIX}{{{hex}}}")
}

/// Runs every replica scenario; `devices` are the device numbers used for the coalescing
/// rounds.
async fn scenario(s: Arc<Setup>, devices: &[u32]) {
    // The same envelope to all three replicas at once, three times each: one forward.
    for &n in devices {
        let e = envelope(&device(n), &id(n));
        let mut tasks = Vec::new();
        for r in 0..9 {
            let s = s.clone();
            let e = e.clone();
            tasks.push(tokio::spawn(async move { s.post(r % 3, &e).await }));
        }
        let mut forwarded = 0;
        for t in tasks {
            let r = t.await.unwrap();
            assert_eq!(r.status, 202, "{}", r.body);
            if r.body == r#"{"v":1,"outcome":"forwarded"}"# {
                forwarded += 1;
            } else {
                assert_eq!(r.body, r#"{"v":1,"outcome":"coalesced"}"#);
            }
        }
        assert_eq!(forwarded, 1, "device {n}");
        assert_eq!(s.prod.received_for(&device(n)).len(), 1, "device {n}");
    }

    // One bucket per device, whichever replica a request lands on.
    let d = device(9000);
    for i in 0..5 {
        let r = s.post(i % 3, &envelope(&d, &id(9000 + i as u32))).await;
        assert_eq!(r.status, 202, "{}", r.body);
    }
    let r = s.post(2, &envelope(&d, &id(9999))).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("2"));

    // Flap state is shared: three forwards of one flapId through three replicas cool it.
    let f = device(9100);
    for i in 0..3 {
        let mut e = envelope(&f, &id(100 + i));
        e["flapId"] = json!(id(7777));
        assert_eq!(
            s.post(i as usize, &e).await.body,
            r#"{"v":1,"outcome":"forwarded"}"#
        );
    }
    let mut e = envelope(&f, &id(200));
    e["flapId"] = json!(id(7777));
    assert_eq!(
        s.post(0, &e).await.body,
        r#"{"v":1,"outcome":"suppressed"}"#
    );

    // The environment that worked is remembered for every replica.
    let env_dev = device(9200);
    s.prod
        .reply_always(&env_dev, Reply::new(400, Some("BadDeviceToken")));
    assert_eq!(s.post(0, &envelope(&env_dev, &id(1))).await.status, 202);
    assert_eq!(s.post(1, &envelope(&env_dev, &id(2))).await.status, 202);
    assert_eq!(s.post(2, &envelope(&env_dev, &id(3))).await.status, 202);
    assert_eq!(s.prod.received_for(&env_dev).len(), 1);
    assert_eq!(s.sandbox.received_for(&env_dev).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_one_redis() {
    let redis = RedisServer::start();
    let s = Arc::new(setup(&redis.url()).await);
    scenario(s.clone(), &(0..20).collect::<Vec<_>>()).await;
    // Every key the replicas wrote carries a TTL.
    let keys = redis.cli(&["--scan", "--pattern", "*"]);
    assert!(!keys.is_empty());
    for k in keys.lines() {
        let pttl: i64 = redis.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(pttl > 0, "{k} has no TTL");
    }
}

/// The same decisions from replicas that each run on one thread (`RELAY_WORKER_THREADS=1`,
/// a single-threaded runtime).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_single_threaded_replicas_on_one_redis() {
    let redis = RedisServer::start();
    let s = Arc::new(setup_with(&redis.url(), &[("RELAY_WORKER_THREADS", "1")]).await);
    scenario(s.clone(), &(0..20).collect::<Vec<_>>()).await;
}

/// The same decisions from replicas that each run a relay per core (`RELAY_RUNTIME=per-core`,
/// two single-threaded cores on one port): six relays in all. Connections spread over both
/// cores of a replica (each core sends on an APNs connection of its own), and a SIGTERM
/// stops every core: the process drains and exits, and its port refuses connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_per_core_replicas_on_one_redis() {
    let redis = RedisServer::start();
    let s = Arc::new(
        setup_with(
            &redis.url(),
            &[
                ("RELAY_RUNTIME", "per-core"),
                ("RELAY_WORKER_THREADS", "2"),
                ("RELAY_SHUTDOWN_DELAY_S", "0"),
            ],
        )
        .await,
    );
    let lines = s.relays[0].lines();
    let serving = lines.iter().find(|l| l.contains("sealrelay serving"));
    assert!(
        serving.is_some_and(|l| l.contains(r#""cores":2"#)),
        "{serving:?}"
    );
    // The cores share the replica's one in-flight limit.
    let metrics = s.relays[0].admin_get("/metrics");
    assert!(
        metrics.lines().any(|l| l == "sealrelay_max_inflight 1024"),
        "{metrics}"
    );

    // 32 alerts at once to one replica, each on a connection of its own: the kernel spreads
    // the connections over both cores' listeners (all 32 on one: odds of 2^-31).
    let before = s.prod.received().len();
    let tasks: Vec<_> = (0..32u32)
        .map(|n| post_alone(s.relays[0].url(), &envelope(&device(5000 + n), &id(n))))
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.body, r#"{"v":1,"outcome":"forwarded"}"#);
    }
    let carried: HashSet<usize> = s.prod.received()[before..]
        .iter()
        .map(|r| r.connection)
        .collect();
    assert_eq!(
        carried.len(),
        2,
        "APNs connections that carried them: {carried:?}"
    );

    scenario(s.clone(), &(0..20).collect::<Vec<_>>()).await;

    let mut s = Arc::into_inner(s).expect("no task holds the setup");
    let port = s.relays[0].port;
    s.relays[0].signal(libc::SIGTERM);
    assert_eq!(s.relays[0].wait_exit(Duration::from_secs(10)), Some(0));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "a core still listens on {port} after the relay exited"
    );
}

/// A replica running a relay per core is still one replica to its limits: its cores share
/// one `RELAY_MAX_INFLIGHT` (four alerts held at APNs on four connections, which the kernel
/// spreads over both cores, leave no room on either: eight more on new connections are all
/// answered 503 `relay overloaded`) and divide `RELAY_REDIS_POOL_SIZE` between them (four
/// connections to Redis for commands in all, two per core).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_core_replica_keeps_one_replicas_limits() {
    let redis = RedisServer::start();
    let s = Arc::new(
        setup_of(
            1,
            &redis.url(),
            &[
                ("RELAY_RUNTIME", "per-core"),
                ("RELAY_WORKER_THREADS", "2"),
                ("RELAY_MAX_INFLIGHT", "4"),
                ("RELAY_REDIS_POOL_SIZE", "4"),
            ],
        )
        .await,
    );
    let metrics = s.relays[0].admin_get("/metrics");
    assert!(
        metrics.lines().any(|l| l == "sealrelay_max_inflight 4"),
        "{metrics}"
    );
    // Connections to Redis for commands (pub/sub ones apart), without this CLIENT LIST's own.
    let clients = redis.cli(&["CLIENT", "LIST", "TYPE", "normal"]);
    assert_eq!(clients.lines().count() - 1, 4, "{clients}");

    let post = |n: u32| {
        post_alone(
            s.relays[0].url(),
            &envelope(&device(7000 + n), &id(7000 + n)),
        )
    };
    s.prod.set_delay(Duration::from_millis(1500));
    let started = s.prod.started();
    let held: Vec<_> = (0..4).map(post).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.prod.started() < started + 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "four alerts never reached APNs"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused: Vec<_> = (4..12).map(post).collect();
    for t in refused {
        let r = t.await.unwrap();
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.body, r#"{"v":1,"error":"relay overloaded"}"#);
    }
    s.prod.set_delay(Duration::ZERO);
    for t in held {
        let r = t.await.unwrap();
        assert_eq!(r.body, r#"{"v":1,"outcome":"forwarded"}"#);
    }
}

/// While Redis is down (`RELAY_REDIS_FAILURE=degrade`, the server stopped), a per-core
/// replica still decides as one replica: its cores decide on one in-process state. The same
/// alert to one device on sixteen connections at once (spread over both cores; all on one:
/// odds of 2^-15) is forwarded once and coalesced fifteen times, and the in-process devices
/// gauge counts that device once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_core_replica_decides_as_one_while_degraded() {
    let mut redis = RedisServer::start();
    let s = Arc::new(
        setup_of(
            1,
            &redis.url(),
            &[
                ("RELAY_RUNTIME", "per-core"),
                ("RELAY_WORKER_THREADS", "2"),
                ("RELAY_REDIS_FAILURE", "degrade"),
                ("RELAY_REDIS_TIMEOUT_MS", "200"),
            ],
        )
        .await,
    );
    redis.stop();
    let d = device(8000);
    let e = envelope(&d, &id(8000));
    let tasks: Vec<_> = (0..16).map(|_| post_alone(s.relays[0].url(), &e)).collect();
    let mut forwarded = 0;
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 202, "{}", r.body);
        if r.body == r#"{"v":1,"outcome":"forwarded"}"# {
            forwarded += 1;
        } else {
            assert_eq!(r.body, r#"{"v":1,"outcome":"coalesced"}"#);
        }
    }
    assert_eq!(forwarded, 1);
    assert_eq!(s.prod.received_for(&d).len(), 1);
    let metrics = s.relays[0].admin_get("/metrics");
    assert!(
        metrics.lines().any(|l| l == "sealrelay_degraded 1"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "sealrelay_memory_store_devices 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    // Pick devices whose keys land on every master.
    let mut devices = Vec::new();
    let mut nodes = HashSet::new();
    for n in 0..200u32 {
        let node = cluster.node_of(&store_key(&device(n)));
        if devices.len() < 12 || !nodes.contains(&node) {
            devices.push(n);
            nodes.insert(node);
        }
        if nodes.len() == 3 && devices.len() >= 12 {
            break;
        }
    }
    assert_eq!(nodes.len(), 3, "devices on every master");
    let s = Arc::new(setup(&cluster.url()).await);
    scenario(s.clone(), &devices).await;
    // Keys really are spread over the three masters.
    let per_node: Vec<usize> = cluster
        .nodes
        .iter()
        .map(|n| n.cli(&["DBSIZE"]).trim().parse().unwrap())
        .collect();
    assert!(per_node.iter().all(|&k| k > 0), "{per_node:?}");
}

/// A live reshard under traffic: every slot that holds a key moves to another master (300 ms
/// half-way each) while three replicas forward a new alert for one of four devices every
/// 20 ms. Every answer is 202 `forwarded` with no store error on any replica (so none fell
/// back to deciding alone), and APNs gets each alert exactly once: the admission script
/// follows `MOVED` and `ASK` and waits out `TRYAGAIN`, and a redirected command is not run
/// twice. (Before the fix, redirected admissions failed and the replica decided alone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_traffic_costs_no_error() {
    let cluster = Arc::new(RedisCluster::start());
    let s = Arc::new(setup_with(&cluster.url(), &[("RELAY_RATE_CAPACITY", "100000")]).await);
    let devices: Vec<u32> = (40..44).collect();
    // Every device's keys exist before the slots move.
    for &n in &devices {
        let r = s.post(0, &envelope(&device(n), &id(1_000_000 + n))).await;
        assert_eq!(r.body, r#"{"v":1,"outcome":"forwarded"}"#);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (s, stop, devices) = (s.clone(), stop.clone(), devices.clone());
        tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut sent = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let n = devices[sent as usize % devices.len()];
                let r = s
                    .post(sent as usize % 3, &envelope(&device(n), &id(sent)))
                    .await;
                if r.status != 202 || r.body != r#"{"v":1,"outcome":"forwarded"}"# {
                    failures.push(format!("alert {sent}: {} {}", r.status, r.body));
                }
                sent += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            (sent, failures)
        })
    };
    let slots = cluster.slots_in_use();
    assert!(slots.len() >= devices.len(), "{slots:?}");
    for (slot, from) in slots {
        let moving = cluster.clone();
        tokio::task::spawn_blocking(move || {
            moving.move_slot(slot, (from + 1) % 3, std::time::Duration::from_millis(300))
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (sent, failures) = traffic.await.unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
    println!("{sent} alerts during the reshard");
    assert!(sent >= 10, "only {sent} alerts during the reshard");
    // Decided in Redis throughout: no store error, so no replica fell back to its own store.
    for r in &s.relays {
        let (errors, metrics) = tokio::task::block_in_place(|| {
            (
                r.counter_sum("sealrelay_store_errors_total"),
                r.admin_get("/metrics"),
            )
        });
        let lines: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("sealrelay_store_errors_total{") && !l.ends_with(" 0"))
            .collect();
        assert_eq!(errors, 0.0, "store errors during the reshard: {lines:?}");
    }
    // Each alert once (plus the first one per device).
    let received: usize = devices
        .iter()
        .map(|&n| s.prod.received_for(&device(n)).len())
        .sum();
    assert_eq!(received, sent as usize + devices.len());
}
