//! Reading a request's key from where its route says (`key = ".."`): the
//! key header, a path parameter, a JSON pointer into the body, several of
//! them joined, or the route's key function (§4.1 and §16 of the behaviour
//! contract, `docs/contract.md`).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::key_request::{ComputedKey, KeyRequest};
use super::options::{KeyPart, KeySource, RouteOptions};
use super::problem::{Problem, ProblemKind};
use super::{Incoming, NotUtf8};
use crate::key::{IdempotencyKey, KeyError};

/// The key as far as it can be read before the body: the key, or what
/// reads it once the body is in.
pub(super) enum Early {
    Key(IdempotencyKey),
    Late(Late),
}

/// A key that needs the body.
pub(super) enum Late {
    /// At a JSON pointer.
    Json(&'static str),
    /// Made of parts, those from the header and the path already read, the
    /// body's (`None` here) to come.
    Composite(&'static [KeyPart], Vec<Option<IdempotencyKey>>),
    /// Computed by the route's key function.
    Computed(ComputedKey),
}

/// Reads the key from the header or the path (what needs the body waits);
/// `None` when it is absent and not required.
pub(super) fn read_early(req: &impl Incoming, options: &RouteOptions, route: &str) -> Result<Option<Early>, Problem> {
    let key = match options.key {
        KeySource::Header => from_header(req, options)?,
        KeySource::Path(name) => Some(from_path(req, name, route)?),
        KeySource::Json(pointer) => return Ok(Some(Early::Late(Late::Json(pointer)))),
        KeySource::Computed(function) => return Ok(Some(Early::Late(Late::Computed(function)))),
        KeySource::Composite(parts) => {
            let mut read = Vec::with_capacity(parts.len());
            for part in parts {
                read.push(match part {
                    KeyPart::Header => from_header(req, options)?,
                    KeyPart::Path(name) => Some(from_path(req, name, route)?),
                    KeyPart::Json(_) => None,
                });
            }
            if parts.iter().any(|part| matches!(part, KeyPart::Json(_))) {
                return Ok(Some(Early::Late(Late::Composite(parts, read))));
            }
            composite(parts, read, options.header)?
        }
    };
    Ok(key.map(Early::Key))
}

/// Reads a key that needs the body, once it is in; `None` when it is
/// absent and not required.
pub(super) fn read_late<R: Incoming>(
    late: Late,
    req: &R,
    body: &[u8],
    required: bool,
    header: &str,
) -> Result<Option<IdempotencyKey>, Problem> {
    match late {
        Late::Json(pointer) => from_body(body, pointer, required),
        Late::Composite(parts, mut read) => {
            // An empty body has none of the key's parts (when they are not
            // required: else, the first one's absence is the error).
            if !body.is_empty() || required {
                let mut document = None;
                for (part, slot) in parts.iter().zip(&mut read) {
                    let KeyPart::Json(pointer) = part else { continue };
                    let document = match &mut document {
                        Some(document) => document,
                        None => document.insert(body_document(body, pointer)?),
                    };
                    *slot = at_pointer(document, pointer, required)?;
                }
            }
            composite(parts, read, header)
        }
        Late::Computed(function) => computed(function, req, body, required),
    }
}

/// The key of a composite's parts as read (`None`: absent, which only a
/// key that is not required may be). No part the client sends (the header,
/// the body's) is no key; some of them without the others is a missing key,
/// never a request run without one: a client that sent its key header
/// expects its retries to be recognized.
fn composite(
    parts: &[KeyPart],
    read: Vec<Option<IdempotencyKey>>,
    header: &str,
) -> Result<Option<IdempotencyKey>, Problem> {
    let sent = |part: &KeyPart| !matches!(part, KeyPart::Path(_));
    let absent: Vec<&KeyPart> =
        parts.iter().zip(&read).filter(|(_, key)| key.is_none()).map(|(part, _)| part).collect();
    if absent.is_empty() {
        return Ok(Some(IdempotencyKey::joined(&read.into_iter().flatten().collect::<Vec<_>>())));
    }
    if parts.iter().zip(&read).all(|(part, key)| !sent(part) || key.is_none()) {
        return Ok(None);
    }
    let named: Vec<String> = absent
        .iter()
        .map(|part| match part {
            KeyPart::Header => format!("the header `{header}`"),
            KeyPart::Path(name) => format!("the path parameter `{name}`"),
            KeyPart::Json(pointer) => format!("the body's `{pointer}`"),
        })
        .collect();
    let detail = format!(
        "the request has part of this route's idempotency key but not {}: send every part, or none",
        named.join(" nor ")
    );
    Err(Problem::new(ProblemKind::MissingKey, detail))
}

/// The key the route's key function makes of a request.
fn computed(
    function: ComputedKey,
    req: &impl Incoming,
    body: &[u8],
    required: bool,
) -> Result<Option<IdempotencyKey>, Problem> {
    let request = KeyRequest::new(req, body);
    // A panic in the application's function is its bug, answered before
    // anything is claimed, never a lost request or a dead worker.
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (function.compute)(&request)));
    let made = match made {
        Ok(made) => made,
        Err(_) => {
            tracing::error!(function = function.name, "the route's key function panicked; nothing was claimed");
            let detail = format!("the key function `{}` panicked on this request; nothing ran", function.name);
            return Err(Problem::new(ProblemKind::HandlerPanicked, detail));
        }
    };
    match made.and_then(IdempotencyKey::computed) {
        Some(key) => Ok(Some(key)),
        // Whatever `required` says: the key may be in the header it could
        // not read, and a request its client keyed never runs without.
        None if let Some(header) = request.repeated_header() => {
            let detail = format!(
                "this route computes its idempotency key from the request (with `{}`), which has the header \
                 `{header}` more than once",
                function.name
            );
            Err(Problem::new(ProblemKind::InvalidKey, detail))
        }
        None if !required => Ok(None),
        None => {
            let detail = format!(
                "this route computes its idempotency key from the request (with `{}`), and this request has none",
                function.name
            );
            Err(Problem::new(ProblemKind::MissingKey, detail))
        }
    }
}

