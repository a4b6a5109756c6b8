//! The runtime's answers as actix-web responses: problems, replays, the
//! handler's own response captured and passed on; and the runtime's errors
//! and marks as actix-web knows them.

use std::future::poll_fn;
use std::pin::Pin;

use actix_web::body::{BodySize, BodyStream, BoxBody, MessageBody};
use actix_web::http::StatusCode;
use actix_web::http::header::{ACCEPT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, HttpResponse, Responder, ResponseError};
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, stream};

use crate::StepError;
use crate::problem::ProblemError;
use crate::record::StoredResponse;
use crate::web::{
    Captured, Framework, MarkRetryable, Marks, PROBLEM_JSON, Problem, REPLAYED_HEADER, Retryable, RetryableMark, Sent,
    StepEnd,
};

/// [`REPLAYED_HEADER`] as a header name, looked up without a copy.
const REPLAYED: HeaderName = HeaderName::from_static(REPLAYED_HEADER);

/// actix-web, as `web/` makes its answers.
pub(crate) struct Actix;

impl Framework for Actix {
    type Response = HttpResponse;
    type Headers = HeaderMap;
    type Rest = BoxBody;

    fn problem(problem: Problem) -> HttpResponse {
        let status = StatusCode::from_u16(problem.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::build(status).insert_header((CONTENT_TYPE, PROBLEM_JSON)).body(problem.body());
        if let Some(seconds) = problem.retry_after_seconds() {
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if problem.accept_identity {
            response.headers_mut().insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        }
        response
    }

    /// A stored response, replayed with `Idempotent-Replayed: true`. Its
    /// header values and body become the response's without a copy.
    fn replay(stored: StoredResponse) -> HttpResponse {
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

    fn respond(status: u16, headers: HeaderMap, body: Sent<BoxBody>) -> HttpResponse {
        let body = match body {
            Sent::Whole(body) => BoxBody::new(body),
            Sent::Overflow { head, mut rest } => {
                let head = stream::once(std::future::ready(Ok::<_, Box<dyn std::error::Error>>(head)));
                let rest = stream::poll_fn(move |cx| Pin::new(&mut rest).poll_next(cx));
                BoxBody::new(BodyStream::new(head.chain(rest)))
            }
            Sent::Failed => BoxBody::new(()),
        };
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::with_body(status, body);
        *response.headers_mut() = headers;
        response
    }

    fn header_entries(headers: &HeaderMap) -> impl Iterator<Item = (&str, &[u8])> {
        headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()))
    }
}

/// `response` without the runtime's own header, which a handler never sets.
pub(super) fn without_replayed(mut response: HttpResponse) -> HttpResponse {
    response.headers_mut().remove(REPLAYED);
    response
}

/// Captures a handler's response, its body read up to `limit`.
pub(super) async fn capture(mut response: HttpResponse<BoxBody>, limit: usize) -> Captured<Actix> {
    let marks = Marks {
        retryable: response.extensions().contains::<RetryableMark>(),
        step: response.extensions().get::<StepEnd>().copied(),
    };
    // The header belongs to the runtime: a handler's is dropped.
    response.headers_mut().remove(REPLAYED);
    let status = response.status().as_u16();
    let headers = std::mem::take(response.headers_mut());
    let body = response.into_body();
    let captured = |body| Captured { status, headers, body, marks };
    if matches!(body.size(), BodySize::Sized(size) if size > limit as u64) {
        return captured(Sent::Overflow { head: Bytes::new(), rest: body });
    }
    // A body already in memory (most are) is kept as it is, not copied.
    let mut body = match body.try_into_bytes() {
        Ok(bytes) => return captured(Sent::Whole(bytes)),
        Err(body) => body,
    };
    let mut read = BytesMut::new();
    let body = loop {
        match poll_fn(|cx| Pin::new(&mut body).poll_next(cx)).await {
            None => break Sent::Whole(read.freeze()),
            Some(Ok(chunk)) if read.len() + chunk.len() > limit => {
                read.extend_from_slice(&chunk);
                break Sent::Overflow { head: read.freeze(), rest: body };
            }
            Some(Ok(chunk)) => read.extend_from_slice(&chunk),
            Some(Err(error)) => {
                tracing::error!(error = %error, "the handler's response body failed");
                break Sent::Failed;
            }
        }
    };
    captured(body)
}

impl<B> MarkRetryable for HttpResponse<B> {
    fn retryable(mut self) -> Self {
        self.extensions_mut().insert(RetryableMark);
        self
    }

    fn is_retryable(&self) -> bool {
        self.extensions().contains::<RetryableMark>()
    }
}

impl<R: Responder> Responder for Retryable<R> {
    type Body = BoxBody;

    fn respond_to(self, req: &HttpRequest) -> HttpResponse<BoxBody> {
        self.0.respond_to(req).map_into_boxed_body().retryable()
    }
}

impl ResponseError for ProblemError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.kind().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        // Nothing ran: marked retryable, as on axum.
        Actix::problem(self.problem()).retryable()
    }
}

impl ResponseError for StepError {
    fn status_code(&self) -> StatusCode {
        let (problem, _) = self.answer();
        StatusCode::from_u16(problem.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        tracing::error!(error = %self, "a durable step failed");
        let (problem, end) = self.answer();
        let mut response = Actix::problem(problem);
        response.extensions_mut().insert(end);
        response
    }
}
