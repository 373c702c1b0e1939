//! Regions (`RELAY_REGION*`): this region's name, its peers, the region listener and the
//! hop key. Unset `RELAY_REGION` is one region: no other variable of the section may be set
//! then (a half-configured region would silently decide everything locally).

use std::time::Duration;

use super::reader::Reader;
use super::vars::*;
use crate::region::{Peer, Settings};

/// Shortest hop key accepted, in bytes.
const MIN_KEY_BYTES: usize = 32;

/// `[a-z0-9-]`, 1 to 32 characters.
fn region_name(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

pub(super) fn read(r: &mut Reader<'_>) -> Option<Settings> {
    // Checked whether or not RELAY_REGION is set: a bad value is a mistake either way.
    let timeout = Duration::from_millis(r.int(&RELAY_REGION_TIMEOUT_MS));
    let probe = Duration::from_millis(r.int(&RELAY_REGION_PROBE_MS));
    let others = [
        &RELAY_REGION_PEERS,
        &RELAY_REGION_LISTEN,
        &RELAY_REGION_KEY_FILE,
        &RELAY_REGION_KEY_PREVIOUS_FILE,
        &RELAY_REGION_CA_FILE,
        &RELAY_REGION_TLS_CERT_FILE,
        &RELAY_REGION_TLS_KEY_FILE,
    ];
    let Some(name) = r.set(&RELAY_REGION) else {
        for v in others {
            if r.set(v).is_some() {
                r.problem(format!(
                    "{} is set but RELAY_REGION is not: set RELAY_REGION to this region's name, or unset the region variables",
                    v.name
                ));
            }
        }
        return None;
    };
    if !region_name(&name) {
        r.fail(
            &RELAY_REGION,
            &name,
            "1 to 32 of lowercase letters, digits and '-' (eu-west)",
        );
    }
    let peers = peers(r, &name);
    let listen = match r.set(&RELAY_REGION_LISTEN) {
        Some(_) => Some(r.addr(&RELAY_REGION_LISTEN)),
        None => {
            r.problem("RELAY_REGION is set but RELAY_REGION_LISTEN is not: other regions' hops land on the region listener (e.g. 0.0.0.0:9443)".to_owned());
            None
        }
    };
    let current = match r.set(&RELAY_REGION_KEY_FILE) {
        Some(file) => key(r, &RELAY_REGION_KEY_FILE, &file),
        None => {
            r.problem("RELAY_REGION is set but RELAY_REGION_KEY_FILE is not: every hop is authenticated with a shared key of at least 32 bytes (openssl rand -hex 32 > region.key)".to_owned());
            None
        }
    };
    let previous = r
        .set(&RELAY_REGION_KEY_PREVIOUS_FILE)
        .and_then(|file| key(r, &RELAY_REGION_KEY_PREVIOUS_FILE, &file));
    let ca_file = r.ca_file(&RELAY_REGION_CA_FILE);
    let tls = match (
        r.set(&RELAY_REGION_TLS_CERT_FILE),
        r.set(&RELAY_REGION_TLS_KEY_FILE),
    ) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let chain = std::path::PathBuf::from(cert);
            let key = std::path::PathBuf::from(key);
            // Loaded here so a bad file stops start-up with its variable's name.
            match crate::region::listener::server_config(&chain, &key) {
                Ok(_) => Some((chain, key)),
                Err(e) => {
                    r.problem(e.to_string());
                    None
                }
            }
        }
        _ => {
            r.problem("RELAY_REGION_TLS_CERT_FILE and RELAY_REGION_TLS_KEY_FILE go together: set both to serve TLS on the region listener, or neither".to_owned());
            None
        }
    };
    Some(Settings {
        name,
        peers,
        listen: listen?,
        key: current?,
        previous,
        timeout,
        probe,
        ca_file,
        tls,
    })
}

/// `name=url,name=url`: every name valid, none twice, none this region's; each URL http(s)
/// with a host, no user information, no query.
fn peers(r: &mut Reader<'_>, this: &str) -> Vec<Peer> {
    let Some(text) = r.set(&RELAY_REGION_PEERS) else {
        r.problem("RELAY_REGION is set but RELAY_REGION_PEERS is not: name every other region as name=url (us-east=https://relay-internal.us-east.example:9443)".to_owned());
        return Vec::new();
    };
    let name = RELAY_REGION_PEERS.name;
    let mut out: Vec<Peer> = Vec::new();
    for item in text.split(',').map(str::trim) {
        let Some((peer, url)) = item.split_once('=') else {
            r.problem(format!(
                "{name}: {item:?} is not name=url (us-east=https://relay-internal.us-east.example:9443)"
            ));
            continue;
        };
        let (peer, url) = (peer.trim(), url.trim());
        if !region_name(peer) {
            r.problem(format!(
                "{name}: {peer:?} is not a region name (1 to 32 of lowercase letters, digits and '-')"
            ));
            continue;
        }
        if peer == this {
            r.problem(format!(
                "{name}: {peer:?} is this region's own name (RELAY_REGION): list only the others"
            ));
            continue;
        }
        if out.iter().any(|p| p.name == peer) {
            r.problem(format!("{name}: {peer:?} is named twice"));
            continue;
        }
        match peer_url(url) {
            Ok(uri) => out.push(Peer {
                name: peer.to_owned(),
                url: uri,
            }),
            Err(why) => r.problem(format!("{name}: {peer}'s URL {url:?} {why}")),
        }
    }
    if out.is_empty() && !text.trim().is_empty() {
        return out;
    }
    if out.is_empty() {
        r.problem(format!("{name} is empty: name every other region"));
    }
    out
}

/// An `http://` or `https://` URL with a host and nothing after the authority but an
/// optional `/`.
fn peer_url(url: &str) -> Result<axum::http::Uri, &'static str> {
    if super::reader::has_userinfo(url) {
        return Err("carries credentials: hops are authenticated by RELAY_REGION_KEY_FILE");
    }
    let uri: axum::http::Uri = url.parse().map_err(|_| "is not a URL")?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err("is not an http:// or https:// URL"),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("has a path or a query: give the region listener's origin only");
    }
    Ok(uri)
}

fn key(r: &mut Reader<'_>, var: &Var, file: &str) -> Option<crate::secret::SecretBytes> {
    let mut bytes = r.secret_file(var, file)?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    if bytes.len() < MIN_KEY_BYTES {
        r.problem(format!(
            "{}={file:?} holds {} bytes: a hop key needs at least {MIN_KEY_BYTES} (openssl rand -hex 32 > {file})",
            var.name,
            bytes.len()
        ));
        return None;
    }
    Some(crate::secret::SecretBytes::new(bytes))
}
