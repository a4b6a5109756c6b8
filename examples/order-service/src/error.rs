//! The service's own errors, as RFC 9457 problem+json.

use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

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
        let body = json!({
            "type": format!("urn:order-service:problem:{slug}"),
            "title": title,
            "status": status.as_u16(),
            "detail": self.to_string(),
        });
        HttpResponse::build(status).insert_header((CONTENT_TYPE, "application/problem+json")).body(body.to_string())
    }
}
