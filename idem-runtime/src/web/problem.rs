//! RFC 9457 problem details for the responses the runtime itself produces.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER};
use serde::Serialize;

/// What a request whose execution is held for an operator is told.
pub(super) const HELD: &str = "an earlier execution of this request stopped before it finished, and this route never \
                               runs it again by itself: it will not run again until an operator releases or resolves \
                               it (or its record expires); retrying does not help";

/// Prefix of every problem `type` URI; the README lists them all.
pub const TYPE_PREFIX: &str = "urn:idem:problem:";

/// The situations in which the runtime answers by itself (§5 of the behaviour contract, `docs/contract.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// 400: the key header is missing on a route that requires it.
    MissingKey,
    /// 400: the key is malformed, repeated or too long.
    InvalidKey,
    /// 401: `scope = "user"` and no subject could be resolved.
    MissingSubject,
    /// 413: the body is over the configured limit.
    BodyTooLarge,
    /// 400 (or the transport's status): the body could not be read.
    InvalidBody,
    /// 415: the body has a `Content-Encoding` other than `identity`. The
    /// runtime cannot decode it, and a body is never fingerprinted by its
    /// wire bytes (the same content compressed twice need not give the same
    /// bytes, and a handler's extractors may decode what the fingerprint
    /// did not see).
    UnsupportedContentEncoding,
    /// 422: the key was used for a different request.
    KeyReused,
    /// 409: the same request is still being processed.
    InFlight,
    /// 503: the store failed before the handler ran.
    StoreUnavailable,
    /// 503: the server is shutting down; nothing was run.
    ShuttingDown,
    /// 503 with `Retry-After`: as many executions run in this process as
    /// [`Idem::max_running`](crate::Idem::max_running) allows; nothing was
    /// claimed or run.
    Overloaded,
    /// 503 with `Retry-After`: the process-wide lease keeper has stopped
    /// (a panic on its thread), so no lease could be kept; nothing was
    /// claimed or run.
    KeeperStopped,
    /// 500: no configuration registered on the app, or a configuration
    /// that cannot keep a route's lease.
    NotConfigured,
    /// 500 (stored, replayed): the handler panicked, or its response body
    /// failed.
    HandlerPanicked,
    /// 500 (stored, replayed): the request was processed but its response
    /// could not be kept (over the limit, or refused by the store).
    ResponseNotStored,
    /// 409 without `Retry-After`: the execution lapsed unfinished on a route
    /// with `on_lapse = "hold"`; it will not run again by itself, and waits
    /// for an operator to release or resolve it.
    ExecutionHeld,
    /// 500 (stored, replayed): a durable step ran but its result could not
    /// be recorded (too large, refused by the store), or a recorded result
    /// no longer reads back as the step's type.
    StepFailed,
    /// 409 with `Retry-After`, transactional mode: the lease was lost while
    /// the handler ran, so its transaction was rolled back; another
    /// execution owns the key.
    LeaseLost,
    /// 500, transactional mode: the handler's transaction could not be
    /// committed (one of its statements failed, or the handler kept the
    /// transaction past its return); it was rolled back and the key
    /// released.
    TransactionFailed,
}

impl ProblemKind {
    /// The HTTP status of this problem.
    pub fn status(self) -> StatusCode {
        self.parts().0
    }

