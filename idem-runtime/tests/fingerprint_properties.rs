//! Fingerprint properties over random requests (§4.4 of the contract): a
//! client that re-serializes the same JSON (another member order, other
//! whitespace, other escapes: `\u00e9` for `é`, `\/` for `/`) sends the same
//! request; a change to any one part (method, path, query, a fingerprint
//! header, a body value, the media type) makes another one.

use idem_runtime::store::{Fingerprint, RequestParts};
use proptest::prelude::*;
use serde_json::Value;

/// A small deterministic generator, seeded by proptest: the choices of
/// one way of writing a document.
struct Choices(u64);

impl Choices {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % below
    }
}

/// `value` written as another client might: members shuffled, whitespace
/// anywhere JSON allows it, every character of every string escaped one of
/// the ways JSON allows, numbers as serde_json writes them.
fn rewritten(value: &Value, choices: &mut Choices, out: &mut String) {
    let space =
        |choices: &mut Choices, out: &mut String| out.push_str(["", " ", "\n", "\t", "\r\n  "][choices.next(5)]);
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            for i in (1..members.len()).rev() {
                members.swap(i, choices.next(i + 1));
            }
            out.push('{');
            for (index, (name, value)) in members.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                space(choices, out);
                string(name, choices, out);
                space(choices, out);
                out.push(':');
                space(choices, out);
                rewritten(value, choices, out);
                space(choices, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            space(choices, out);
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                    space(choices, out);
                }
                rewritten(item, choices, out);
            }
            space(choices, out);
            out.push(']');
        }
        Value::String(text) => string(text, choices, out),
        other => out.push_str(&serde_json::to_string(other).expect("a JSON scalar")),
    }
}

fn string(text: &str, choices: &mut Choices, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        let raw_allowed = c != '"' && c != '\\' && c >= ' ';
        match (choices.next(3), short) {
            (0, _) if raw_allowed => out.push(c),
            (1, Some(short)) => out.push_str(short),
            _ => {
                let mut units = [0; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// Strings with what clients escape differently: accents, slashes,
/// quotes, backslashes, controls, line separators, astral characters.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zé/\"\\\\\n\t\u{0}\u{1f}\u{7f}\u{2028}😀€ ]{0,8}").expect("a valid regex")
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(|n| serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// The parts of a request, owned.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    query: String,
    account: Vec<Vec<u8>>,
    content_type: String,
    body: Value,
}

impl Request {
    fn fingerprint(&self, body: &[u8]) -> Fingerprint {
        let account: Vec<&[u8]> = self.account.iter().map(Vec::as_slice).collect();
        Fingerprint::of(&RequestParts {
            method: &self.method,
            path: &self.path,
            query: &self.query,
            headers: &[("x-account-id", account)],
            host: None,
            content_type: Some(&self.content_type),
            body,
        })
    }

    fn compact(&self) -> Fingerprint {
        self.fingerprint(serde_json::to_string(&self.body).expect("JSON").as_bytes())
    }
}

fn request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![Just("POST"), Just("PUT"), Just("PATCH"), Just("DELETE")],
        "/[a-z0-9/%]{0,12}",
        "[a-z0-9=&%+]{0,12}",
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..4), 0..3),
        prop_oneof![
            Just("application/json"),
            Just("application/json; charset=utf-8"),
            Just("Application/JSON"),
            Just("application/merge-patch+json"),
            Just("application/vnd.api+json"),
        ],
        json(),
    )
        .prop_map(|(method, path, query, account, content_type, body)| Request {
            method: method.to_owned(),
            path,
            query,
            account,
            content_type: content_type.to_owned(),
            body,
        })
}

/// One part of a request changed, so that it is another request.
#[derive(Debug, Clone, Copy)]
enum Change {
    Method,
    Path,
    Query,
    Header,
    BodyValue,
    MediaType,
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::Method),
        Just(Change::Path),
        Just(Change::Query),
        Just(Change::Header),
        Just(Change::BodyValue),
        Just(Change::MediaType),
    ]
}

impl Change {
    fn apply(self, request: &mut Request, choices: &mut Choices) {
        match self {
            Change::Method => request.method = if request.method == "POST" { "PUT" } else { "POST" }.to_owned(),
            Change::Path => request.path.push(['x', '/', '%'][choices.next(3)]),
            Change::Query => request.query.push(['a', '=', '&'][choices.next(3)]),
            Change::Header => match request.account.last_mut() {
                Some(value) if choices.next(2) == 0 => value.push(b'x'),
                _ => request.account.push(Vec::new()),
            },
            Change::BodyValue => change_a_value(&mut request.body, choices),
            Change::MediaType => {
                request.content_type = if request.content_type.to_ascii_lowercase().starts_with("application/json") {
                    "application/merge-patch+json".to_owned()
                } else {
                    "application/json".to_owned()
                };
            }
        }
    }
}

/// Changes one value somewhere in `value` (or adds one to an empty
/// container) so that the document means something else.
fn change_a_value(value: &mut Value, choices: &mut Choices) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let index = choices.next(map.len());
            let (_, member) = map.iter_mut().nth(index).expect("an index below the length");
            change_a_value(member, choices);
        }
        Value::Object(map) => {
            map.insert(String::new(), Value::Null);
        }
        Value::Array(items) if !items.is_empty() => {
            let index = choices.next(items.len());
            change_a_value(&mut items[index], choices);
        }
        Value::Array(items) => items.push(Value::Null),
        Value::Null => *value = Value::Bool(false),
        Value::Bool(flag) => *flag = !*flag,
        Value::Number(number) => {
            *value = match number.as_i64() {
                Some(n) => Value::from(n.wrapping_add(1)),
                None => Value::String(number.to_string()),
            }
        }
        Value::String(text) => text.push('é'),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The same request, its JSON written another way, has the same
    /// fingerprint.
    #[test]
    fn a_reserialized_json_body_fingerprints_equal(request in request(), seed in any::<u64>()) {
        let mut written = String::new();
        rewritten(&request.body, &mut Choices(seed), &mut written);
        let compact = serde_json::to_string(&request.body).expect("JSON");
        prop_assert_eq!(
            serde_json::from_str::<Value>(&written).ok(),
            serde_json::from_str::<Value>(&compact).ok(),
            "the rewriting itself is wrong: {}", written
        );
        prop_assert_eq!(request.fingerprint(written.as_bytes()), request.compact(), "{}", written);
    }

    /// A change to any one part of a request gives another fingerprint.
    #[test]
    fn any_single_part_changed_fingerprints_differ(request in request(), change in change(), seed in any::<u64>()) {
        let mut changed = request.clone();
        change.apply(&mut changed, &mut Choices(seed));
        prop_assert_ne!(changed.compact(), request.compact(), "{:?} changed to {:?}", request, changed);
    }
}

#[test]
fn escapes_and_raw_characters_fingerprint_equal() {
    let request = Request {
        method: "POST".to_owned(),
        path: "/orders".to_owned(),
        query: String::new(),
        account: vec![],
        content_type: "application/json".to_owned(),
        body: serde_json::json!({ "name": "été", "url": "a/b", "emoji": "😀" }),
    };
    let escaped = br#"{ "url": "a\/b", "emoji": "\ud83d\ude00", "name": "\u00e9t\u00E9" }"#;
    assert_eq!(request.fingerprint(escaped), request.compact());
}
