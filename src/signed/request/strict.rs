//! Steps 1 to 3 of the checks: the body as one JSON value, with duplicate member names
//! detected (serde_json keeps the last one silently).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::error::RequestError;

enum Seg {
    Key(String),
    Index(usize),
}

#[derive(Default)]
struct Ctx {
    /// Where the parse is, for naming a duplicate.
    path: RefCell<Vec<Seg>>,
    /// The first duplicate member found, as a path.
    duplicate: RefCell<Option<String>>,
}

#[derive(Clone, Copy)]
struct ValueSeed<'c> {
    ctx: &'c Ctx,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Value, E> {
        Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.ctx.path.borrow_mut().push(Seg::Index(items.len()));
            let next = seq.next_element_seed(self);
            self.ctx.path.borrow_mut().pop();
            match next? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            self.ctx.path.borrow_mut().push(Seg::Key(key));
            let value = access.next_value_seed(self);
            let key = match self.ctx.path.borrow_mut().pop() {
                Some(Seg::Key(key)) => key,
                _ => return Err(de::Error::custom("path stack out of step")),
            };
            let value = value?;
            if map.contains_key(&key) {
                let mut duplicate = self.ctx.duplicate.borrow_mut();
                if duplicate.is_none() {
                    let mut path = render_path(&self.ctx.path.borrow());
                    push_member(&mut path, &key);
                    *duplicate = Some(path);
                }
            } else {
                map.insert(key, value);
            }
        }
        Ok(Value::Object(map))
    }
}

/// Steps 1 to 3: the body as one JSON value, or the first of: not JSON, not an object, a
/// duplicate member name. A syntax error anywhere wins over a duplicate found before it.
pub(super) fn parse_strict(body: &[u8]) -> Result<Map<String, Value>, RequestError> {
    let not_json = || RequestError::body("body is not valid JSON");
    let ctx = Ctx::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = ValueSeed { ctx: &ctx }
        .deserialize(&mut de)
        .map_err(|_| not_json())?;
    de.end().map_err(|_| not_json())?;
    let Value::Object(object) = value else {
        return Err(RequestError::body("body must be a JSON object"));
    };
    if let Some(path) = ctx.duplicate.into_inner() {
        return Err(RequestError::new(
            path.clone(),
            format!("duplicate member {path}"),
        ));
    }
    Ok(object)
}

/// A member name as messages write it: as is when plain and short, else quoted and cut.
fn simple_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn push_member(path: &mut String, name: &str) {
    if simple_name(name) {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(name);
    } else {
        let mut cut: String = name.chars().take(32).collect();
        if cut.len() < name.len() {
            cut.push('…');
        }
        path.push('[');
        path.push_str(&serde_json::to_string(&cut).unwrap_or_else(|_| "\"?\"".to_owned()));
        path.push(']');
    }
}

fn render_path(segs: &[Seg]) -> String {
    let mut path = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => push_member(&mut path, k),
            Seg::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

pub(super) fn member_path(parent: &str, name: &str) -> String {
    let mut path = parent.to_owned();
    push_member(&mut path, name);
    path
}
