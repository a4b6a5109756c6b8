//! The runtime's answers as axum responses: problems, replays, the
//! handler's own response captured and passed on; and the runtime's errors
//! and marks as axum knows them.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::header::{ACCEPT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::BodyExt;

use crate::StepError;
use crate::problem::ProblemError;
use crate::record::StoredResponse;
use crate::web::{
    Captured, Framework, MarkRetryable, Marks, PROBLEM_JSON, Problem, REPLAYED_HEADER, Retryable, RetryableMark, Sent,
    StepEnd,
};

/// [`REPLAYED_HEADER`] as a header name, looked up without a copy.
const REPLAYED: HeaderName = HeaderName::from_static(REPLAYED_HEADER);

/// axum, as `web/` makes its answers.
pub(crate) struct Axum;

/// `status` as a status code (500 for one that is not).
fn status(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl Framework for Axum {
    type Response = Response;
    type Headers = HeaderMap;
    type Rest = Body;

    fn problem(problem: Problem) -> Response {
        let mut response = Response::new(Body::from(problem.body()));
        *response.status_mut() = status(problem.status());
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = problem.retry_after_seconds() {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if problem.accept_identity {
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        }
        response
    }

    /// A stored response, replayed with `Idempotent-Replayed: true`. Its
    /// header values and body become the response's without a copy.
    fn replay(stored: StoredResponse) -> Response {
        let mut response = Response::new(Body::from(stored.body));
        *response.status_mut() = status(stored.status);
        let headers = response.headers_mut();
        for (name, value) in stored.headers {
            match (HeaderName::try_from(name.as_str()), HeaderValue::from_maybe_shared(Bytes::from(value))) {
                (Ok(name), Ok(value)) => drop(headers.append(name, value)),
                _ => tracing::warn!(header = %name, "skipping an unreadable stored header"),
            }
        }
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
        response
    }

    fn respond(code: u16, headers: HeaderMap, body: Sent<Body>) -> Response {
        let body = match body {
            Sent::Whole(body) => Body::from(body),
            Sent::Overflow { head, rest } => {
                let head = futures_util::stream::once(std::future::ready(Ok::<_, axum::Error>(head)));
                Body::from_stream(head.chain(rest.into_data_stream()))
            }
            Sent::Failed => Body::empty(),
        };
        let mut response = Response::new(body);
        *response.status_mut() = status(code);
        *response.headers_mut() = headers;
        response
    }

    fn header_entries(headers: &HeaderMap) -> impl Iterator<Item = (&str, &[u8])> {
        headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()))
    }
}

/// `response` without the runtime's own header, which a handler never sets.
pub(super) fn without_replayed(mut response: Response) -> Response {
    response.headers_mut().remove(REPLAYED);
    response
}

/// Captures a handler's response, its body read up to `limit`.
pub(super) async fn capture(response: Response, limit: usize) -> Captured<Axum> {
    let (mut parts, mut body) = response.into_parts();
    let marks = Marks {
        retryable: parts.extensions.get::<RetryableMark>().is_some(),
        step: parts.extensions.get::<StepEnd>().copied(),
    };
    // The header belongs to the runtime: a handler's is dropped.
    parts.headers.remove(REPLAYED);
    let (code, headers) = (parts.status.as_u16(), parts.headers);
    let captured = |body| Captured { status: code, headers, body, marks };
    if axum::body::HttpBody::size_hint(&body).lower() > limit as u64 {
        return captured(Sent::Overflow { head: Bytes::new(), rest: body });
    }
    let mut read: Option<BytesMut> = None;
    let mut first: Option<Bytes> = None;
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                let held = first.as_ref().map_or(0, Bytes::len) + read.as_ref().map_or(0, BytesMut::len);
                if held + data.len() > limit {
                    let mut head = read.unwrap_or_default();
                    if let Some(first) = first {
                        head.extend_from_slice(&first);
                    }
                    head.extend_from_slice(&data);
                    return captured(Sent::Overflow { head: head.freeze(), rest: body });
                }
                // A body in one piece (most are) is kept as it is, not copied.
                match (&mut first, &mut read) {
                    (None, None) => first = Some(data),
                    (Some(held), None) => {
                        let mut joined = BytesMut::with_capacity(held.len() + data.len());
                        joined.extend_from_slice(held);
                        joined.extend_from_slice(&data);
                        first = None;
                        read = Some(joined);
                    }
                    (_, Some(joined)) => joined.extend_from_slice(&data),
                }
            }
            Some(Err(error)) => {
                tracing::error!(error = %error, "the handler's response body failed");
                return captured(Sent::Failed);
            }
        }
    }
    let whole = match (first, read) {
        (Some(first), _) => first,
        (None, Some(read)) => read.freeze(),
        (None, None) => Bytes::new(),
    };
    captured(Sent::Whole(whole))
}

impl<B> MarkRetryable for http::Response<B> {
    fn retryable(mut self) -> Self {
        self.extensions_mut().insert(RetryableMark);
        self
    }

    fn is_retryable(&self) -> bool {
        self.extensions().get::<RetryableMark>().is_some()
    }
}

impl<R: IntoResponse> IntoResponse for Retryable<R> {
    fn into_response(self) -> Response {
        self.0.into_response().retryable()
    }
}

/// The runtime's own extractors' refusal: nothing ran, so it is marked
/// retryable (under a layer, whose service's extractors run after the
/// claim, the key is released rather than kept with it).
impl IntoResponse for ProblemError {
    fn into_response(self) -> Response {
        Axum::problem(self.problem()).retryable()
    }
}

impl IntoResponse for StepError {
    fn into_response(self) -> Response {
        tracing::error!(error = %self, "a durable step failed");
        let (problem, end) = self.answer();
        let mut response = Axum::problem(problem);
        response.extensions_mut().insert(end);
        response
    }
}
