//! The service's own errors, as RFC 9457 problem+json.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use idem_runtime::MarkRetryable;
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
    /// The backend failed (503).
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
    /// A webhook delivery whose signature does not check out (400; nothing
    /// recorded).
    #[error(transparent)]
    Signature(#[from] order_service::signature::SignatureError),
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
            Self::Signature(_) => ("invalid-signature", "Invalid webhook signature"),
            Self::Misconfigured(_) => ("misconfigured", "Service misconfigured"),
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
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Backend(error) = self {
            tracing::error!(%error, "backend call failed");
        }
        let (slug, title) = self.slug();
        let status = self.status_code();
        let problem = Problem {
            detail: self.to_string(),
            status: status.as_u16(),
            title,
            kind: format!("urn:order-service:problem:{slug}"),
        };
        let response = HttpResponse::build(status).content_type("application/problem+json").json(problem);
        // Only an answer that certainly changed nothing may run again.
        if matches!(self, Self::ProviderUnavailable) { response.retryable() } else { response }
    }
}

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
