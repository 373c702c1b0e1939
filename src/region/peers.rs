//! This replica's view of the regions: the settings, the peers (probed up or down), the route
//! of a key, the hop itself (one pooled HTTP/2 client for all peers), and the receiving
//! side's checks ([`Regions::precheck`], [`Regions::verify`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderName, Method, Request, Response, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::wire::{self, Hop, AUTH, CLIENT, HOP, SET};
use super::{auth, home};
use crate::secret::SecretBytes;

/// Failed probes in a row after which a peer is down.
pub(super) const DOWN_AFTER: u32 = 3;

/// The surfaces a hop serves (a metric label).
pub const SURFACES: [&str; 4] = ["v1", "mailbox", "signed", "admin"];
/// How a hop ended (a metric label).
pub const OUTCOMES: [&str; 4] = ["answered", "failed", "refused", "skipped_down"];

/// A peer region: its name and its region listener's origin.
#[derive(Debug, Clone)]
pub struct Peer {
    /// `[a-z0-9-]{1,32}`.
    pub name: String,
    /// `http(s)://host:port`.
    pub url: Uri,
}

/// `RELAY_REGION*`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This region.
    pub name: String,
    /// Every other region.
    pub peers: Vec<Peer>,
    /// The region listener.
    pub listen: SocketAddr,
    /// The hop key.
    pub key: SecretBytes,
    /// The key being retired (accepted, never used to sign).
    pub previous: Option<SecretBytes>,
    /// A hop's whole deadline.
    pub timeout: Duration,
    /// How often each peer is probed.
    pub probe: Duration,
    /// Extra roots for `https://` peers.
    pub ca_file: Option<std::path::PathBuf>,
    /// The region listener's certificate chain and key, when it serves TLS.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// One peer as this replica sees it.
#[derive(Debug)]
pub struct PeerState {
    /// Its name.
    pub name: String,
    pub(super) url: Uri,
    pub(super) up: AtomicBool,
    pub(super) failed_probes: AtomicU32,
}

impl PeerState {
    pub(super) fn set_up(&self, up: bool) {
        let was = self.up.swap(up, Ordering::SeqCst);
        if was != up {
            if up {
                tracing::info!(peer = %self.name, "peer region up");
            } else {
                tracing::warn!(peer = %self.name, "peer region down: no hop is tried until a probe succeeds");
            }
        }
        crate::metrics::region_peer_up(&self.name, up);
    }

    /// Whether the probes find it up.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }
}

/// Where a key is decided.
#[derive(Debug)]
pub enum Route<'a> {
    /// In this region.
    Here,
    /// In a peer that is up: forward.
    Peer(&'a PeerState),
    /// In a peer that is down: no hop is tried.
    Down(&'a PeerState),
}

/// A request as the edge received it, to be sent to its home region.
#[derive(Debug)]
pub struct Outbound<'a> {
    /// Its method.
    pub method: &'a Method,
    /// Its path and query (the authority is the peer's).
    pub uri: &'a Uri,
    /// Its headers (only those the protocols read are sent).
    pub headers: &'a HeaderMap,
    /// The client's address as the edge saw it.
    pub client: IpAddr,
    /// The body, read whole.
    pub body: Bytes,
}

/// What a hop needs of a request whose body is read later: kept by [`Regions::hold`] (only for
/// a request that is not itself a hop), made an [`Outbound`] once the body is in.
#[derive(Debug)]
pub struct Held {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    pub(super) client: IpAddr,
}

impl Held {
    /// The request to send, with its body.
    pub fn with_body(&self, body: Bytes) -> Outbound<'_> {
        Outbound {
            method: &self.method,
            uri: &self.uri,
            headers: &self.headers,
            client: self.client,
            body,
        }
    }
}

/// What [`Regions::relay`] did with a request.
#[derive(Debug)]
pub enum Relay {
    /// Decide it here: this region is its home, or it is a hop.
    Here(axum::extract::Request),
    /// The home's answer, to return as it is.
    Answered(Response<Body>),
    /// The home is down or the hop failed: answer 503 with `Retry-After`.
    Unreachable,
    /// Its body could not be read (answer as the surface answers that).
    Unreadable(crate::body::BodyError),
}

