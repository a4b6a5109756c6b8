//! Turning handler responses into stored ones, and stored ones back into
//! HTTP responses.

use actix_web::HttpResponse;
use actix_web::body::{self, BoxBody};
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use bytes::Bytes;

use super::config::Config;
use super::problem::{self, ProblemKind};
use crate::record::StoredResponse;

/// Header added to every replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A handler response with its body collected.
pub(crate) struct Captured {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Bytes,
    /// The handler finished but its body stream failed: whatever it did is
    /// done, so the 500 is kept whatever the 5xx policy says.
    pub(crate) body_failed: bool,
}

impl Captured {
    /// Collects the body of `response`. A body stream that fails becomes a
    /// plain 500, as actix itself would end such a response.
    pub(crate) async fn collect(response: HttpResponse<BoxBody>) -> Self {
        let status = response.status();
        let headers = response.headers().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        match body::to_bytes(response.into_body()).await {
            Ok(body) => Self { status, headers, body, body_failed: false },
            Err(error) => {
                tracing::error!(error = %error, "the handler's response body failed");
                Self {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    headers: Vec::new(),
                    body: Bytes::new(),
                    body_failed: true,
                }
            }
        }
    }

    /// The response as the first client gets it: every header, as produced.
    pub(crate) fn to_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status).body(self.body.clone());
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        response
    }

    /// What is kept for replay: replayable headers only, in order; or, when
    /// the response is over the configured limit, a 500 problem saying so,
    /// so that a retry never runs the handler a second time.
    pub(crate) fn to_stored(&self, config: &Config) -> StoredResponse {
        let stored = StoredResponse {
            status: self.status.as_u16(),
            headers: self
                .headers
                .iter()
                .filter(|(name, _)| config.replays(name))
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect(),
            body: self.body.clone(),
        };
        if stored.size() <= config.response_limit {
            return stored;
        }
        let detail = format!(
            "the original response ({} bytes) exceeded the stored response limit of {} bytes; \
             the request was processed once and will not run again for this key",
            stored.size(),
            config.response_limit
        );
        StoredResponse {
            status: 500,
            headers: vec![("content-type".into(), b"application/problem+json".to_vec())],
            body: problem::body(ProblemKind::ResponseNotStored, &detail).into(),
        }
    }
}

/// A stored response, replayed with `Idempotent-Replayed: true`.
pub(crate) fn replay(stored: &StoredResponse) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status).body(stored.body.clone());
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        match (HeaderName::try_from(name.as_str()), HeaderValue::from_bytes(value)) {
            (Ok(name), Ok(value)) => headers.append(name, value),
            _ => tracing::warn!(header = %name, "skipping an unreadable stored header"),
        }
    }
    headers.insert(HeaderName::from_static(REPLAYED_HEADER), HeaderValue::from_static("true"));
    response
}
