//! The admin API's transports: the Unix socket (`RELAY_ADMIN_SOCKET`), and the opt-in
//! loopback TCP listener (`RELAY_ADMIN_API_LISTEN`) with its bearer token file
//! (`RELAY_ADMIN_TOKEN_FILE`, whose mode and owner are checked here, at start-up).

use std::path::PathBuf;

use super::reader::Reader;
use super::vars::*;
use crate::admin::{Settings, SocketSettings, TcpSettings};
use crate::secret::Secret;

/// Longest socket path the kernel takes (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Shortest token accepted: a guessable bearer token would make the listener a door.
const MIN_TOKEN_CHARS: usize = 16;

pub(super) fn read(r: &mut Reader<'_>) -> Settings {
    let explicit = r.given(&RELAY_ADMIN_SOCKET);
    let socket = match r.value(&RELAY_ADMIN_SOCKET).filter(|v| !v.is_empty()) {
        None => None,
        Some(path) if path.len() > MAX_SOCKET_PATH || path.ends_with('/') => {
            r.fail(
                &RELAY_ADMIN_SOCKET,
                &path,
                "a socket path of at most 107 bytes, or empty to disable the socket",
            );
            None
        }
        Some(path) => Some(SocketSettings {
            path: PathBuf::from(path),
            explicit,
        }),
    };
    let listen = r.set(&RELAY_ADMIN_API_LISTEN);
    let token_file = r.set(&RELAY_ADMIN_TOKEN_FILE);
    let tcp = match (listen, token_file) {
        (None, None) => None,
        (None, Some(_)) => {
            r.problem("RELAY_ADMIN_TOKEN_FILE is set but RELAY_ADMIN_API_LISTEN is not: set both to serve the admin API on loopback TCP, or neither".to_owned());
            None
        }
        (Some(addr), None) => {
            r.problem(format!("RELAY_ADMIN_API_LISTEN={addr:?} needs RELAY_ADMIN_TOKEN_FILE: the admin API over TCP takes only requests with its bearer token"));
            None
        }
        (Some(addr_text), Some(file)) => {
            let addr = match addr_text.parse::<std::net::SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => Some(a),
                _ => {
                    r.fail(
                        &RELAY_ADMIN_API_LISTEN,
                        &addr_text,
                        "a loopback address such as 127.0.0.1:9091 or [::1]:9091",
                    );
                    None
                }
            };
            let token = token(r, &file);
            addr.zip(token)
                .map(|(addr, token)| TcpSettings { addr, token })
        }
    };
    Settings { socket, tcp }
}

/// The token in `file`: a secret file ([`Reader::secret_file`]) holding one printable token.
fn token(r: &mut Reader<'_>, file: &str) -> Option<Secret> {
    let name = RELAY_ADMIN_TOKEN_FILE.name;
    let bytes = r.secret_file(&RELAY_ADMIN_TOKEN_FILE, file)?;
    let token = String::from_utf8(bytes).unwrap_or_default();
    let token = token.trim_end_matches(['\n', '\r']);
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if token.chars().count() < MIN_TOKEN_CHARS || !printable {
        r.problem(format!("{name}={file:?} must hold one token of at least {MIN_TOKEN_CHARS} printable characters without spaces (e.g. openssl rand -hex 32 > {file})"));
        return None;
    }
    Some(Secret::new(token))
}
