//! The extractor that checks a delivery's signature before anything reads
//! its body (see `webhooks::verified`).

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use serde::de::DeserializeOwned;

use crate::app::AppState;
use crate::error::ApiError;
use crate::signature::HEADER;
use crate::webhooks::verified;

/// A webhook body whose signature checked out, parsed as `T`.
pub(super) struct Verified<T>(pub(super) T);

impl<T: DeserializeOwned + 'static> FromRequest for Verified<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let header = req.headers().get(HEADER).map(|value| value.as_bytes().to_vec());
        let body = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let state = state.ok_or(ApiError::Misconfigured("the routes' state is not registered"))?;
            let body = body.await.map_err(|error| ApiError::Invalid(format!("unreadable body: {error}")))?;
            verified(&state, header.as_deref(), &body).map(Verified)
        })
    }
}