/// Why a hop did not bring an answer back.
#[derive(Debug)]
pub enum HopFailure {
    /// No connection, a timeout, or the home's own 503 `unavailable`.
    Failed(String),
}

type UpgradeClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;
type HopClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// This region and its peers.
pub struct Regions {
    pub(super) name: String,
    pub(super) names: Vec<String>,
    pub(super) digest: String,
    pub(super) keys: auth::Keys,
    pub(super) peers: Vec<PeerState>,
    pub(super) timeout: Duration,
    pub(super) probe: Duration,
    client: HopClient,
    /// HTTP/1.1, for the home's end of a proxied WebSocket (an upgrade takes a connection).
    pub(super) upgrade_client: UpgradeClient,
}

impl std::fmt::Debug for Regions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Regions")
            .field("name", &self.name)
            .field("peers", &self.peers)
            .finish_non_exhaustive()
    }
}

/// Headers of a request that a hop carries (what the protocols read).
const FORWARDED: [HeaderName; 5] = [
    header::CONTENT_TYPE,
    header::AUTHORIZATION,
    header::HeaderName::from_static("x-relay-notify"),
    header::HeaderName::from_static("last-event-id"),
    header::ACCEPT,
];

/// Hop-by-hop headers of an answer, not relayed.
pub(super) const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
];

impl Regions {
    /// From the settings; the peers start down until their first probe.
    pub fn new(settings: &Settings) -> anyhow::Result<Self> {
        let mut names: Vec<String> = settings.peers.iter().map(|p| p.name.clone()).collect();
        names.push(settings.name.clone());
        names.sort();
        let digest = home::set_digest(&names);
        let tls =
            crate::push::tls::client_config(settings.ca_file.as_deref(), "RELAY_REGION_CA_FILE")?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http2()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let upgrade_client = Client::builder(TokioExecutor::new()).build(
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .build(),
        );
        let peers: Vec<PeerState> = settings
            .peers
            .iter()
            .map(|p| PeerState {
                name: p.name.clone(),
                url: p.url.clone(),
                up: AtomicBool::new(false),
                failed_probes: AtomicU32::new(DOWN_AFTER),
            })
            .collect();
        let peer_names: Vec<String> = peers.iter().map(|p| p.name.clone()).collect();
        crate::metrics::register_regions(&peer_names, &SURFACES, &OUTCOMES, &wire::RECEIVED);
        Ok(Self {
            name: settings.name.clone(),
            names,
            digest,
            keys: auth::Keys::new(
                settings.key.expose(),
                settings.previous.as_ref().map(SecretBytes::expose),
            ),
            peers,
            timeout: settings.timeout,
            probe: settings.probe,
            client,
            upgrade_client,
        })
    }

