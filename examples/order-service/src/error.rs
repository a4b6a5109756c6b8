//! The service's own errors, as RFC 9457 problem+json.

use idem_runtime::StepError;
use serde::Serialize;

use crate::repo::RepoError;

/// What a route can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// The request's values are invalid (400).
    #[error("{0}")]
    Invalid(String),
    /// No `X-User-ID` (401).
    #[error("this route needs the X-User-ID header")]
    Unauthenticated,
    /// No such order for this user (404).
    #[error("no order {0} for this user")]
    NotFound(String),
    /// The backend failed (503 with `Retry-After`, marked retryable: see
    /// [`ApiError::error_response`]).
    #[error(transparent)]
    Backend(#[from] RepoError),
    /// The provider declined the card; nothing was charged (402, stored).
    #[error("the card was declined; nothing was charged")]
    Declined,
    /// The provider could not be reached before any charge (503, marked
    /// retryable: the same request may run again).
    #[error("the payment provider is unavailable; nothing was charged, retry later")]
    ProviderUnavailable,
    /// The provider charged, then its answer timed out (504, stored: a
    /// retry must never charge again).
    #[error("the payment provider timed out after charging; the charge stands")]
    ProviderTimeout,
    /// The provider's answer to a charge was lost (its ledger failed
    /// mid-call) and it does not deduplicate (`--provider-dedup off`): the
    /// charge may stand, so the answer is kept (502) and never run again.
    #[error("the payment provider's answer was lost and it does not deduplicate; the charge may stand")]
    ProviderOutcomeUnknown,
    /// A webhook delivery whose signature does not check out (400; nothing
    /// recorded).
    #[error(transparent)]
    Signature(#[from] crate::signature::SignatureError),
    /// A durable step failed: the runtime's own problem (500 `step-failed`,
    /// or 409 `lease-lost` when another execution owns the key).
    #[error(transparent)]
    Step(#[from] StepError),
    /// The service is set up wrong (500).
    #[error("the service is misconfigured: {0}")]
    Misconfigured(&'static str),
}

impl ApiError {
    fn slug(&self) -> (&'static str, &'static str) {
        match self {
            Self::Invalid(_) => ("invalid-request", "Invalid request"),
            Self::Unauthenticated => ("unauthenticated", "Authentication required"),
            Self::NotFound(_) => ("not-found", "Order not found"),
            Self::Backend(_) => ("backend-unavailable", "Backend unavailable"),
            Self::Declined => ("card-declined", "Card declined"),
            Self::ProviderUnavailable => ("provider-unavailable", "Payment provider unavailable"),
            Self::ProviderTimeout => ("provider-timeout", "Payment provider timed out"),
            Self::ProviderOutcomeUnknown => ("provider-outcome-unknown", "Payment provider outcome unknown"),
            Self::Signature(_) => ("invalid-signature", "Invalid webhook signature"),
            Self::Misconfigured(_) => ("misconfigured", "Service misconfigured"),
            // Answered by the runtime's problem (see `error_response`).
            Self::Step(_) => ("step-failed", "Durable step failed"),
        }
    }
}

impl ApiError {
    /// Its status code. A step's failure is the runtime's problem, with its
    /// own status.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::Invalid(_) | Self::Signature(_) => 400,
            Self::Misconfigured(_) => 500,
            Self::Unauthenticated => 401,
            Self::NotFound(_) => 404,
            Self::Backend(_) | Self::ProviderUnavailable => 503,
            Self::Declined => 402,
            Self::ProviderTimeout => 504,
            Self::ProviderOutcomeUnknown => 502,
            Self::Step(_) => 500,
        }
    }

    /// The problem+json answer: its status, its body, whether it says when
    /// to retry (`Retry-After`), and whether it is marked retryable (nothing
    /// happened: the runtime keeps no record of it, and the same request
    /// runs again). A backend failure is logged here.
    pub(crate) fn problem(&self) -> Answer {
        if let Self::Backend(error) = self {
            tracing::error!(%error, "backend call failed");
        }
        let (slug, title) = self.slug();
        let status = self.status();
        let problem =
            Problem { detail: self.to_string(), status, title, kind: format!("urn:order-service:problem:{slug}") };
        Answer {
            status,
            body: serde_json::to_vec(&problem).unwrap_or_default(),
            retry_after: (status == 503).then_some(RETRY_AFTER_SECONDS),
            retryable: matches!(self, Self::ProviderUnavailable | Self::Backend(_)),
        }
    }
}

/// A problem of the service's own, as each framework sends it.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    /// `Retry-After`, in seconds.
    pub(crate) retry_after: Option<u64>,
    /// Marked retryable.
    pub(crate) retryable: bool,
}

const RETRY_AFTER_SECONDS: u64 = 1;

/// An RFC 9457 problem body. Fields in alphabetical order, the order the
/// service has always sent them in, so the bytes stay the same.
#[derive(Debug, Serialize)]
struct Problem {
    detail: String,
    status: u16,
    title: &'static str,
    #[serde(rename = "type")]
    kind: String,
}
