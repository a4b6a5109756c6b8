//! The service's own errors, as RFC 9457 problem+json.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
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
}

impl ApiError {
    fn slug(&self) -> (&'static str, &'static str) {
        match self {
            Self::Invalid(_) => ("invalid-request", "Invalid request"),
            Self::Unauthenticated => ("unauthenticated", "Authentication required"),
            Self::NotFound(_) => ("not-found", "Order not found"),
            Self::Backend(_) => ("backend-unavailable", "Backend unavailable"),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Backend(_) => StatusCode::SERVICE_UNAVAILABLE,
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
        HttpResponse::build(status).content_type("application/problem+json").json(problem)
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
