//! Reading what Redis answers: the loose shapes a script or a command replies with (RESP2
//! arrays or RESP3 maps, strings or integers) as the plain values the stores decode.

use std::collections::HashMap;

use fred::prelude::*;

use crate::store::error::StoreError;

/// A string, bytes as UTF-8, or an integer, as text.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

/// [`text`] as an integer.
pub(crate) fn int(v: &Value) -> Option<i64> {
    text(v)?.parse().ok()
}

/// A hash's fields, from a flat array of pairs or a map.
pub(crate) fn pairs(v: &Value) -> HashMap<String, String> {
    let mut out = HashMap::new();
    match v {
        Value::Array(items) => {
            for kv in items.chunks(2) {
                if let [k, v] = kv {
                    if let (Some(k), Some(v)) = (text(k), text(v)) {
                        out.insert(k, v);
                    }
                }
            }
        }
        Value::Map(m) => {
            for (k, v) in m.clone().inner() {
                if let (Some(k), Some(v)) = (k.as_str().map(|s| s.to_string()), text(&v)) {
                    out.insert(k, v);
                }
            }
        }
        _ => {}
    }
    out
}

/// The error for a reply of the wrong shape from `what`.
pub(crate) fn bad(what: &str) -> StoreError {
    StoreError::Redis(format!("unexpected reply from {what}"))
}
