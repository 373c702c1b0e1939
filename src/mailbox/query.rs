//! A mailbox request's query: its `key=value` pairs decoded as
//! `application/x-www-form-urlencoded` (percent escapes decoded, `+` a space, so
//! `after=1%30` is `after=10`), then read through `serde` into the route's own type. A key
//! given twice, known or not, is 400; a key no route reads is ignored.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::error::MailboxError;
use super::path::parse_seq_or_zero;

/// Envelopes a list answers by default.
pub const LIST_DEFAULT: usize = 64;
/// Envelopes a list answers at most.
pub const LIST_MAX: usize = 256;

/// The query of a request read as `T`; anything it cannot be read as is 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = MailboxError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parse(parts.uri.query().unwrap_or("")).map(Query)
    }
}

/// `raw` (the query without its `?`) read as `T`. The pairs go through a JSON object of
/// strings: every value is text, a missing key reads as `None`, an unknown one is skipped.
pub fn parse<T: DeserializeOwned>(raw: &str) -> Result<T, MailboxError> {
    let mut pairs = Map::new();
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        // Decoded keys are compared: `after=1&%61fter=2` names `after` twice. (Escapes that
        // are not UTF-8 decode to U+FFFD, so two such unknown keys count as the same.)
        if pairs
            .insert(k.into_owned(), Value::String(v.into_owned()))
            .is_some()
        {
            return Err(MailboxError::BadRequest);
        }
    }
    T::deserialize(Value::Object(pairs)).map_err(|_| MailboxError::BadRequest)
}

/// `after` and `upto`: a seq, or 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqOrZero(pub u64);

impl<'de> Deserialize<'de> for SeqOrZero {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_seq_or_zero(&s)
            .map(SeqOrZero)
            .ok_or_else(|| D::Error::custom("not a seq"))
    }
}

/// `limit`: 1 to [`LIST_MAX`], without a leading zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub usize);

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<usize>()
            .ok()
            .filter(|n| (1..=LIST_MAX).contains(n) && !s.starts_with('0'))
            .map(Limit)
            .ok_or_else(|| D::Error::custom("not a limit"))
    }
}

/// A list's query: `after` (default 0) and `limit` (default [`LIST_DEFAULT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct ListQuery {
    after: Option<SeqOrZero>,
    limit: Option<Limit>,
}

impl ListQuery {
    /// The highest seq the client has; the list starts after it.
    pub fn after(&self) -> u64 {
        self.after.map_or(0, |a| a.0)
    }

    /// Envelopes to answer at most.
    pub fn limit(&self) -> usize {
        self.limit.map_or(LIST_DEFAULT, |l| l.0)
    }
}

/// A prune's query: `upto`, required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct PruneQuery {
    upto: SeqOrZero,
}

impl PruneQuery {
    /// Envelopes up to and including this seq go.
    pub fn upto(&self) -> u64 {
        self.upto.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::path::MAX_SEQ;
    use proptest::prelude::*;

    fn list(q: &str) -> Option<(u64, usize)> {
        parse::<ListQuery>(q).ok().map(|l| (l.after(), l.limit()))
    }

    fn upto(q: &str) -> Option<u64> {
        parse::<PruneQuery>(q).ok().map(|p| p.upto())
    }

    #[test]
    fn percent_escapes_are_decoded() {
        assert_eq!(list("after=1%30"), Some((10, LIST_DEFAULT)));
        assert_eq!(list("after=1%30"), list("after=10"));
        assert_eq!(list("%61fter=7&limit=%32"), Some((7, 2)));
        assert_eq!(upto("upto=%31%30"), Some(10));
        // The same key, once escaped: given twice.
        assert_eq!(list("after=1&%61fter=2"), None);
        // `+` is a space, and a space is no digit.
        assert_eq!(list("after=+1"), None);
        assert_eq!(list("after=1%2"), None);
    }

    #[test]
    fn every_row() {
        assert_eq!(list(""), Some((0, LIST_DEFAULT)));
        assert_eq!(list("after=1&limit=2"), Some((1, 2)));
        assert_eq!(list("&&after=0&&"), Some((0, LIST_DEFAULT)));
        assert_eq!(list("limit=256&x=1&y"), Some((0, 256)));
        assert_eq!(list("limit=%2B5"), Some((0, 5)));
        for bad in [
            "limit=0",
            "limit=257",
            "limit=x",
            "limit=05",
            "limit=",
            "limit",
            "after=-1",
            "after=01",
            "after=",
            "after=9007199254740992",
            "limit=1&limit=2",
            "x=1&x=2",
            "x&x",
        ] {
            assert_eq!(list(bad), None, "{bad}");
        }
        assert_eq!(upto("upto=0"), Some(0));
        assert_eq!(upto("upto=10&after=x"), Some(10));
        for bad in [
            "",
            "upto",
            "upto=",
            "upto=x",
            "upto=01",
            "upto=1&upto=1",
            "x=1",
        ] {
            assert_eq!(upto(bad), None, "{bad}");
        }
    }

    /// The reading before percent-decoding: pairs split on `&` and the first `=`.
    fn undecoded(q: &str) -> Option<(u64, usize)> {
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for kv in q.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if seen.iter().any(|(s, _)| *s == k) {
                return None;
            }
            seen.push((k, v));
        }
        let get = |key| seen.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let after = match get("after") {
            None => 0,
            Some(v) => parse_seq_or_zero(v)?,
        };
        let limit = match get("limit") {
            None => LIST_DEFAULT,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=LIST_MAX).contains(n) && !v.starts_with('0'))?,
        };
        Some((after, limit))
    }

    fn escape_all(s: &str) -> String {
        s.bytes().map(|b| format!("%{b:02X}")).collect()
    }

    proptest! {
        #[test]
        fn no_query_panics(q in "[ -~]{0,80}") {
            let _ = parse::<ListQuery>(&q);
            let _ = parse::<PruneQuery>(&q);
        }

        #[test]
        fn without_escapes_as_before(q in "((after|limit|upto|x)(=[0-9a-z]{0,4})?&?){0,5}") {
            prop_assert_eq!(list(&q), undecoded(&q));
        }

        #[test]
        fn escaped_reads_as_plain(after in 0u64..=MAX_SEQ, limit in 1usize..=LIST_MAX) {
            let plain = format!("after={after}&limit={limit}");
            let escaped = format!("{}={}&limit={}", escape_all("after"), escape_all(&after.to_string()), escape_all(&limit.to_string()));
            prop_assert_eq!(list(&escaped), list(&plain));
            prop_assert_eq!(list(&plain), Some((after, limit)));
            let prune = format!("upto={}", escape_all(&after.to_string()));
            prop_assert_eq!(upto(&prune), Some(after));
        }
    }
}
