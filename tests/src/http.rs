//! The HTTP client of the tests, one request-and-reply helper over it, and
//! fresh idempotency keys to send with it.

use std::time::Duration;

use awc::http::StatusCode;
use bytes::Bytes;
use idem_runtime::store::FencingToken;
use serde_json::Value;

/// An HTTP client that gives up after `timeout`, without a connection limit
/// (a burst opens hundreds of connections at once).
pub fn client(timeout: Duration) -> awc::Client {
    awc::Client::builder().timeout(timeout).connector(awc::Connector::new().limit(0)).finish()
}

/// A fresh random idempotency key.
pub fn fresh_key() -> String {
    FencingToken::generate().to_hex()
}

/// One HTTP exchange: status, the headers the checks look at, and the body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Idempotent-Replayed`.
    pub replayed: Option<String>,
    /// `Retry-After`.
    pub retry_after: Option<String>,
    /// `Location`.
    pub location: Option<String>,
    /// Body bytes.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// Asserts an RFC 9457 problem with `status`.
    pub fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(self.status.as_u16(), status, "{self:?}");
        assert_eq!(self.content_type.as_deref(), Some("application/problem+json"), "{self:?}");
        let body = self.json();
        assert_eq!(body["status"], status, "{body}");
        assert!(body["type"].is_string() && body["title"].is_string() && body["detail"].is_string(), "{body}");
        body
    }
}

/// Sends one request: `POST` when `body` is given, else `GET`.
pub async fn send(url: &str, user: Option<&str>, key: Option<&str>, body: Option<&str>) -> Reply {
    try_send(url, user, key, body).await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// Like [`send`], but a transport error (a killed server) is returned.
pub async fn try_send(url: &str, user: Option<&str>, key: Option<&str>, body: Option<&str>) -> Result<Reply, String> {
    let client = client(Duration::from_secs(60));
    let mut request = match body {
        Some(_) => client.post(url).insert_header(("content-type", "application/json")),
        None => client.get(url),
    };
    if let Some(user) = user {
        request = request.insert_header(("x-user-id", user));
    }
    if let Some(key) = key {
        request = request.insert_header(("idempotency-key", key));
    }
    let sent = match body {
        Some(body) => request.send_body(body.to_owned()).await,
        None => request.send().await,
    };
    read(sent.map_err(|e| e.to_string())?).await
}

/// Sends `POST url` with exactly `headers` and `body`, as given (no content
/// type added): for the tests of what the runtime makes of headers such as
/// `Content-Type`, `Content-Encoding` or an unusual key.
pub async fn post_with(url: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Reply {
    let mut request = client(Duration::from_secs(60)).post(url);
    for &header in headers {
        request = request.append_header(header);
    }
    let response = request.send_body(body.into()).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    read(response).await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

async fn read<S>(mut response: awc::ClientResponse<S>) -> Result<Reply, String>
where
    S: futures_util::Stream<Item = Result<Bytes, awc::error::PayloadError>> + Unpin,
{
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (content_type, replayed) = (header("content-type"), header("idempotent-replayed"));
    let (retry_after, location) = (header("retry-after"), header("location"));
    let body = response.body().limit(16 << 20).await.map_err(|e| e.to_string())?;
    Ok(Reply { status: response.status(), content_type, replayed, retry_after, location, body })
}