    /// The `type` slug, such as `key-reused` (the URI's last part).
    pub fn slug(self) -> &'static str {
        self.parts().1
    }

    /// The `title` of this problem.
    pub fn title(self) -> &'static str {
        self.parts().2
    }

    /// The full `type` URI, such as `urn:idem:problem:key-reused`.
    pub fn type_uri(self) -> String {
        format!("{TYPE_PREFIX}{}", self.slug())
    }

    fn parts(self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::MissingKey => (StatusCode::BAD_REQUEST, "missing-key", "Idempotency key missing"),
            Self::InvalidKey => (StatusCode::BAD_REQUEST, "invalid-key", "Idempotency key invalid"),
            Self::MissingSubject => (StatusCode::UNAUTHORIZED, "missing-subject", "Authentication required"),
            Self::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "body-too-large", "Request body too large"),
            Self::InvalidBody => (StatusCode::BAD_REQUEST, "invalid-body", "Request body unreadable"),
            Self::UnsupportedContentEncoding => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-content-encoding",
                "Request content encoding not supported",
            ),
            Self::KeyReused => {
                (StatusCode::UNPROCESSABLE_ENTITY, "key-reused", "Idempotency key reused with a different request")
            }
            Self::InFlight => (StatusCode::CONFLICT, "in-flight", "Request already in progress"),
            Self::StoreUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "Idempotency store unavailable")
            }
            Self::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting-down", "Server shutting down"),
            Self::Overloaded => (StatusCode::SERVICE_UNAVAILABLE, "overloaded", "Too many requests running"),
            Self::KeeperStopped => {
                (StatusCode::SERVICE_UNAVAILABLE, "keeper-stopped", "Idempotency lease keeper stopped")
            }
            Self::NotConfigured => {
                (StatusCode::INTERNAL_SERVER_ERROR, "not-configured", "Idempotency runtime not configured")
            }
            Self::HandlerPanicked => (StatusCode::INTERNAL_SERVER_ERROR, "handler-panicked", "Internal error"),
            Self::ResponseNotStored => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "response-not-stored",
                "Original response could not be kept for replay",
            ),
            Self::LeaseLost => (StatusCode::CONFLICT, "lease-lost", "Request taken over by another execution"),
            Self::ExecutionHeld => (StatusCode::CONFLICT, "execution-held", "Execution held for an operator"),
            Self::StepFailed => (StatusCode::INTERNAL_SERVER_ERROR, "step-failed", "Durable step failed"),
            Self::TransactionFailed => {
                (StatusCode::INTERNAL_SERVER_ERROR, "transaction-failed", "Handler transaction rolled back")
            }
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    title: &'a str,
    status: u16,
    detail: &'a str,
}

/// Serializes the problem body.
pub(crate) fn body(kind: ProblemKind, detail: &str) -> Vec<u8> {
    let body = Body { kind: &kind.type_uri(), title: kind.title(), status: kind.status().as_u16(), detail };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// A problem+json response.
pub(crate) fn response(kind: ProblemKind, detail: &str) -> HttpResponse {
    HttpResponse::build(kind.status())
        .insert_header((CONTENT_TYPE, "application/problem+json"))
        .body(body(kind, detail))
}

/// A problem+json response with `Retry-After` in whole seconds (at least 1).
pub(crate) fn retry_after(kind: ProblemKind, detail: &str, after: Duration) -> HttpResponse {
    let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    let mut response = response(kind, detail);
    if let Ok(value) = seconds.max(1).to_string().try_into() {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response
}

/// A problem as an actix error, for the runtime's own extractors. A
/// misconfiguration (`not-configured`) is logged at error level.
#[derive(Debug)]
pub struct ProblemError {
    kind: ProblemKind,
    detail: String,
}

impl ProblemError {
    pub(crate) fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        if kind == ProblemKind::NotConfigured {
            tracing::error!("{detail}");
        }
        Self { kind, detail }
    }

    /// What went wrong.
    pub fn kind(&self) -> ProblemKind {
        self.kind
    }
}

impl std::fmt::Display for ProblemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.title(), self.detail)
    }
}

impl actix_web::ResponseError for ProblemError {
    fn status_code(&self) -> StatusCode {
        self.kind.status()
    }

    fn error_response(&self) -> HttpResponse {
        response(self.kind, &self.detail)
    }
}

/// A durable step's failure, returned from a handler with `?`: the
/// execution lost its key (409 `lease-lost`: another execution owns it), or
/// the step's result could not be recorded or read back (500
/// `step-failed`, stored and replayed whatever the 5xx policy, even under
/// [`ServerErrorPolicy::Release`](crate::ServerErrorPolicy::Release): the
/// step may have had its effect). A handler that maps it to a response of
/// its own should keep this one.
impl actix_web::ResponseError for crate::engine::StepError {
    fn status_code(&self) -> StatusCode {
        self.kind().status()
    }

    fn error_response(&self) -> HttpResponse {
        tracing::error!(error = %self, "a durable step failed");
        let mut answer = response(self.kind(), &self.to_string());
        match self {
            Self::Held(_) => drop(answer.extensions_mut().insert(super::retryable::LeftHeldMark)),
            _ => drop(answer.extensions_mut().insert(super::retryable::KeptMark)),
        }
        answer
    }
}

impl crate::engine::StepError {
    fn kind(&self) -> ProblemKind {
        match self {
            Self::Lost(_) => ProblemKind::LeaseLost,
            Self::Held(_) => ProblemKind::ExecutionHeld,
            _ => ProblemKind::StepFailed,
        }
    }
}
