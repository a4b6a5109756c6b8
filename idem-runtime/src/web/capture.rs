//! Turning handler responses into stored ones, and stored ones back into
//! HTTP responses.

use std::future::poll_fn;
use std::pin::Pin;

use actix_web::HttpResponse;
use actix_web::body::{BodySize, BodyStream, BoxBody, MessageBody};
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, stream};

use super::config::Config;
use super::problem::{self, ProblemKind};
use super::retryable::{is_kept, is_left_held, is_marked};
use crate::record::StoredResponse;

/// Header added to every replayed response. It belongs to the runtime: a
/// handler that sets it has it removed from its response and its record.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// [`REPLAYED_HEADER`] as a header name, looked up without a copy.
pub(crate) const REPLAYED: HeaderName = HeaderName::from_static(REPLAYED_HEADER);

/// A handler response, its body collected up to the stored-response limit.
pub(crate) struct Captured {
    status: StatusCode,
    /// Its headers, taken from it as they were (no copy).
    headers: HeaderMap,
    body: Body,
    /// The handler marked it retryable: nothing happened.
    retryable: bool,
    /// The runtime marked it kept whatever the 5xx policy (a durable
    /// step's failure: its effect may have happened).
    kept: bool,
    /// A durable step found the record held for an operator: the execution
    /// stops, neither completing nor releasing.
    left_held: bool,
}

enum Body {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// Over the limit: what was read, and the rest, still to be streamed to
    /// the client. Nothing more is buffered.
    Overflow { head: Bytes, rest: BoxBody },
    /// The body stream failed: the handler ran, its answer is a 500.
    Failed,
}

impl Captured {
    /// Reads the body of `response`, at most `limit` bytes of it.
    pub(crate) async fn collect(mut response: HttpResponse<BoxBody>, limit: usize) -> Self {
        let (retryable, kept, left_held) = (is_marked(&response), is_kept(&response), is_left_held(&response));
        response.headers_mut().remove(REPLAYED);
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let body = response.into_body();
        if matches!(body.size(), BodySize::Sized(size) if size > limit as u64) {
            return Self {
                status,
                headers,
                body: Body::Overflow { head: Bytes::new(), rest: body },
                retryable,
                kept,
                left_held,
            };
        }
        // A body already in memory (most are) is kept as it is, not copied.
        let mut body = match body.try_into_bytes() {
            Ok(bytes) => return Self { status, headers, body: Body::Whole(bytes), retryable, kept, left_held },
            Err(body) => body,
        };
        let mut read = BytesMut::new();
        let body = loop {
            match poll_fn(|cx| Pin::new(&mut body).poll_next(cx)).await {
                None => break Body::Whole(read.freeze()),
                Some(Ok(chunk)) if read.len() + chunk.len() > limit => {
                    read.extend_from_slice(&chunk);
                    break Body::Overflow { head: read.freeze(), rest: body };
                }
                Some(Ok(chunk)) => read.extend_from_slice(&chunk),
                Some(Err(error)) => {
                    tracing::error!(error = %error, "the handler's response body failed");
                    break Body::Failed;
                }
            }
        };
        Self { status, headers, body, retryable, kept, left_held }
    }

    /// Whether a durable step found the record held for an operator: the
    /// execution leaves it so.
    pub(crate) fn leaves_held(&self) -> bool {
        self.left_held
    }

    /// Whether the handler marked this response retryable, honoured on
    /// 4xx and 5xx only: a success marked retryable would let the same
    /// request charge again, so it is kept like any response.
    pub(crate) fn is_marked_retryable(&self) -> bool {
        if !self.retryable || self.kept {
            return false;
        }
        let failure = self.is_failure();
        if !failure {
            tracing::warn!(status = %self.status, "ignoring the retryable mark on a response that is not a failure");
        }
        failure
    }

    /// A 4xx or 5xx the handler answered by itself (its body did not fail).
    pub(crate) fn is_failure(&self) -> bool {
        (self.status.is_client_error() || self.status.is_server_error()) && !matches!(self.body, Body::Failed)
    }

    /// A 5xx the handler answered by itself (its body did not fail), not
    /// one the runtime marked kept.
    pub(crate) fn is_plain_server_error(&self) -> bool {
        self.status.is_server_error() && !matches!(self.body, Body::Failed) && !self.kept
    }

    /// What is kept for replay: replayable headers only, in order; or, when
    /// the response is over the configured limit, a problem saying the
    /// request was processed, so that a retry never runs the handler again.
    pub(crate) fn to_stored(&self, config: &Config) -> StoredResponse {
        let body = match &self.body {
            Body::Whole(body) => body.clone(),
            Body::Failed => return problem_record(ProblemKind::HandlerPanicked, BODY_FAILED),
            Body::Overflow { .. } => {
                let detail = format!(
                    "the request was processed, but its response was larger than the stored response limit of \
                     {} bytes and was not kept; it will not run again for this key",
                    config.response_limit
                );
                return not_kept(&detail);
            }
        };
        let stored = StoredResponse {
            status: self.status.as_u16(),
            headers: self
                .headers
                .iter()
                .filter(|(name, _)| config.replays(name))
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect(),
            body,
        };
        if stored.size() <= config.response_limit {
            return stored;
        }
        let detail = format!(
            "the request was processed, but its response ({} bytes with headers) was larger than the stored \
             response limit of {} bytes and was not kept; it will not run again for this key",
            stored.size(),
            config.response_limit
        );
        not_kept(&detail)
    }

    /// The response as the first client gets it: every header the handler
    /// set (but the runtime's own), its body whole or streamed on.
    pub(crate) fn into_response(self) -> HttpResponse {
        let (status, body) = match self.body {
            Body::Whole(body) => (self.status, BoxBody::new(body)),
            Body::Overflow { head, mut rest } => {
                let head = stream::once(std::future::ready(Ok::<_, Box<dyn std::error::Error>>(head)));
                let rest = stream::poll_fn(move |cx| Pin::new(&mut rest).poll_next(cx));
                (self.status, BoxBody::new(BodyStream::new(head.chain(rest))))
            }
            Body::Failed => return problem::response(ProblemKind::HandlerPanicked, BODY_FAILED),
        };
        let mut response = HttpResponse::with_body(status, body);
        *response.headers_mut() = self.headers;
        response
    }
}

/// The record kept when the response could not be: a 500 problem whose
/// detail says that the request was processed.
pub(crate) fn not_kept(detail: &str) -> StoredResponse {
    problem_record(ProblemKind::ResponseNotStored, detail)
}

/// The answer to a handler whose body stream failed, as sent and as kept.
const BODY_FAILED: &str = "the request handler failed while sending its response; it may have had effects, \
                           so it will not run again for this key";

/// A problem as a stored response.
pub(crate) fn problem_record(kind: ProblemKind, detail: &str) -> StoredResponse {
    StoredResponse {
        status: kind.status().as_u16(),
        headers: vec![("content-type".into(), b"application/problem+json".to_vec())],
        body: problem::body(kind, detail).into(),
    }
}

/// A stored response, replayed with `Idempotent-Replayed: true`. Its
/// header values and body become the response's without a copy.
pub(crate) fn replay(stored: StoredResponse) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status).body(stored.body);
    let headers = response.headers_mut();
    for (name, value) in stored.headers {
        match (HeaderName::try_from(name.as_str()), HeaderValue::from_maybe_shared(Bytes::from(value))) {
            (Ok(name), Ok(value)) => headers.append(name, value),
            _ => tracing::warn!(header = %name, "skipping an unreadable stored header"),
        }
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
