//! Reading a request's key from where its route says (`key = ".."`): the
//! key header, a path parameter, or a JSON pointer into the body (§4.1 of
//! the behaviour contract, `docs/contract.md`).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::options::{KeySource, RouteOptions};
use super::problem::{Problem, ProblemKind};
use super::{Incoming, NotUtf8};
use crate::key::{IdempotencyKey, KeyError};

/// The key as far as it can be read before the body: the key, or the
/// pointer to read it at once the body is in.
pub(super) enum Early {
    Key(IdempotencyKey),
    InBody(&'static str),
}

/// Reads the key from the header or the path (a body key waits); `None`
/// when it is absent and not required.
pub(super) fn read_early(req: &impl Incoming, options: &RouteOptions, route: &str) -> Result<Option<Early>, Problem> {
    match options.key {
        KeySource::Header => from_header(req, options),
        KeySource::Path(name) => from_path(req, name, route).map(Some),
        KeySource::Json(pointer) => Ok(Some(Early::InBody(pointer))),
    }
}

fn from_header(req: &impl Incoming, options: &RouteOptions) -> Result<Option<Early>, Problem> {
    let mut values = req.header_values(options.header);
    let header = || options.header.to_owned();
    let error = match (values.next(), values.next()) {
        (None, _) if !options.required => return Ok(None),
        (None, _) => KeyError::Missing { header: header() },
        (Some(_), Some(_)) => KeyError::Repeated { header: header() },
        (Some(value), None) => match IdempotencyKey::parse(value) {
            Ok(key) => return Ok(Some(Early::Key(key))),
            Err(error) => error,
        },
    };
    let kind = match error {
        KeyError::Missing { .. } => ProblemKind::MissingKey,
        _ => ProblemKind::InvalidKey,
    };
    Err(Problem::new(kind, format!("{error} (header `{}`)", options.header)))
}

fn from_path(req: &impl Incoming, name: &str, route: &str) -> Result<Early, Problem> {
    let Some(value) = req.path_param(name) else {
        // The pattern has no such parameter: the route is misconfigured,
        // whatever the client sends.
        tracing::error!(route = %route, parameter = name, "key = \"path:..\" names a parameter the route does not have");
        let detail = format!(
            "the route {route} reads its idempotency key from the path parameter `{name}`, which its pattern \
             does not have"
        );
        return Err(Problem::new(ProblemKind::NotConfigured, detail));
    };
    // The value as the framework's path extractor gives it to the handler,
    // fully decoded: one id sent as `a+b`, `a%2Bb` or `a%2bb` is one key
    // (the raw path still counts in the fingerprint, so another spelling
    // gets 422, never a second execution).
    let invalid = |detail: String| Problem::new(ProblemKind::InvalidKey, format!("{detail} (path parameter `{name}`)"));
    let decoded = value.map_err(|NotUtf8| invalid("the idempotency key is not UTF-8 once decoded".to_owned()))?;
    IdempotencyKey::natural(&decoded).map(Early::Key).map_err(|error| invalid(error.to_string()))
}

/// Reads the key at `pointer` in a JSON `body`: a string or an integer.
/// `None` when nothing is there and the key is not required.
pub(super) fn from_body(body: &[u8], pointer: &str, required: bool) -> Result<Option<IdempotencyKey>, Problem> {
    let invalid = |what: &str| {
        Problem::new(ProblemKind::InvalidKey, format!("{what} (the key is read from the body at `{pointer}`)"))
    };
    if body.is_empty() && !required {
        return Ok(None);
    }
    let Strict(document) = serde_json::from_slice(body).map_err(|error| {
        let what = if error.is_data() { error.to_string() } else { "the body is not JSON".to_owned() };
        invalid(&what)
    })?;
    let text = match document.pointer(pointer) {
        None | Some(Value::Null) if !required => return Ok(None),
        None | Some(Value::Null) => {
            let detail = format!("the body has no value at `{pointer}`, where this route reads its idempotency key");
            return Err(Problem::new(ProblemKind::MissingKey, detail));
        }
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) if number.is_i64() || number.is_u64() => number.to_string(),
        Some(_) => {
            return Err(invalid("the idempotency key must be a JSON string or an integer (of at most 64 bits)"));
        }
    };
    IdempotencyKey::natural(&text).map(Some).map_err(|error| invalid(&error.to_string()))
}

/// A JSON document whose objects have no member twice. With a duplicate,
/// parsers disagree on which one counts (serde_json keeps the last, others
/// the first): the key could name another event than the one the handler
/// acts on.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::new();
        while let Some(Strict(value)) = seq.next_element()? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = serde_json::Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if members.contains_key(&name) {
                return Err(de::Error::custom(format_args!("the body has the member `{name}` twice")));
            }
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(body: &str, pointer: &str) -> Result<Option<String>, (ProblemKind, String)> {
        from_body(body.as_bytes(), pointer, true)
            .map(|key| key.map(|key| key.as_str().to_owned()))
            .map_err(|problem| (problem.kind, problem.detail.into_owned()))
    }

    #[test]
    fn strings_and_integers_are_keys() {
        assert_eq!(key(r#"{"id":"evt_1"}"#, "/id"), Ok(Some("evt_1".into())));
        assert_eq!(key(r#"{"data":{"object":{"id":42}}}"#, "/data/object/id"), Ok(Some("42".into())));
        assert_eq!(key(r#"{"a/b":{"~":"x"}}"#, "/a~1b/~0"), Ok(Some("x".into())));
        assert_eq!(key(r#"{"n":-7}"#, "/n"), Ok(Some("-7".into())));
    }

    #[test]
    fn anything_else_is_a_400() {
        for (body, pointer) in [
            (r#"{"id":1.5}"#, "/id"),
            (r#"{"id":true}"#, "/id"),
            (r#"{"id":[1]}"#, "/id"),
            (r#"{"id":{"x":1}}"#, "/id"),
            (r#"{"id":""}"#, "/id"),
            (r#"{"id":"a b"}"#, "/id"),
            ("not json", "/id"),
        ] {
            let Err((kind, detail)) = key(body, pointer) else { panic!("{body} must be refused") };
            assert_eq!(kind, ProblemKind::InvalidKey, "{body}: {detail}");
            assert!(detail.contains("`/id`"), "{detail}");
        }
        let Err((_, detail)) = key(r#"{"id":"a","x":{"id":1,"id":2}}"#, "/id") else { panic!("a duplicate") };
        assert!(detail.contains("the member `id` twice"), "{detail}");
        let long = format!(r#"{{"id":"{}"}}"#, "k".repeat(256));
        assert!(matches!(key(&long, "/id"), Err((ProblemKind::InvalidKey, _))));
    }

    #[test]
    fn missing_is_400_when_required_and_none_otherwise() {
        assert!(matches!(from_body(b"", "/id", false), Ok(None)), "an empty body has no key");
        assert!(matches!(key("", "/id"), Err((ProblemKind::InvalidKey, _))));
        for body in [r#"{"other":1}"#, r#"{"id":null}"#] {
            assert!(matches!(key(body, "/id"), Err((ProblemKind::MissingKey, _))), "{body}");
            assert!(matches!(from_body(body.as_bytes(), "/id", false), Ok(None)), "{body}");
        }
    }
}
