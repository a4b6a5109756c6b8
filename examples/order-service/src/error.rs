//! The service's own errors, as RFC 9457 problem+json.

use actix_web::http::StatusCode;
use actix_web::http::header::RETRY_AFTER;
use actix_web::{HttpResponse, ResponseError};
use idem_runtime::{MarkRetryable, StepError};
use serde::Serialize;

use crate::repo::RepoError;

/// What a route can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
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
    Signature(#[from] order_service::signature::SignatureError),
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

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Invalid(_) | Self::Signature(_) => StatusCode::BAD_REQUEST,
            Self::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Backend(_) | Self::ProviderUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Declined => StatusCode::PAYMENT_REQUIRED,
            Self::ProviderTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::ProviderOutcomeUnknown => StatusCode::BAD_GATEWAY,
            Self::Step(error) => error.status_code(),
        }
    }

    /// The problem. A 503 says when to retry (`Retry-After`), and is marked
    /// [retryable](MarkRetryable), so that the runtime keeps no record of
    /// it and the same request may run again:
    ///
    /// - the provider refused before charging: nothing happened;
    /// - a backend call failed (a blip of the database, a connection lost
    ///   in a restart or a failover, a pool timeout): running the request
    ///   again repeats nothing, because every write of this service is
    ///   either safe to repeat (the order and payment ids come from the
    ///   execution's derived keys, the provider deduplicates charges by
    ///   its derived key, a refund counts once per event id) or, on
    ///   Postgres, in the handler's transaction, which the runtime rolls
    ///   back for a retryable answer.
    ///
    /// Every other failure is stored and replayed like any answer: a 504
    /// after the charge must never charge again.
    fn error_response(&self) -> HttpResponse {
        if let Self::Backend(error) = self {
            tracing::error!(%error, "backend call failed");
        }
        if let Self::Step(error) = self {
            return error.error_response();
        }
        let (slug, title) = self.slug();
        let status = self.status_code();
        let problem = Problem {
            detail: self.to_string(),
            status: status.as_u16(),
            title,
            kind: format!("urn:order-service:problem:{slug}"),
        };
        let mut response = HttpResponse::build(status);
        response.content_type("application/problem+json");
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.insert_header((RETRY_AFTER, RETRY_AFTER_SECONDS));
        }
        let response = response.json(problem);
        if matches!(self, Self::ProviderUnavailable | Self::Backend(_)) { response.retryable() } else { response }
    }
}

/// When a client may retry a 503, in seconds.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn a_backend_failure_says_when_to_retry_and_is_not_kept() {
        let response = ApiError::Backend(RepoError::new("redis", "broken pipe")).error_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
        assert!(response.is_retryable(), "the runtime keeps no record of it: the same request runs again");
        let declined = ApiError::Declined.error_response();
        assert!(!declined.is_retryable() && !declined.headers().contains_key(RETRY_AFTER));
    }

    #[actix_web::test]
    async fn problems_keep_their_wire_format() {
        let response = ApiError::NotFound("o1".into()).error_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers().get("content-type").unwrap(), "application/problem+json");
        let body = actix_web::body::to_bytes(response.into_body()).await.unwrap();
        assert_eq!(
            body,
            r#"{"detail":"no order o1 for this user","status":404,"title":"Order not found","type":"urn:order-service:problem:not-found"}"#
        );
    }
}
