//! RFC 9457 problem details for the responses the runtime itself produces.

use std::borrow::Cow;
use std::time::Duration;

use serde::Serialize;

/// What a request whose execution is held for an operator is told.
pub(crate) const HELD: &str = "an earlier execution of this request stopped before it finished, and this route never \
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
    /// 500: the request's record is sealed (`Idem::encrypt_records`) and
    /// does not open: sealed with a key this server lacks, altered, moved
    /// from another key, or kept in the clear where only sealed records
    /// are accepted. Nothing ran, and nothing will until it opens or
    /// expires.
    RecordSealed,
    /// 500, transactional mode: the handler's transaction could not be
    /// committed (one of its statements failed, or the handler kept the
    /// transaction past its return); it was rolled back and the key
    /// released.
    TransactionFailed,
}

impl ProblemKind {
    /// The HTTP status of this problem.
    pub fn status(self) -> u16 {
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

    fn parts(self) -> (u16, &'static str, &'static str) {
        match self {
            Self::MissingKey => (400, "missing-key", "Idempotency key missing"),
            Self::InvalidKey => (400, "invalid-key", "Idempotency key invalid"),
            Self::MissingSubject => (401, "missing-subject", "Authentication required"),
            Self::BodyTooLarge => (413, "body-too-large", "Request body too large"),
            Self::InvalidBody => (400, "invalid-body", "Request body unreadable"),
            Self::UnsupportedContentEncoding => {
                (415, "unsupported-content-encoding", "Request content encoding not supported")
            }
            Self::KeyReused => (422, "key-reused", "Idempotency key reused with a different request"),
            Self::InFlight => (409, "in-flight", "Request already in progress"),
            Self::StoreUnavailable => (503, "store-unavailable", "Idempotency store unavailable"),
            Self::ShuttingDown => (503, "shutting-down", "Server shutting down"),
            Self::Overloaded => (503, "overloaded", "Too many requests running"),
            Self::KeeperStopped => (503, "keeper-stopped", "Idempotency lease keeper stopped"),
            Self::NotConfigured => (500, "not-configured", "Idempotency runtime not configured"),
            Self::HandlerPanicked => (500, "handler-panicked", "Internal error"),
            Self::ResponseNotStored => (500, "response-not-stored", "Original response could not be kept for replay"),
            Self::LeaseLost => (409, "lease-lost", "Request taken over by another execution"),
            Self::ExecutionHeld => (409, "execution-held", "Execution held for an operator"),
            Self::StepFailed => (500, "step-failed", "Durable step failed"),
            Self::TransactionFailed => (500, "transaction-failed", "Handler transaction rolled back"),
            Self::RecordSealed => (500, "record-sealed", "Stored record could not be opened"),
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
    let body = Body { kind: &kind.type_uri(), title: kind.title(), status: kind.status(), detail };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// A problem the runtime answers by itself, as plain data: each framework
/// sends it as a problem+json response.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    pub(crate) kind: ProblemKind,
    pub(crate) detail: Cow<'static, str>,
    /// `Retry-After`, in whole seconds (at least 1) when sent.
    pub(crate) retry_after: Option<Duration>,
    /// The status, when not the kind's own (a body that the transport
    /// refused with a status of its own).
    pub(crate) status: Option<u16>,
    /// `Accept-Encoding: identity`, with a refused content coding (RFC
    /// 9110, 15.5.16: the codings that would have been accepted).
    pub(crate) accept_identity: bool,
}

impl Problem {
    /// A problem of `kind`, saying `detail`.
    pub(crate) fn new(kind: ProblemKind, detail: impl Into<Cow<'static, str>>) -> Self {
        Self { kind, detail: detail.into(), retry_after: None, status: None, accept_identity: false }
    }

    /// The same, with `Retry-After`.
    pub(crate) fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Its status.
    pub(crate) fn status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.kind.status())
    }

    /// Its `Retry-After` value, in whole seconds, rounded up, at least 1.
    pub(crate) fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after.map(|after| (after.as_secs() + u64::from(after.subsec_nanos() > 0)).max(1))
    }

    /// Its body.
    pub(crate) fn body(&self) -> Vec<u8> {
        body(self.kind, &self.detail)
    }
}

/// The media type of a problem.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// A problem as an error value, for the runtime's own extractors (the
/// execution context, the transaction): each framework sends it as its
/// problem+json response. A `not-configured` problem is logged at error
/// level where it is made: it is the application's setup that is wrong.
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

    /// What kind of problem it is.
    pub fn kind(&self) -> ProblemKind {
        self.kind
    }

    /// The problem to answer.
    pub(crate) fn problem(&self) -> Problem {
        Problem::new(self.kind, self.detail.clone())
    }
}

impl std::fmt::Display for ProblemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.title(), self.detail)
    }
}

impl std::error::Error for ProblemError {}

/// How a handler that returns a [`StepError`](crate::StepError) leaves its
/// record, beside the problem it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepEnd {
    /// Kept and replayed like any failure: the step may have had its effect.
    Kept,
    /// Left held for an operator, neither completed nor released.
    LeftHeld,
}

impl crate::engine::StepError {
    /// The problem a handler that returns this error answers, and how its
    /// record is left.
    pub(crate) fn answer(&self) -> (Problem, StepEnd) {
        let (kind, end) = match self {
            Self::Lost(_) => (ProblemKind::LeaseLost, StepEnd::Kept),
            Self::Held(_) => (ProblemKind::ExecutionHeld, StepEnd::LeftHeld),
            _ => (ProblemKind::StepFailed, StepEnd::Kept),
        };
        (Problem::new(kind, self.to_string()), end)
    }
}
