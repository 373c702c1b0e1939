//! The admin API's transports: the Unix socket (`RELAY_ADMIN_SOCKET`), and the opt-in
//! loopback TCP listener (`RELAY_ADMIN_API_LISTEN`) with its bearer token file
//! (`RELAY_ADMIN_TOKEN_FILE`, whose mode and owner are checked here, at start-up).

use std::os::unix::fs::MetadataExt;
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

/// The token in `file`, after checking who may read it: mode 0600 or 0400, owned by the
/// user the relay runs as. The file is opened once, without following a symbolic link, and
/// the checks are made on that open file (`fstat`), so what is read is what was checked:
/// the path cannot be swapped between the check and the read.
fn token(r: &mut Reader<'_>, file: &str) -> Option<Secret> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let name = RELAY_ADMIN_TOKEN_FILE.name;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file);
    let mut handle = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            r.problem(format!(
                "{name}={file:?} is a symbolic link: name the token file itself"
            ));
            return None;
        }
        Err(e) => {
            r.problem(format!("{name}={file:?} cannot be read: {e}"));
            return None;
        }
    };
    let meta = match handle.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(_) => {
            r.problem(format!("{name}={file:?} is not a regular file"));
            return None;
        }
        Err(e) => {
            r.problem(format!("{name}={file:?} cannot be read: {e}"));
            return None;
        }
    };
    let mode = meta.mode() & 0o7777;
    if mode != 0o600 && mode != 0o400 {
        r.problem(format!(
            "{name}={file:?} has mode {mode:04o}: it must be 0600 or 0400 (chmod 600 {file})"
        ));
        return None;
    }
    let me = crate::admin::transport::effective_uid();
    if meta.uid() != me {
        r.problem(format!(
            "{name}={file:?} is owned by uid {}, not by the relay's user (uid {me})",
            meta.uid()
        ));
        return None;
    }
    let mut text = String::new();
    if let Err(e) = handle.read_to_string(&mut text) {
        r.problem(format!("{name}={file:?} cannot be read: {e}"));
        return None;
    }
    let token = text.trim_end_matches(['\n', '\r']);
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if token.chars().count() < MIN_TOKEN_CHARS || !printable {
        r.problem(format!("{name}={file:?} must hold one token of at least {MIN_TOKEN_CHARS} printable characters without spaces (e.g. openssl rand -hex 32 > {file})"));
        return None;
    }
    Some(Secret::new(token))
}
