//! A live Cluster reshard under traffic and under open watches: every mailbox's slot moves
//! to another master while envelopes are stored into it through one replica and watched
//! through the other. No write may fail (the client follows `ASK` and `MOVED`, and a
//! `TRYAGAIN` while a script's keys are split is waited out), and every watch hears the
//! writes after the move (the fan-out notices the server's `sunsubscribe` for the moved
//! slot and subscribes again on the new owner).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::replicas::{mailbox_tag, two};
use crate::common::mailbox::*;
use crate::common::*;

/// The contract's wait for a watch: the next `seq` within 5 s.
const WAIT: Duration = Duration::from_secs(5);

/// Reads a watch until it says `seq want` (or later).
async fn heard(ws: &mut Ws, want: u64) -> bool {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match next_text(ws, left).await {
            Some(t) => {
                if let Some(n) = t.strip_prefix("seq ").and_then(|n| n.parse::<u64>().ok()) {
                    if n >= want {
                        return true;
                    }
                }
            }
            None => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_traffic_costs_no_error_and_deafens_no_watch() {
    let cluster = Arc::new(RedisCluster::start());
    let (a, b) = two(&cluster.url()).await;
    let ids: Vec<u32> = (600..606).collect();
    let writers: Vec<Mb> = ids
        .iter()
        .map(|&n| Mb::new(a.addr(), "chat", &mailbox_id(n), &bearer(n)))
        .collect();
    for m in &writers {
        assert_eq!(m.claim().await, 201);
    }
    let mut watches = Vec::new();
    for m in &writers {
        let mut w = m.at(b.addr()).watch("p2c").await;
        assert_eq!(m.put("p2c", 1, b"before").await.status, 201);
        assert!(heard(&mut w, 1).await, "a watch before the reshard");
        watches.push(w);
    }

    // Traffic: each mailbox is written every 60 ms (well inside its bucket) through replica
    // A, and listed through replica B, for as long as the slots move.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic: Vec<_> = writers
        .iter()
        .map(|m| {
            let (m, reader, stop) = (m.at(a.addr()), m.at(b.addr()), stop.clone());
            tokio::spawn(async move {
                let mut seq = 1u64;
                let mut failures = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    seq += 1;
                    let r = m.put("p2c", seq, b"during").await;
                    if r.status != 201 {
                        failures.push(format!("PUT seq {seq}: {} {}", r.status, r.body));
                    }
                    let l = reader.list("p2c", "").await;
                    if l.status != 200 {
                        failures.push(format!("list: {} {}", l.status, l.body));
                    }
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                (seq, failures)
            })
        })
        .collect();

    // Each mailbox's slot moves to the next master, one after another, with 300 ms spent
    // half-way (some keys moved, some not).
    for &n in &ids {
        let tag = mailbox_tag("chat", &mailbox_id(n));
        let (slot, from) = (cluster.slot_of(&tag), cluster.node_of(&tag));
        let moving = cluster.clone();
        tokio::task::spawn_blocking(move || {
            moving.move_slot(slot, (from + 1) % 3, Duration::from_millis(300))
        })
        .await
        .unwrap();
        assert_ne!(cluster.node_of(&tag), from, "the slot moved");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut last = Vec::new();
    for t in traffic {
        let (seq, failures) = t.await.unwrap();
        assert!(failures.is_empty(), "{failures:#?}");
        last.push(seq);
    }

    // Every watch hears a write made after the reshard.
    for ((m, w), seq) in writers.iter().zip(&mut watches).zip(last) {
        assert_eq!(m.put("p2c", seq + 1, b"after").await.status, 201);
        assert!(
            heard(w, seq + 1).await,
            "the watch of {} is deaf after its slot moved",
            m.path("/p2c")
        );
    }
}
