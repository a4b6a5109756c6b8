//! A handler's response captured: its body collected up to the
//! stored-response limit (each framework collects its own kind of body),
//! then kept for replay and sent on to the client.

use bytes::Bytes;

use super::Framework;
use super::config::Config;
use super::problem::{self, Problem, ProblemKind, StepEnd};
use super::retryable::{Marks, is_failure_status};
use crate::record::StoredResponse;

/// Header added to every replayed response. It belongs to the runtime: a
/// handler that sets it has it removed from its response and its record.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A handler's response, its body collected up to the stored-response
/// limit.
pub(crate) struct Captured<F: Framework> {
    pub(crate) status: u16,
    /// Its headers, taken from it as they were (no copy), but
    /// [`REPLAYED_HEADER`].
    pub(crate) headers: F::Headers,
    pub(crate) body: Sent<F::Rest>,
    pub(crate) marks: Marks,
}

/// A captured response's body, as it is sent on.
pub(crate) enum Sent<R> {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Over the limit: what was read, and the rest, streamed on to the
    /// client (and not kept).
    Overflow { head: Bytes, rest: R },
    /// The handler's body failed while it was read.
    Failed,
}

impl<F: Framework> Captured<F> {
    /// Whether a durable step found the record held for an operator: the
    /// execution leaves it so.
    pub(crate) fn leaves_held(&self) -> bool {
        self.marks.step == Some(StepEnd::LeftHeld)
    }

    /// Whether the handler marked this response retryable, honoured on
    /// 4xx and 5xx only: a success marked retryable would let the same
    /// request charge again, so it is kept like any response.
    pub(crate) fn is_marked_retryable(&self) -> bool {
        if !self.marks.retryable || self.marks.step.is_some() {
            return false;
        }
        let failure = self.is_failure();
        if !failure {
            tracing::warn!(status = self.status, "ignoring the retryable mark on a response that is not a failure");
        }
        failure
    }

    /// A 4xx or 5xx the handler answered by itself (its body did not fail).
    pub(crate) fn is_failure(&self) -> bool {
        is_failure_status(self.status) && !matches!(self.body, Sent::Failed)
    }

    /// A 4xx or 5xx, its body sent whole or not: a failure the
    /// transactional mode keeps even when its transaction does not commit.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn has_failure_status(&self) -> bool {
        is_failure_status(self.status)
    }

    /// A 5xx the handler answered by itself (its body did not fail), not
    /// one the runtime marked kept.
    pub(crate) fn is_plain_server_error(&self) -> bool {
        (500..600).contains(&self.status) && !matches!(self.body, Sent::Failed) && self.marks.step.is_none()
    }

    /// What is kept for replay: replayable headers only, in order; or, when
    /// the response is over the configured limit, a problem saying the
    /// request was processed, so that a retry never runs the handler again.
    pub(crate) fn to_stored(&self, config: &Config) -> StoredResponse {
        let body = match &self.body {
            Sent::Whole(body) => body.clone(),
            Sent::Failed => return problem_record(ProblemKind::HandlerPanicked, BODY_FAILED),
            Sent::Overflow { .. } => {
                let detail = format!(
                    "the request was processed, but its response was larger than the stored response limit of \
                     {} bytes and was not kept; it will not run again for this key",
                    config.response_limit
                );
                return not_kept(&detail);
            }
        };
        // Kept for replay: the headers `Config::replays` names.
        let headers = F::header_entries(&self.headers)
            .filter(|(name, _)| config.replays(name))
            .map(|(name, value)| (name.to_owned(), value.to_vec()))
            .collect();
        let stored = StoredResponse { status: self.status, headers, body };
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
    pub(crate) fn into_response(self) -> F::Response {
        match self.body {
            Sent::Failed => F::problem(Problem::new(ProblemKind::HandlerPanicked, BODY_FAILED)),
            body => F::respond(self.status, self.headers, body),
        }
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
        status: kind.status(),
        headers: vec![("content-type".into(), problem::PROBLEM_JSON.as_bytes().to_vec())],
        body: problem::body(kind, detail).into(),
    }
}
