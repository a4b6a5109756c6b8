//! The service's problems as actix-web responses.

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use idem_runtime::MarkRetryable;

use crate::error::ApiError;

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Step(error) => error.status_code(),
            _ => StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    fn error_response(&self) -> HttpResponse {
        // A step's failure is the runtime's own problem, with its marks.
        if let Self::Step(error) = self {
            return error.error_response();
        }
        let answer = self.problem();
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((CONTENT_TYPE, "application/problem+json"));
        if let Some(seconds) = answer.retry_after {
            response.insert_header((RETRY_AFTER, seconds));
        }
        let response = response.body(answer.body);
        if answer.retryable { response.retryable() } else { response }
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::StatusCode;
    use actix_web::http::header::RETRY_AFTER;
    use idem_runtime::MarkRetryable;

    use super::*;
    use crate::repo::RepoError;

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
