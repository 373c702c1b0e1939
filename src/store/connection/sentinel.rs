//! Sentinel failovers, followed at once.
//!
//! fred finds the primary through the sentinels only when a connection is (re)made, and a
//! `SENTINEL FAILOVER` leaves the old primary up and answering: it is demoted (and its
//! clients killed) only when the sentinels reconfigure it, 8 to 18 s later, and every write
//! it took after the replica's promotion is discarded when it resyncs from the new primary.
//! `tests/it/ops/sentinel.rs` measured 11.5 s on the old primary and 27-35 queued notifications
//! lost of ~550; reconnecting on `+switch-master` alone still lost 27 (the ~1.2 s between
//! the promotion and the announcement). So the store subscribes, on every sentinel of the
//! URL, to the start of a failover (`+try-failover`), its end (`+switch-master`) and its
//! abandonment: from the start until the switch the pool is disconnected (the store
//! degrades, or with `reject` answers 503), then it reconnects until it is on the announced
//! primary. Measured: no accepted alert lost, the relay off Redis for ~0.7-1.3 s.

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::{Server, ServerConfig};
use fred::types::Value;

/// The channels watched: a failover starts, ends in a switch, or is given up.
const TRY: &str = "+try-failover";
const SWITCH: &str = "+switch-master";
const GIVEN_UP: [&str; 5] = [
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
    "-failover-abort-master-is-back",
    "+failover-end-for-timeout",
];
/// At most this long without writes after a sentinel starts a failover, whatever follows.
const PAUSE_AT_MOST: Duration = Duration::from_secs(15);

enum Event {
    /// Sentinel `i` is failing the primary over.
    Try(usize),
    /// Sentinel `i` gave its failover up.
    GivenUp(usize),
    /// The primary is now this server.
    Switch(Server),
}

/// Watches the sentinels of `config` (a no-op for other deployments) and keeps `pool` on the
/// primary they announce.
pub(super) fn watch(config: &Config, pool: &Pool) {
    let ServerConfig::Sentinel {
        hosts,
        service_name,
        ..
    } = &config.server
    else {
        return;
    };
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, host) in hosts.iter().enumerate() {
        // The sentinels take the credentials fred itself gives them (no `sentinel-auth`).
        let sub_config = Config {
            server: ServerConfig::Centralized {
                server: host.clone(),
            },
            username: config.username.clone(),
            password: config.password.clone(),
            tls: config.tls.clone(),
            fail_fast: false,
            ..Config::default()
        };
        let sub = match Builder::from_config(sub_config)
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(2);
                c.internal_command_timeout = Duration::from_secs(2);
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_subscriber_client()
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(sentinel = %host, error = %e.details(), "cannot watch this sentinel");
                continue;
            }
        };
        let service = service_name.to_string();
        let events = events_tx.clone();
        let host = host.clone();
        tokio::spawn(async move {
            let mut messages = sub.message_rx();
            drop(sub.connect());
            let _resubscribe = sub.manage_subscriptions();
            let mut channels = vec![TRY, SWITCH];
            channels.extend(GIVEN_UP);
            loop {
                if sub.wait_for_connect().await.is_ok()
                    && sub.subscribe(channels.clone()).await.is_ok()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            while let Ok(m) = messages.recv().await {
                let text = match &m.value {
                    Value::String(s) => s.to_string(),
                    Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => continue,
                };
                let f: Vec<&str> = text.split_whitespace().collect();
                let event = match &*m.channel {
                    // <service> <old ip> <old port> <new ip> <new port>
                    SWITCH if f.len() == 5 && f[0] == service => {
                        let Ok(port) = f[4].parse::<u16>() else {
                            continue;
                        };
                        tracing::warn!(sentinel = %host, from = %format!("{}:{}", f[1], f[2]), to = %format!("{}:{port}", f[3]), "Sentinel switched the primary; reconnecting to it");
                        Event::Switch(Server::new(f[3], port))
                    }
                    // master <service> <ip> <port>
                    TRY if f.len() >= 2 && f[0] == "master" && f[1] == service => {
                        tracing::warn!(sentinel = %host, "Sentinel is failing the primary over; no writes to it until it is done (degraded meanwhile)");
                        Event::Try(i)
                    }
                    c if GIVEN_UP.contains(&c) && f.len() >= 2 && f[1] == service => {
                        tracing::warn!(sentinel = %host, event = c, "Sentinel gave the failover up");
                        Event::GivenUp(i)
                    }
                    _ => continue,
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        });
    }
    tokio::spawn(follow(pool.clone(), events_rx));
}

/// Follows the failovers the sentinels announce.
///
/// - When one starts, the pool disconnects: writes the old primary took from now on would
///   be discarded when it is demoted (it no longer replicates to the replica being
///   promoted), so they fail instead, and the store degrades to its in-process state (or,
///   with `reject`, answers 503) until the switch.
/// - When the primary switched, the pool connects again, and reconnects until every
///   connection is on the announced address: a sentinel asked meanwhile may not have
///   switched yet (they learn from each other within a couple of seconds).
/// - When every failover under way was given up, or after [`PAUSE_AT_MOST`], the pool
///   connects to whatever primary the sentinels name.
async fn follow(pool: Pool, mut events: tokio::sync::mpsc::UnboundedReceiver<Event>) {
    let mut trying = std::collections::HashSet::new();
    let mut paused_until: Option<tokio::time::Instant> = None;
    loop {
        let event = match paused_until {
            Some(until) => match tokio::time::timeout_at(until, events.recv()).await {
                Ok(e) => e,
                Err(_) => {
                    tracing::warn!("no primary switch announced in time; reconnecting");
                    trying.clear();
                    paused_until = None;
                    let _ = pool.connect_pool();
                    continue;
                }
            },
            None => events.recv().await,
        };
        let Some(event) = event else { return };
        match event {
            Event::Try(i) => {
                trying.insert(i);
                if paused_until.is_none() {
                    paused_until = Some(tokio::time::Instant::now() + PAUSE_AT_MOST);
                    let _ = pool.quit().await;
                }
            }
            Event::GivenUp(i) => {
                trying.remove(&i);
                if trying.is_empty() && paused_until.take().is_some() {
                    let _ = pool.connect_pool();
                }
            }
            Event::Switch(want) => {
                trying.clear();
                if paused_until.take().is_some() {
                    let _ = pool.connect_pool();
                    let _ =
                        tokio::time::timeout(Duration::from_secs(3), pool.wait_for_connect()).await;
                }
                for _ in 0..20 {
                    let on = pool.active_connections();
                    if on.len() >= pool.size()
                        && on
                            .iter()
                            .all(|s| s.host == want.host && s.port == want.port)
                    {
                        break;
                    }
                    let _ = tokio::time::timeout(Duration::from_secs(3), pool.force_reconnection())
                        .await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}
