//! A mailbox request's path: `/v1/<app>/mailbox/<id>[/...]` into a [`Route`], or `None`
//! for the relay's one 404 (an unknown app, a malformed id or seq, an unknown path, or the
//! path of an extension the app has not enabled), decided before any authentication.

use super::App;
use crate::store::mailbox::{Dir, Side};

/// The largest seq: 2^53 - 1.
pub const MAX_SEQ: u64 = 9_007_199_254_740_991;

/// What a mailbox path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/v1/<app>/mailbox/<id>`: claim, erase.
    Mailbox,
    /// `.../<dir>`: list, head, prune.
    Dir(Dir),
    /// `.../<dir>/<seq>`: store, get.
    Envelope(Dir, u64),
    /// `.../<dir>/watch`.
    Watch(Dir),
    /// `.../<dir>/push` (apps with `push=`).
    Push(Dir),
    /// `.../signal/<side>` (apps with `signal`).
    Signal(Side),
    /// `.../ice` (apps with `ice`).
    Ice,
}

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

/// The app, the mailbox id and the route of `path`; `None` answers the one 404.
pub fn parse<'a>(path: &'a str, apps: &'a [App]) -> Option<(&'a App, &'a str, Route)> {
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
    let route = match rest.as_slice() {
        [] => Route::Mailbox,
        ["ice"] if app.ice => Route::Ice,
        ["signal", side] if app.signal => Route::Signal(Side::parse(side)?),
        [dir] => Route::Dir(Dir::parse(dir)?),
        [dir, "watch"] => Route::Watch(Dir::parse(dir)?),
        [dir, "push"] if app.push.is_some() => Route::Push(Dir::parse(dir)?),
        [dir, seq] => Route::Envelope(Dir::parse(dir)?, parse_seq(seq)?),
        _ => return None,
    };
    Some((app, id, route))
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

    #[test]
    fn routes() {
        let apps = apps();
        let r = |p: &str| parse(p, &apps).map(|(a, id, r)| (a.name.clone(), id.to_owned(), r));
        let m = |route| Some(("chat".to_owned(), ID.to_owned(), route));
        assert_eq!(r(&format!("/v1/chat/mailbox/{ID}")), m(Route::Mailbox));
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/p2c")),
            m(Route::Dir(Dir::P2c))
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/c2p/42")),
            m(Route::Envelope(Dir::C2p, 42))
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/c2p/watch")),
            m(Route::Watch(Dir::C2p))
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/p2c/push")),
            m(Route::Push(Dir::P2c))
        );
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/signal/primary")),
            m(Route::Signal(Side::Primary))
        );
        assert_eq!(r(&format!("/v1/chat/mailbox/{ID}/ice")), m(Route::Ice));
        assert_eq!(
            r(&format!("/v1/chat/mailbox/{ID}/p2c/9007199254740991")),
            m(Route::Envelope(Dir::P2c, MAX_SEQ))
        );
        for bad in [
            format!("/v1/other/mailbox/{ID}"),
            format!("/v1/chat/box/{ID}"),
            "/v1/chat/mailbox/short".to_owned(),
            format!("/v1/chat/mailbox/{}", "a".repeat(65)),
            format!("/v1/chat/mailbox/{ID}%20"),
            format!("/v1/chat/mailbox/{ID}/x2y"),
            format!("/v1/chat/mailbox/{ID}/p2c/0"),
            format!("/v1/chat/mailbox/{ID}/p2c/007"),
            format!("/v1/chat/mailbox/{ID}/p2c/9007199254740992"),
            format!("/v1/chat/mailbox/{ID}/p2c/-1"),
            format!("/v1/chat/mailbox/{ID}/p2c/1/2"),
            format!("/v1/chat/mailbox/{ID}/"),
            format!("/v1/chat/mailbox/{ID}/signal/both"),
            format!("/v1/notes/mailbox/{ID}/ice"),
            format!("/v1/notes/mailbox/{ID}/signal/primary"),
            format!("/v1/notes/mailbox/{ID}/p2c/push"),
            "/v1/chat".to_owned(),
            "/v2/chat".to_owned(),
        ] {
            assert_eq!(r(&bad), None, "{bad}");
        }
        assert!(parse(&format!("/v1/notes/mailbox/{ID}/p2c/watch"), &apps).is_some());
    }

    proptest! {
        #[test]
        fn no_path_panics(path in "/v1/[a-z/]{0,12}[A-Za-z0-9_/%.-]{0,80}") {
            let _ = parse(&path, &apps());
        }

        #[test]
        fn seqs_round_trip(n in 1u64..=MAX_SEQ) {
            prop_assert_eq!(parse_seq(&n.to_string()), Some(n));
        }
    }
}