    /// The configured name of the peer called `name`, if there is one.
    pub fn peer_name(&self, name: &str) -> Option<&str> {
        self.peers
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.name.as_str())
    }

    /// Where `key` is decided.
    pub fn route(&self, key: &[u8]) -> Route<'_> {
        let h = home::home(&self.names, key);
        if h == self.name {
            return Route::Here;
        }
        match self.peers.iter().find(|p| p.name == h) {
            Some(p) if p.is_up() => Route::Peer(p),
            Some(p) => Route::Down(p),
            None => Route::Here,
        }
    }

    /// Sends a request to its home `peer` and brings back the answer as it came: status,
    /// headers (hop-by-hop ones apart) and body.
    pub async fn forward(
        &self,
        peer: &PeerState,
        surface: &'static str,
        request: Outbound<'_>,
    ) -> Result<Response<Body>, HopFailure> {
        let Outbound {
            method,
            uri,
            headers,
            client,
            body,
        } = request;
        let started = Instant::now();
        let pq = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let target = format!(
            "{}://{}{pq}",
            peer.url.scheme_str().unwrap_or("http"),
            peer.url.authority().map_or("", |a| a.as_str())
        );
        let now_ms = wall_ms();
        let mut req = Request::builder().method(method.clone()).uri(&target);
        for name in FORWARDED.iter() {
            for v in headers.get_all(name) {
                req = req.header(name, v);
            }
        }
        let sig = self.keys.sign(now_ms, method.as_str(), &pq, &body);
        let req = req
            .header(HOP, &self.name)
            .header(CLIENT, client.to_string())
            .header(SET, &self.digest)
            .header(AUTH, sig)
            .body(Full::new(body))
            .map_err(|e| HopFailure::Failed(format!("request: {e}")))?;
        let sent = tokio::time::timeout(self.timeout, self.client.request(req)).await;
        let resp = match sent {
            Err(_) => {
                crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
                return Err(HopFailure::Failed("timed out".into()));
            }
            Ok(Err(e)) => {
                if e.is_connect() {
                    peer.failed_probes.store(DOWN_AFTER, Ordering::SeqCst);
                    peer.set_up(false);
                }
                crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
                return Err(HopFailure::Failed(format!("{e}")));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        // An event stream is relayed as it flows (its own keep-alives bound it).
        let streaming = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if streaming && status.is_success() {
            crate::metrics::region_hop(&peer.name, surface, "answered", started.elapsed());
            let (mut parts, incoming) = resp.into_parts();
            for h in HOP_BY_HOP {
                parts.headers.remove(h);
            }
            return Ok(Response::from_parts(parts, Body::new(incoming)));
        }
        // The rest of the answer within what is left of the deadline: the protocols' other
        // answers are small.
        let left = self.timeout.saturating_sub(started.elapsed());
        let (mut parts, incoming) = resp.into_parts();
        let bytes =
            match tokio::time::timeout(left, http_body_util::BodyExt::collect(incoming)).await {
                Ok(Ok(c)) => c.to_bytes(),
                _ => {
                    crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
                    return Err(HopFailure::Failed("the answer did not arrive whole".into()));
                }
            };
        // The home could not decide (its store away, or shedding): the hop failed.
        if status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
            crate::metrics::region_hop(&peer.name, surface, "failed", started.elapsed());
            return Err(HopFailure::Failed("home answered 503 unavailable".into()));
        }
        let refused = matches!(status.as_u16(), 401 | 409)
            && parts.headers.contains_key(wire::REFUSAL_HEADER);
        crate::metrics::region_hop(
            &peer.name,
            surface,
            if refused { "refused" } else { "answered" },
            started.elapsed(),
        );
        for h in HOP_BY_HOP {
            parts.headers.remove(h);
        }
        parts.headers.remove(wire::REFUSAL_HEADER);
        Ok(Response::from_parts(parts, Body::from(bytes)))
    }

    /// What a hop of this request would need, kept before its body is read; `None` for a
    /// request that is itself a hop (decided where it lands). `client` is asked only then.
    pub fn hold(
        &self,
        parts: &axum::http::request::Parts,
        client: impl FnOnce() -> IpAddr,
    ) -> Option<Held> {
        if parts.extensions.get::<Hop>().is_some() {
            return None;
        }
        Some(Held {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
            client: client(),
        })
    }

    /// For the surfaces that must not decide a key outside its home (mailboxes, signed
    /// pushes): the request goes to the home (its answer comes back), or stays here when this
    /// region is home (or the request is itself a hop), or the home cannot be reached and the
    /// surface answers 503. The body is read (at most `max_body` bytes, within `deadline`)
    /// only for a request that goes.
    pub async fn relay(
        &self,
        surface: &'static str,
        key: &[u8],
        req: axum::extract::Request,
        max_body: usize,
        deadline: Duration,
    ) -> Relay {
        if req.extensions().get::<Hop>().is_some() {
            return Relay::Here(req);
        }
        let peer = match self.route(key) {
            Route::Here => return Relay::Here(req),
            Route::Down(peer) => {
                crate::metrics::region_hop(&peer.name, surface, "skipped_down", Duration::ZERO);
                return Relay::Unreachable;
            }
            Route::Peer(peer) => peer,
        };
        let (parts, body) = req.into_parts();
        let Some(held) = self.hold(&parts, || peer_address(&parts.extensions)) else {
            return Relay::Here(axum::extract::Request::from_parts(parts, body));
        };
        let req = axum::extract::Request::from_parts(parts, body);
        let body = match crate::body::read(req, max_body, deadline).await {
            Ok(b) => b,
            Err(e) => return Relay::Unreadable(e),
        };
        match self.forward(peer, surface, held.with_body(body)).await {
            Ok(resp) => Relay::Answered(resp),
            Err(HopFailure::Failed(why)) => {
                tracing::warn!(peer = %peer.name, surface, why, "hop to the home region failed");
                Relay::Unreachable
            }
        }
    }

    /// `GET path` at every peer region (an admin read that no key homes: a list, a receipt by
    /// its id): each peer's status and body, or `None` for a peer that is down or whose hop
    /// failed.
    pub async fn ask_every_peer(
        &self,
        surface: &'static str,
        path: &str,
    ) -> Vec<Option<(u16, Bytes)>> {
        let Ok(uri) = path.parse::<Uri>() else {
            return vec![None; self.peers.len()];
        };
        let headers = HeaderMap::new();
        let asks = self.peers.iter().map(|peer| {
            let (uri, headers) = (&uri, &headers);
            async move {
                if !peer.is_up() {
                    crate::metrics::region_hop(&peer.name, surface, "skipped_down", Duration::ZERO);
                    return None;
                }
                let out = Outbound {
                    method: &Method::GET,
                    uri,
                    headers,
                    client: IpAddr::from([127, 0, 0, 1]),
                    body: Bytes::new(),
                };
                let resp = self.forward(peer, surface, out).await.ok()?;
                let status = resp.status().as_u16();
                let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                    .await
                    .ok()?;
                Some((status, body))
            }
        });
        futures_util::future::join_all(asks).await
    }

    /// Probes every peer's `/readyz` every `RELAY_REGION_PROBE_MS` until `stop`.
    pub async fn probe(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.probe);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let probes = self.peers.iter().map(|p| self.probe_one(p));
            futures_util::future::join_all(probes).await;
        }
    }

    async fn probe_one(&self, peer: &PeerState) {
        let uri = format!(
            "{}://{}/readyz",
            peer.url.scheme_str().unwrap_or("http"),
            peer.url.authority().map_or("", |a| a.as_str())
        );
        let ok = match Request::get(&uri).body(Full::new(Bytes::new())) {
            Ok(req) => matches!(
                tokio::time::timeout(self.timeout, self.client.request(req)).await,
                Ok(Ok(r)) if r.status().is_success()
            ),
            Err(_) => false,
        };
        if ok {
            peer.failed_probes.store(0, Ordering::SeqCst);
            peer.set_up(true);
        } else {
            let n = peer.failed_probes.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= DOWN_AFTER {
                peer.set_up(false);
            }
        }
    }

    /// What the receiving side checks before it reads a hop's body: a known sending region
    /// (401), the same region set (409), an authentication header of the right form with a
    /// fresh `t` (401).
    /// Returns the sending region.
    pub fn precheck(&self, headers: &HeaderMap) -> Result<String, wire::Refused> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let from = text(HOP)
            .filter(|f| self.peers.iter().any(|p| p.name == *f))
            .ok_or(wire::Refused::Unauthorized("unknown sending region"))?;
        if text(SET) != Some(self.digest.as_str()) {
            return Err(wire::Refused::SetMismatch(from.to_owned()));
        }
        auth::check_form_and_freshness(text(AUTH), wall_ms())
            .map_err(|r| wire::Refused::Unauthorized(r.as_str()))?;
        Ok(from.to_owned())
    }

    /// The rest of the receiving side's checks, once [`Regions::precheck`] passed and the body
    /// is read: a signature over exactly this request (401). Returns the [`Hop`] mark of
    /// `from` and the client address the hop names.
    pub fn verify(
        &self,
        from: String,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(Hop, Option<IpAddr>), wire::Refused> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        self.keys
            .verify(text(AUTH), wall_ms(), method.as_str(), pq, body)
            .map_err(|r| wire::Refused::Unauthorized(r.as_str()))?;
        let client = text(CLIENT).and_then(|c| c.parse::<IpAddr>().ok());
        Ok((Hop { from }, client))
    }
}

/// The client's address as this replica saw it (unspecified when the transport gave none).
pub(super) fn peer_address(extensions: &axum::http::Extensions) -> IpAddr {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}

/// The wall clock in Unix milliseconds: the hop's freshness is the one place a region reads it
/// (both sides' clocks, within 30 s).
pub(super) fn wall_ms() -> i64 {
    crate::clock::Clock::System.now_ms()
}
