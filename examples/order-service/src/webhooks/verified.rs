//! The extractor that checks a delivery's signature ([`order_service::signature`])
//! before anything reads its body.
//!
//! Under `#[idempotent]` extractors run before the key is claimed, so a
//! forged request with a real event id is refused before it can touch that
//! id, and the genuine event still runs.

use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use order_service::signature::{HEADER, WebhookSecret};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A webhook body whose signature checked out, parsed as `T`.
pub struct Verified<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for Verified<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let secret = req.app_data::<web::Data<WebhookSecret>>().cloned();
        let header = req.headers().get(HEADER).map(|value| value.as_bytes().to_vec());
        let body = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let secret = secret.ok_or(ApiError::Misconfigured("no webhook secret is registered"))?;
            let body = body.await.map_err(|error| ApiError::Invalid(format!("unreadable body: {error}")))?;
            secret.verify(header.as_deref(), &body, SystemTime::now())?;
            let event = serde_json::from_slice(&body).map_err(|error| ApiError::Invalid(error.to_string()))?;
            Ok(Verified(event))
        })
    }
}
