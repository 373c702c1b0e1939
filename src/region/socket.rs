//! A mailbox WebSocket homed in another region: the home's upgrade first, then frames copied
//! both ways between the client's socket and the home's.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{header, Request, Response};
use http_body_util::Full;

use super::wire::{self, AUTH, CLIENT, HOP, SET};

use super::peers::{peer_address, wall_ms, PeerState, Regions, DOWN_AFTER, HOP_BY_HOP};

impl Regions {
    /// A WebSocket upgrade homed in `peer`: the home's upgrade first, over its own HTTP/1.1
    /// connection to the peer's region listener (authenticated like any hop); only once the
    /// home has accepted (101) is the client's accepted, with the subprotocol the home chose,
    /// and frames are copied both ways, close codes included. Any other answer of the home
    /// comes back as it is; a home that cannot be reached is `None` (the surface answers 503).
    pub async fn proxy_socket(
        &self,
        peer: &PeerState,
        surface: &'static str,
        req: axum::extract::Request,
    ) -> Option<Response<Body>> {
        use axum::extract::FromRequestParts;
        let started = Instant::now();
        let client = peer_address(req.extensions());
        let (mut parts, _) = req.into_parts();
        let Ok(upgrade) =
            axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await
        else {
            // Not a valid upgrade: the home would refuse it as this replica would.
            return None;
        };
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let mut key = [0u8; 16];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key);
        let mut up = Request::get(format!(
            "{}://{}{pq}",
            peer.url.scheme_str().unwrap_or("http"),
            peer.url.authority().map_or("", |a| a.as_str())
        ))
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_VERSION, "13")
        .header(
            header::SEC_WEBSOCKET_KEY,
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key),
        );
        for name in [header::AUTHORIZATION, header::SEC_WEBSOCKET_PROTOCOL] {
            for v in parts.headers.get_all(&name) {
                up = up.header(&name, v);
            }
        }
        let up = up
            .header(HOP, &self.name)
            .header(CLIENT, client.to_string())
            .header(SET, &self.digest)
            .header(AUTH, self.keys.sign(wall_ms(), "GET", &pq, b""))
            .body(Full::new(Bytes::new()))
            .ok()?;
        let answered = tokio::time::timeout(self.timeout, self.upgrade_client.request(up)).await;
        let resp = match answered {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                if e.is_connect() {
                    peer.failed_probes.store(DOWN_AFTER, Ordering::SeqCst);
                    peer.set_up(false);
                }
                crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
                return None;
            }
            Err(_) => {
                crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
                return None;
            }
        };
        if resp.status() != axum::http::StatusCode::SWITCHING_PROTOCOLS {
            if resp.status() == axum::http::StatusCode::SERVICE_UNAVAILABLE {
                crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
                return None;
            }
            crate::metrics::region_hop(&peer.name, surface, "answered", started.elapsed());
            let (mut parts, incoming) = resp.into_parts();
            let bytes = http_body_util::BodyExt::collect(incoming)
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            for h in HOP_BY_HOP {
                parts.headers.remove(h);
            }
            parts.headers.remove(wire::REFUSAL_HEADER);
            return Some(Response::from_parts(parts, Body::from(bytes)));
        }
        crate::metrics::region_hop(&peer.name, surface, "answered", started.elapsed());
        let protocol = resp
            .headers()
            .get(header::SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let upgraded = match hyper::upgrade::on(resp).await {
            Ok(u) => u,
            Err(_) => return None,
        };
        let home = tokio_tungstenite::WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            tokio_tungstenite::tungstenite::protocol::Role::Client,
            None,
        )
        .await;
        let upgrade = match protocol {
            Some(p) => upgrade.protocols([p]),
            None => upgrade,
        };
        Some(upgrade.on_upgrade(move |client| super::frames::join(client, home)))
    }
}
