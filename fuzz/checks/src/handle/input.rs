//! What the `handle` target sends: a request made by `arbitrary` (a route,
//! a method, a path segment and a query of any text, headers of any bytes,
//! a JSON, form or raw body), and the same request changed in one way.

use std::str::FromStr;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{Method, Uri};
use actix_web::test::TestRequest;
use arbitrary::{Arbitrary, Unstructured};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// What a path segment or a query keeps as it is: `%` too, so that
/// malformed escapes reach the server.
const ENCODED: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'<').add(b'>').add(b'?').add(b'`').add(b'{');
const SEGMENT: &AsciiSet = &ENCODED.add(b'/').add(b'}').add(b'\\').add(b'^').add(b'|').add(b'[').add(b']');
const QUERY: &AsciiSet = &ENCODED.add(b'}').add(b'\\').add(b'^').add(b'|').add(b'[').add(b']');

/// One fuzzer input.
#[derive(Debug, Arbitrary)]
pub(super) struct Input {
    route: Route,
    method: Verb,
    segment: String,
    query: Option<String>,
    /// `X-User-ID: u<n>`, the subject.
    user: Option<u8>,
    /// The route's key header, `k<n>` (or quoted).
    key: Option<(u8, bool)>,
    headers: Vec<Header>,
    body: Body,
    change: Change,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
enum Route {
    Orders,
    Capture,
    Webhook,
    Form,
    Elsewhere,
}

#[derive(Debug, Arbitrary)]
enum Verb {
    Post,
    Put,
    Get,
    Other(String),
}

#[derive(Debug, Arbitrary)]
struct Header {
    name: Name,
    value: Value,
}

#[derive(Debug, Arbitrary)]
enum Name {
    IdempotencyKey,
    XKey,
    ContentType,
    ContentEncoding,
    UserId,
    AccountId,
    Replayed,
    Other(String),
}

#[derive(Debug, Arbitrary)]
enum Value {
    Key(u8),
    MediaType(u8),
    Text(String),
    Bytes(Vec<u8>),
}

/// Media types a client sends, JSON in several spellings among them.
const MEDIA_TYPES: [&str; 9] = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    "application/merge-patch+json",
    "application/problem+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "application/json;",
    "",
];

#[derive(Debug, Arbitrary)]
enum Body {
    Json(Json, bool),
    /// `{"id": "evt_<n>", ..}`, what the webhook route reads its key from.
    Event(u8, Json),
    Form(Vec<(String, String)>),
    Raw(Vec<u8>),
}

/// A JSON value, a few levels deep.
#[derive(Debug)]
struct Json(serde_json::Value);

impl<'a> Arbitrary<'a> for Json {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        json(u, 0).map(Json)
    }
}

fn json(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<serde_json::Value> {
    use serde_json::Value as J;
    let kinds = if depth < 3 { 6 } else { 4 };
    Ok(match u.int_in_range(0..=kinds)? {
        0 => J::Null,
        1 => J::Bool(u.arbitrary()?),
        2 => J::from(u.arbitrary::<i64>()?),
        3 => serde_json::Number::from_f64(u.arbitrary()?).map_or(J::Null, J::Number),
        4 => J::String(u.arbitrary()?),
        5 => J::Array((0..u.int_in_range(0..=3)?).map(|_| json(u, depth + 1)).collect::<Result<_, _>>()?),
        _ => J::Object(
            (0..u.int_in_range(0..=3)?)
                .map(|_| Ok((u.arbitrary()?, json(u, depth + 1)?)))
                .collect::<arbitrary::Result<_>>()?,
        ),
    })
}

/// What the third request changes.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Change {
    Query,
    Path,
    Account,
    Body,
    /// The same meaning written otherwise: the JSON body re-serialized, the
    /// media type spelled otherwise.
    Spelling,
}

/// Whether a changed request is another request or the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Meaning {
    Other,
    Same,
}

/// A request ready to send, again and again.
#[derive(Clone)]
pub(super) struct Sent {
    method: Method,
    uri: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Vec<u8>,
}

impl Sent {
    /// The body's length.
    pub(super) fn body_len(&self) -> usize {
        self.body.len()
    }

    /// A test request of it.
    pub(super) fn request(&self) -> TestRequest {
        let mut request =
            TestRequest::default().method(self.method.clone()).uri(&self.uri).set_payload(self.body.clone());
        for header in &self.headers {
            request = request.append_header(header.clone());
        }
        request
    }
}

impl std::fmt::Debug for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sent")
            .field("method", &self.method)
            .field("uri", &self.uri)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