fn from_header(req: &impl Incoming, options: &RouteOptions) -> Result<Option<IdempotencyKey>, Problem> {
    let mut values = req.header_values(options.header);
    let header = || options.header.to_owned();
    let error = match (values.next(), values.next()) {
        (None, _) if !options.required => return Ok(None),
        (None, _) => KeyError::Missing { header: header() },
        (Some(_), Some(_)) => KeyError::Repeated { header: header() },
        (Some(value), None) => match IdempotencyKey::parse(value) {
            Ok(key) => return Ok(Some(key)),
            Err(error) => error,
        },
    };
    let kind = match error {
        KeyError::Missing { .. } => ProblemKind::MissingKey,
        _ => ProblemKind::InvalidKey,
    };
    Err(Problem::new(kind, format!("{error} (header `{}`)", options.header)))
}

fn from_path(req: &impl Incoming, name: &str, route: &str) -> Result<IdempotencyKey, Problem> {
    let Some(value) = req.path_param(name) else {
        // The pattern has no such parameter: the route is misconfigured,
        // whatever the client sends.
        tracing::error!(route = %route, parameter = name, "the key names a path parameter the route does not have");
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
    IdempotencyKey::natural(&decoded).map_err(|error| invalid(error.to_string()))
}

/// Reads the key at `pointer` in a JSON `body`: a string or an integer.
/// `None` when nothing is there and the key is not required.
pub(super) fn from_body(body: &[u8], pointer: &str, required: bool) -> Result<Option<IdempotencyKey>, Problem> {
    if body.is_empty() && !required {
        return Ok(None);
    }
    at_pointer(&body_document(body, pointer)?, pointer, required)
}

fn invalid_in_body(what: &str, pointer: &str) -> Problem {
    Problem::new(ProblemKind::InvalidKey, format!("{what} (the key is read from the body at `{pointer}`)"))
}

/// The body as one JSON document, for the key at `pointer`.
fn body_document(body: &[u8], pointer: &str) -> Result<Value, Problem> {
    let Strict(document) = serde_json::from_slice(body).map_err(|error| {
        let what = if error.is_data() { error.to_string() } else { "the body is not JSON".to_owned() };
        invalid_in_body(&what, pointer)
    })?;
    Ok(document)
}

/// The key at `pointer` in `document`: a string or an integer.
fn at_pointer(document: &Value, pointer: &str, required: bool) -> Result<Option<IdempotencyKey>, Problem> {
    let text = match document.pointer(pointer) {
        None | Some(Value::Null) if !required => return Ok(None),
        None | Some(Value::Null) => {
            let detail = format!("the body has no value at `{pointer}`, where this route reads its idempotency key");
            return Err(Problem::new(ProblemKind::MissingKey, detail));
        }
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) if number.is_i64() || number.is_u64() => number.to_string(),
        Some(_) => {
            let what = "the idempotency key must be a JSON string or an integer (of at most 64 bits)";
            return Err(invalid_in_body(what, pointer));
        }
    };
    IdempotencyKey::natural(&text).map(Some).map_err(|error| invalid_in_body(&error.to_string(), pointer))
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
