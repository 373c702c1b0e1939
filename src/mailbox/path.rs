//! A mailbox request's path: `/v1/<app>/mailbox/<id>[/...]`. The router picks the handler
//! by the path's shape; [`read`] then checks its raw segments (not percent-decoded, so `%61`
//! is not `a`) into a [`Target`], or `None` for the relay's one 404 (an unknown app, a
//! malformed id or seq, an unknown path, or the path of an extension the app has not
//! enabled), decided before the method and any authentication.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::MailboxError;
use super::front::{App, Mailboxes};
use super::state::{Dir, Name, Side};

/// The largest seq: 2^53 - 1.
pub const MAX_SEQ: u64 = 9_007_199_254_740_991;

/// `<id>`: 16 to 64 of `[A-Za-z0-9_-]`.
pub fn is_mailbox_id(s: &str) -> bool {
    (16..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A decimal from 1 to 2^53 - 1 without leading zeros.
pub fn parse_seq(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok().filter(|n| (1..=MAX_SEQ).contains(n))
}

/// A query value that is a seq or 0 (`after`, `upto`).
pub fn parse_seq_or_zero(s: &str) -> Option<u64> {
    if s == "0" {
        Some(0)
    } else {
        parse_seq(s)
    }
}

/// What a path names past `/v1/<app>/mailbox/<id>`, one type per shape of path.
pub trait Place: Sized + Clone + Send + Sync + 'static {
    /// The place the raw segments after `<id>` name for `app`; `None`: the one 404.
    fn read(app: &App, rest: &[&str]) -> Option<Self>;
}

/// `/v1/<app>/mailbox/<id>`: claim, erase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole;

/// `.../<dir>`: list, head, prune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Direction(pub Dir);

/// `.../<dir>/<seq>`: store, get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope(pub Dir, pub u64);

/// `.../<dir>/watch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch(pub Dir);

/// `.../<dir>/push` (apps with `push=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Push(pub Dir);

/// `.../signal/<side>` (apps with `signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub Side);

/// `.../ice` (apps with `ice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ice;

impl Place for Whole {
    fn read(_: &App, rest: &[&str]) -> Option<Self> {
        rest.is_empty().then_some(Whole)
    }
}

impl Place for Direction {
    fn read(_: &App, rest: &[&str]) -> Option<Self> {
        match rest {
            [dir] => Some(Direction(Dir::parse(dir)?)),
            _ => None,
        }
    }
}

impl Place for Envelope {
    fn read(_: &App, rest: &[&str]) -> Option<Self> {
        match rest {
            [dir, seq] => Some(Envelope(Dir::parse(dir)?, parse_seq(seq)?)),
            _ => None,
        }
    }
}

impl Place for Watch {
    fn read(_: &App, rest: &[&str]) -> Option<Self> {
        match rest {
            [dir, "watch"] => Some(Watch(Dir::parse(dir)?)),
            _ => None,
        }
    }
}

impl Place for Push {
    fn read(app: &App, rest: &[&str]) -> Option<Self> {
        match rest {
            [dir, "push"] if app.push.is_some() => Some(Push(Dir::parse(dir)?)),
            _ => None,
        }
    }
}

impl Place for Signal {
    fn read(app: &App, rest: &[&str]) -> Option<Self> {
        match rest {
            ["signal", side] if app.signal => Some(Signal(Side::parse(side)?)),
            _ => None,
        }
    }
}

impl Place for Ice {
    fn read(app: &App, rest: &[&str]) -> Option<Self> {
        (app.ice && rest == ["ice"]).then_some(Ice)
    }
}

/// A checked mailbox path: the app, the mailbox id, its stored name and the place.
#[derive(Debug, Clone)]
pub struct Target<P> {
    /// The app served.
    pub app: App,
    /// The mailbox id, as in the path.
    pub id: String,
    /// The mailbox's name in the store.
    pub name: Name,
    /// What the path names past the mailbox.
    pub place: P,
}

/// `path` as a `P` of one of `apps`; `None` answers the one 404.
pub fn read<P: Place>(path: &str, apps: &[App]) -> Option<Target<P>> {
    let rest = path.strip_prefix("/v1/")?;
    let mut parts = rest.split('/');
    let app = parts.next()?;
    let app = apps.iter().find(|a| a.name == app)?;
    if parts.next()? != "mailbox" {
        return None;
    }
    let id = parts.next()?;
    if !is_mailbox_id(id) {
        return None;
    }
    let rest: Vec<&str> = parts.collect();
    let place = P::read(app, &rest)?;
    Some(Target {
        app: app.clone(),
        id: id.to_owned(),
        name: Name::of(&app.name, id),
        place,
    })
}

/// The target the router's check left on the request (read again if it is not there).
impl<P: Place> FromRequestParts<Arc<Mailboxes>> for Target<P> {
    type Rejection = MailboxError;

    async fn from_request_parts(
        parts: &mut Parts,
        m: &Arc<Mailboxes>,
    ) -> Result<Self, Self::Rejection> {
        match parts.extensions.remove::<Target<P>>() {
            Some(t) => Ok(t),
            None => read(parts.uri.path(), &m.settings.apps).ok_or(MailboxError::NotFound),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn apps() -> Vec<App> {
        vec![
            App {
                name: "chat".into(),
                push: Some("com.example.chat".into()),
                signal: true,
                ice: true,
            },
            App {
                name: "notes".into(),
                push: None,
                signal: false,
                ice: false,
            },
        ]
    }

    const ID: &str = "abcdefghijklmnop";

    /// Every place `path` reads as, by name.
    fn places(path: &str, apps: &[App]) -> Vec<String> {
        fn one<P: Place + std::fmt::Debug>(path: &str, apps: &[App], out: &mut Vec<String>) {
            if let Some(t) = read::<P>(path, apps) {
                out.push(format!("{}/{}: {:?}", t.app.name, t.id, t.place));
            }
        }
        let mut out = Vec::new();
        one::<Whole>(path, apps, &mut out);
        one::<Direction>(path, apps, &mut out);
        one::<Envelope>(path, apps, &mut out);
        one::<Watch>(path, apps, &mut out);
        one::<Push>(path, apps, &mut out);
        one::<Signal>(path, apps, &mut out);
        one::<Ice>(path, apps, &mut out);
        out
    }

    #[test]
    fn routes() {
        let apps = apps();
        let r = |p: &str| places(p, &apps);
        let m = |place: &str| vec![format!("chat/{ID}: {place}")];
        assert_eq!(r(&format!("/v1/chat/mailbox/{ID}")), m("Whole"));
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/p2c")),
            m("Direction(P2c)")
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/c2p/42")),
            m("Envelope(C2p, 42)")
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/c2p/watch")),
            m("Watch(C2p)")
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/p2c/push")),
            m("Push(P2c)")
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/signal/primary")),
            m("Signal(Primary)")
        );
        assert_eq!(r(&format!("/v1/chat/mailbox/{ID}/ice")), m("Ice"));
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/p2c/9007199254740991")),
            m("Envelope(P2c, 9007199254740991)")
        );
        assert_eq!(
            read::<Whole>(&format!("/v1/chat/mailbox/{ID}"), &apps).map(|t| t.name),
            Some(Name::of("chat", ID))
        );
        for bad in [
            format!("/v1/other/mailbox/{ID}"),
            format!("/v1/chat/box/{ID}"),
            "/v1/chat/mailbox/short".to_owned(),
            format!("/v1/chat/mailbox/{}", "a".repeat(65)),
            format!("/v1/chat/mailbox/{ID}%20"),
            format!("/v1/chat/mailbox/%61{}", &ID[1..]),
            format!("/v1/chat/mailbox/{ID}/x2y"),
            format!("/v1/chat/mailbox/{ID}/p2c/0"),
            format!("/v1/chat/mailbox/{ID}/p2c/007"),
            format!("/v1/chat/mailbox/{ID}/p2c/9007199254740992"),
            format!("/v1/chat/mailbox/{ID}/p2c/-1"),
            format!("/v1/chat/mailbox/{ID}/p2c/%31"),
            format!("/v1/chat/mailbox/{ID}/p2c/1/2"),
            format!("/v1/chat/mailbox/{ID}/"),
            format!("/v1/chat/mailbox/{ID}/signal/both"),
            format!("/v1/chat/mailbox/{ID}/signal/watch"),
            format!("/v1/notes/mailbox/{ID}/ice"),
            format!("/v1/notes/mailbox/{ID}/signal/primary"),
            format!("/v1/notes/mailbox/{ID}/p2c/push"),
            "/v1/chat".to_owned(),
            "/v2/chat".to_owned(),
        ] {
            assert_eq!(r(&bad), Vec::<String>::new(), "{bad}");
        }
        assert_eq!(
            places(&format!("/v1/notes/mailbox/{ID}/p2c/watch"), &apps),
            vec![format!("notes/{ID}: Watch(P2c)")]
        );
    }

    proptest! {
        #[test]
        fn no_path_panics_and_no_path_is_two_places(path in "/v1/[a-z/]{0,12}[A-Za-z0-9_/%.-]{0,80}") {
            prop_assert!(places(&path, &apps()).len() <= 1);
        }

        #[test]
        fn seqs_round_trip(n in 1u64..=MAX_SEQ) {
            prop_assert_eq!(parse_seq(&n.to_string()), Some(n));
        }
    }
}
