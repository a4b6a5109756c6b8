//! Buffering an actix-web request body up to the configured limit (§4.3 of
//! the behaviour contract), by the rules of `web::body`.

use actix_web::dev::Payload;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::{HttpRequest, ResponseError};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use crate::web::Problem;
use crate::web::body::{declared_too_large, too_large, unreadable};

/// Largest buffer reserved from a declared `Content-Length` before data
/// arrives: a client that declares 1 MiB and then trickles must not pin
/// 1 MiB per connection up front.
const INITIAL_CAPACITY: usize = 64 << 10;

/// Reads the whole body, or refuses it (413) as soon as it is known to be
/// over `limit` (from `Content-Length`, or while reading).
pub(super) async fn buffer(req: &HttpRequest, mut payload: Payload, limit: usize) -> Result<Bytes, Problem> {
    let declared = declared_too_large(req.headers().get_all(CONTENT_LENGTH).map(|v| v.as_bytes()), limit)?;
    let capacity = declared.map_or(0, |length| length.min(INITIAL_CAPACITY as u64) as usize);
    let unreadable = |error: actix_web::error::PayloadError| unreadable(&error, Some(error.status_code().as_u16()));
    // A body that comes in one chunk (most small ones) is that chunk, not
    // a copy of it.
    let first = match payload.next().await {
        None => return Ok(Bytes::new()),
        Some(chunk) => chunk.map_err(unreadable)?,
    };
    if first.len() > limit {
        return Err(too_large(&format!("more than {}", first.len()), limit));
    }
    let Some(second) = payload.next().await else { return Ok(first) };
    let mut body = BytesMut::with_capacity(capacity.max(first.len()));
    body.extend_from_slice(&first);
    let mut next = Some(second);
    while let Some(chunk) = next {
        let chunk = chunk.map_err(unreadable)?;
        if body.len() + chunk.len() > limit {
            return Err(too_large(&format!("more than {}", body.len() + chunk.len()), limit));
        }
        body.extend_from_slice(&chunk);
        next = payload.next().await;
    }
    Ok(body.freeze())
}