impl Input {
    /// The request, or `None` when the bytes do not make a valid URI or
    /// method.
    pub(super) fn sent(&self) -> Option<Sent> {
        let segment = utf8_percent_encode(&self.segment, SEGMENT).to_string();
        let path = match self.route {
            Route::Orders => format!("/orders/{segment}"),
            Route::Capture => format!("/orders/{segment}/capture"),
            Route::Webhook => "/webhooks".to_owned(),
            Route::Form => "/forms".to_owned(),
            Route::Elsewhere => format!("/{segment}"),
        };
        let uri = match &self.query {
            Some(query) => format!("{path}?{}", utf8_percent_encode(query, QUERY)),
            None => path,
        };
        Uri::from_str(&uri).ok()?;
        let method = match &self.method {
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Get => Method::GET,
            Verb::Other(name) => Method::from_bytes(name.as_bytes()).ok()?,
        };
        let mut headers = Vec::new();
        if let Some(user) = self.user {
            headers.push((HeaderName::from_static("x-user-id"), HeaderValue::from(u32::from(user))));
        }
        if let Some((key, quoted)) = self.key {
            let name = if self.route == Route::Form { "x-key" } else { "idempotency-key" };
            let value = if quoted { format!("\"k{key}\";v=1") } else { format!("k{key}") };
            headers.push((HeaderName::from_static(name), HeaderValue::from_str(&value).ok()?));
        }
        // `Content-Length` is the body's, once, as an HTTP/1 decoder
        // guarantees (actix's extractors assert it).
        headers.extend(self.headers.iter().filter_map(Header::pair).filter(|(name, _)| name != "content-length"));
        let (body, media_type) = match &self.body {
            Body::Json(Json(value), pretty) if *pretty => (serde_json::to_vec_pretty(value).ok()?, MEDIA_TYPES[0]),
            Body::Json(Json(value), _) => (serde_json::to_vec(value).ok()?, MEDIA_TYPES[0]),
            Body::Event(id, Json(data)) => (
                serde_json::to_vec(&serde_json::json!({ "id": format!("evt_{id}"), "data": data })).ok()?,
                MEDIA_TYPES[0],
            ),
            Body::Form(fields) => (form_body(fields), MEDIA_TYPES[6]),
            Body::Raw(bytes) => (bytes.clone(), ""),
        };
        if !media_type.is_empty() && !headers.iter().any(|(name, _)| name == "content-type") {
            headers.push((HeaderName::from_static("content-type"), HeaderValue::from_static(media_type)));
        }
        Some(Sent { method, uri, headers, body })
    }

    /// The request changed in one way, and whether that makes it another
    /// request; `None` when the change does not apply.
    pub(super) fn changed(&self, sent: &Sent) -> Option<(Sent, Meaning)> {
        let mut changed = sent.clone();
        let change = match (self.route, self.change) {
            (Route::Orders, change) => change,
            _ => Change::Query,
        };
        let meaning = match change {
            Change::Query => {
                let separator = if changed.uri.contains('?') { '&' } else { '?' };
                changed.uri.push(separator);
                changed.uri.push_str("changed=1");
                Meaning::Other
            }
            Change::Path => {
                let (path, query) =
                    changed.uri.split_once('?').map_or((changed.uri.as_str(), None), |(p, q)| (p, Some(q)));
                changed.uri = match query {
                    Some(query) => format!("{path}x?{query}"),
                    None => format!("{path}x"),
                };
                Meaning::Other
            }
            Change::Account => {
                // Absent and empty differ; one value more differs too.
                changed.headers.push((HeaderName::from_static("x-account-id"), HeaderValue::from_static("")));
                Meaning::Other
            }
            Change::Body => {
                changed.body = [b"{\"changed\":".as_slice(), &sent.body, b"}"].concat();
                Meaning::Other
            }
            Change::Spelling => {
                let media_types: Vec<_> = sent.headers.iter().filter(|(name, _)| name == "content-type").collect();
                let [(_, media_type)] = media_types.as_slice() else { return None };
                let essence = media_type.to_str().ok()?.split(';').next()?.trim().to_ascii_lowercase();
                if essence != "application/json" {
                    return None;
                }
                changed.body = crate::canonical_json::reserialized(&sent.body)?.into_bytes();
                for (name, value) in &mut changed.headers {
                    if name == "content-type" {
                        *value = HeaderValue::from_static("Application/JSON; charset=utf-8");
                    }
                }
                Meaning::Same
            }
        };
        Some((changed, meaning))
    }
}

impl Header {
    fn pair(&self) -> Option<(HeaderName, HeaderValue)> {
        let name = match &self.name {
            Name::IdempotencyKey => HeaderName::from_static("idempotency-key"),
            Name::XKey => HeaderName::from_static("x-key"),
            Name::ContentType => HeaderName::from_static("content-type"),
            Name::ContentEncoding => HeaderName::from_static("content-encoding"),
            Name::UserId => HeaderName::from_static("x-user-id"),
            Name::AccountId => HeaderName::from_static("x-account-id"),
            Name::Replayed => HeaderName::from_static("idempotent-replayed"),
            Name::Other(name) => HeaderName::from_bytes(name.as_bytes()).ok()?,
        };
        let value = match &self.value {
            Value::Key(key) => HeaderValue::from_str(&format!("k{key}")).ok()?,
            Value::MediaType(index) => HeaderValue::from_static(MEDIA_TYPES[usize::from(*index) % MEDIA_TYPES.len()]),
            Value::Text(text) => HeaderValue::from_str(text).ok()?,
            Value::Bytes(bytes) => HeaderValue::from_bytes(bytes).ok()?,
        };
        Some((name, value))
    }
}

/// `a=1&b=2`, each part percent-encoded.
fn form_body(fields: &[(String, String)]) -> Vec<u8> {
    let encode = |text: &str| utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string();
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}
