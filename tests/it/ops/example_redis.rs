//! The example Redis of `k8s/redis-deployment.yaml` is fit for what the relay keeps in it: its
//! container arguments, run on a real `redis-server`, never evict a key (a full server refuses
//! the write instead) and keep every write across a `kill -9` (append-only file).

use std::time::Duration;

use sealrelay_testkit::redis::RedisServer;

const MANIFEST: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/k8s/redis-deployment.yaml"
));

/// The Redis container's `args:` list, unquoted.
fn args(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "args:");
    lines.next().expect("the redis container has args");
    for l in lines {
        let Some(item) = l.trim().strip_prefix("- ") else {
            break;
        };
        out.push(item.trim_matches('"').to_owned());
    }
    out
}

/// The arguments to run here: the manifest's, less its data directory (the harness gives each
/// server a temporary one).
fn local_args() -> Vec<String> {
    let all = args(MANIFEST);
    let mut out = Vec::new();
    let mut it = all.into_iter();
    while let Some(a) = it.next() {
        if a == "--dir" {
            assert_eq!(
                it.next().as_deref(),
                Some("/data"),
                "the data is on the volume"
            );
            continue;
        }
        out.push(a);
    }
    out
}

/// `SET key value` over a plain connection, and the first line of the reply (`redis-cli`
/// fails on an error reply, which is the answer this test wants to see).
fn raw_set(port: u16, key: &str, value: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut cmd = String::from("*3\r\n$3\r\nSET\r\n");
    for part in [key, value] {
        cmd.push_str(&format!("${}\r\n{part}\r\n", part.len()));
    }
    s.write_all(cmd.as_bytes()).expect("write");
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).expect("reply");
    line.trim_end().to_owned()
}

fn config(r: &RedisServer, name: &str) -> String {
    let out = r.cli(&["CONFIG", "GET", name]);
    out.lines().nth(1).unwrap_or_default().to_owned()
}

#[test]
fn the_manifest_args_are_read() {
    let a = args("    args:\n      - --x\n      - \"yes\"\n    ports:\n      - 1\n");
    assert_eq!(a, ["--x", "yes"]);
    let a = args(MANIFEST);
    assert!(a.len() >= 10, "{a:?}");
}

#[test]
fn the_example_redis_never_evicts_and_survives_a_kill() {
    let a = local_args();
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut r = RedisServer::start_with(&refs);
    assert_eq!(config(&r, "maxmemory-policy"), "noeviction");
    assert_eq!(config(&r, "appendonly"), "yes");
    assert_eq!(config(&r, "appendfsync"), "everysec");
    assert_eq!(config(&r, "maxmemory"), (200u64 << 20).to_string());

    // Keys like the relay's: one with no TTL (a signer), one with a TTL (a receipt).
    r.cli(&["HSET", "sealrelay:{signers}:k1", "pk", "x"]);
    r.cli(&["SET", "sealrelay:{r:p1}", "receipt", "EX", "3600"]);

    // Full: a write is refused, and nothing already there is evicted to make room.
    let used: u64 = r
        .cli(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    r.cli(&[
        "CONFIG",
        "SET",
        "maxmemory",
        &(used + 64 * 1024).to_string(),
    ]);
    let refused = raw_set(r.port, "sealrelay:{q0}:items", &"v".repeat(256 * 1024));
    assert!(
        refused.starts_with("-OOM"),
        "a write over maxmemory: {refused}"
    );
    assert_eq!(r.cli(&["HGET", "sealrelay:{signers}:k1", "pk"]).trim(), "x");
    assert_eq!(r.cli(&["GET", "sealrelay:{r:p1}"]).trim(), "receipt");
    r.cli(&["CONFIG", "SET", "maxmemory", "200mb"]);

    // kill -9 after the fsync second: the append-only file brings every key back.
    std::thread::sleep(Duration::from_millis(1500));
    r.restart();
    assert_eq!(r.cli(&["HGET", "sealrelay:{signers}:k1", "pk"]).trim(), "x");
    assert_eq!(r.cli(&["GET", "sealrelay:{r:p1}"]).trim(), "receipt");
    let ttl: i64 = r.cli(&["TTL", "sealrelay:{r:p1}"]).trim().parse().unwrap();
    assert!(ttl > 3500 && ttl <= 3600, "the TTL is kept: {ttl}");
}
