//! The service's extractors on axum: the caller, and a JSON body or a path
//! refused as the service's own 400 problem (as actix-web's are, by the
//! error handlers the actix routes register), and a webhook body whose
//! signature checked out.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::Shared;
use crate::app::caller;
use crate::error::ApiError;
use crate::signature::HEADER;
use crate::webhooks::verified;

/// The caller, from `X-User-ID`.
pub(super) struct User(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for User {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let value = parts.headers.get("x-user-id").and_then(|value| value.to_str().ok());
        caller(value).map(User).ok_or(ApiError::Unauthenticated)
    }
}

/// A JSON body.
pub(super) struct ApiJson<T>(pub(super) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::Invalid(rejection.body_text())),
        }
    }
}

/// A path parameter.
pub(super) struct ApiPath<T>(pub(super) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::Invalid(rejection.body_text())),
        }
    }
}

/// A webhook body whose signature checked out, parsed as `T`.
pub(super) struct Verified<T>(pub(super) T);

impl<T: DeserializeOwned> FromRequest<Shared> for Verified<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, shared: &Shared) -> Result<Self, ApiError> {
        let header = req.headers().get(HEADER).map(|value| value.as_bytes().to_vec());
        let body = axum::body::Bytes::from_request(req, shared)
            .await
            .map_err(|error| ApiError::Invalid(format!("unreadable body: {}", error.body_text())))?;
        verified(&shared.app, header.as_deref(), &body).map(Verified)
    }
}
