//! Buffering the request body, within the configured limit.

use actix_web::dev::Payload;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use super::problem::{self, ProblemKind};

/// Largest buffer reserved from a declared `Content-Length` before data arrives.
const INITIAL_CAPACITY: u64 = 64 << 10;

/// Reads the whole body, or answers 413 as soon as it is known to be over
/// `limit` (from `Content-Length`, or while reading).
pub(crate) async fn buffer(req: &HttpRequest, mut payload: Payload, limit: usize) -> Result<Bytes, HttpResponse> {
    let too_large = |size: &dyn std::fmt::Display| {
        problem::response(
            ProblemKind::BodyTooLarge,
            &format!("the request body ({size} bytes) is over the limit of {limit} bytes"),
        )
    };
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared.filter(|&length| length > limit as u64) {
        return Err(too_large(&length));
    }
    // Trust a declared length only so far: a client that declares 1 MiB and
    // then trickles must not pin 1 MiB per connection up front.
    let capacity = declared.map_or(0, |l| l.min(INITIAL_CAPACITY) as usize);
    let mut body = BytesMut::with_capacity(capacity);
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|error| {
            let status = error.status_code();
            let detail = format!("the request body could not be read: {error}");
            let mut response = problem::response(ProblemKind::InvalidBody, &detail);
            *response.status_mut() = status;
            response
        })?;
        if body.len() + chunk.len() > limit {
            return Err(too_large(&format!("more than {}", body.len() + chunk.len())));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}
