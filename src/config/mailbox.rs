//! The mailbox front-end: `RELAY_APPS` and the mailbox limits (`RELAY_MAILBOX_*`).

use super::reader::Reader;
use super::vars::*;
use crate::mailbox::state::Limits;
use crate::mailbox::{App, Settings, Sockets};

/// An app name: 1 to 32 of `[a-z0-9-]`, starting with a letter.
fn is_app_name(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// An APNs topic (a bundle id): 1 to 255 characters, none whitespace or control.
fn is_topic(s: &str) -> bool {
    (1..=255).contains(&s.chars().count())
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Parses `RELAY_APPS`: `<app>` or `<app>:<option>,...` separated by `;`, options
/// `push=<topic>`, `signal`, `ice`. Every problem, each naming the variable.
pub(crate) fn parse_apps(text: &str) -> Result<Vec<App>, Vec<String>> {
    let mut apps: Vec<App> = Vec::new();
    let mut problems = Vec::new();
    const NAME: &str = RELAY_APPS.name;
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, options) = match entry.split_once(':') {
            Some((n, o)) => (n.trim(), Some(o)),
            None => (entry, None),
        };
        if !is_app_name(name) {
            problems.push(format!("{NAME}: {name:?} is not an app name (1 to 32 of a-z 0-9 -, starting with a letter)"));
            continue;
        }
        if apps.iter().any(|a| a.name == name) {
            problems.push(format!("{NAME}: the app {name:?} is listed twice"));
            continue;
        }
        let mut app = App {
            name: name.to_owned(),
            push: None,
            signal: false,
            ice: false,
        };
        for option in options
            .into_iter()
            .flat_map(|o| o.split(','))
            .map(str::trim)
        {
            match option.split_once('=') {
                Some(("push", topic)) if is_topic(topic) && app.push.is_none() => {
                    app.push = Some(topic.to_owned())
                }
                Some(("push", _)) => problems.push(format!(
                    "{NAME}: app {name:?}: push= takes one APNs topic (the app's bundle id, without spaces)"
                )),
                None if option == "signal" && !app.signal => app.signal = true,
                None if option == "ice" && !app.ice => app.ice = true,
                _ => problems.push(format!(
                    "{NAME}: app {name:?}: {option:?} is not an option (push=<topic>, signal, ice, each once)"
                )),
            }
        }
        apps.push(app);
    }
    if problems.is_empty() {
        Ok(apps)
    } else {
        Err(problems)
    }
}

pub(super) fn read(r: &mut Reader<'_>) -> Settings {
    let apps = match r.set(&RELAY_APPS) {
        None => Vec::new(),
        Some(text) => match parse_apps(&text) {
            Ok(a) => a,
            Err(problems) => {
                for p in problems {
                    r.problem(p);
                }
                Vec::new()
            }
        },
    };
    let idle_ms = r.int(&RELAY_MAILBOX_IDLE_S) as i64 * 1000;
    let max_envelope_bytes = r.int(&RELAY_MAILBOX_MAX_ENVELOPE_BYTES) as usize;
    let max_envelopes = r.int(&RELAY_MAILBOX_MAX_ENVELOPES) as usize;
    let sockets = Sockets {
        per_mailbox: r.int(&RELAY_MAILBOX_MAX_SOCKETS) as usize,
        per_replica: r.int(&RELAY_MAX_SOCKETS) as usize,
        ping: std::time::Duration::from_secs(r.int(&RELAY_SOCKET_PING_S)),
        signal_buffer_bytes: r.int(&RELAY_SIGNAL_BUFFER_BYTES) as usize,
    };
    Settings {
        apps,
        limits: Limits {
            idle_ms,
            max_envelopes,
        },
        max_envelope_bytes,
        sockets,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_apps;

    #[test]
    fn apps_and_their_options() {
        let apps = parse_apps("chat:push=com.example.chat,signal,ice; notes").unwrap();
        assert_eq!(apps.len(), 2);
        assert_eq!(apps[0].name, "chat");
        assert_eq!(apps[0].push.as_deref(), Some("com.example.chat"));
        assert!(apps[0].signal && apps[0].ice);
        assert_eq!(apps[1].name, "notes");
        assert!(apps[1].push.is_none() && !apps[1].signal && !apps[1].ice);
        assert!(parse_apps("").unwrap().is_empty());
    }

    #[test]
    fn mistakes_name_the_variable() {
        for (text, want) in [
            ("chat;chat", "listed twice"),
            ("Chat", "not an app name"),
            ("1chat", "not an app name"),
            (&"a".repeat(33), "not an app name"),
            ("chat:video", "not an option"),
            ("chat:signal,signal", "not an option"),
            ("chat:push=", "push= takes"),
            ("chat:push=a b", "push= takes"),
            ("chat:push=a,push=b", "push= takes"),
        ] {
            let e = parse_apps(text).unwrap_err().join("\n");
            assert!(e.contains("RELAY_APPS") && e.contains(want), "{text}: {e}");
        }
    }
}
