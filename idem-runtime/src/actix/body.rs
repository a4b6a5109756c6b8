//! Buffering the request body, within the configured limit, and refusing a
//! body that is content-encoded (§4.4 of the behaviour contract: a body is
//! never fingerprinted by its wire bytes).

use actix_web::dev::Payload;
use actix_web::http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, HeaderMap, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use super::problem::{self, ProblemKind};

/// Largest buffer reserved from a declared `Content-Length` before data arrives.
const INITIAL_CAPACITY: u64 = 64 << 10;

/// Longest part of a refused `Content-Encoding` value echoed in a problem.
const MAX_ECHOED_CODING: usize = 40;

/// Reads the whole body, or answers 415 when it is content-encoded (before
/// reading any of it), or 413 as soon as it is known to be over `limit`
/// (from `Content-Length`, or while reading).
pub(crate) async fn buffer(req: &HttpRequest, mut payload: Payload, limit: usize) -> Result<Bytes, HttpResponse> {
    if let Some(coding) = content_coding(req.headers()) {
        return Err(unsupported_encoding(&coding));
    }
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
    let unreadable = |error: actix_web::error::PayloadError| {
        let status = error.status_code();
        let detail = format!("the request body could not be read: {error}");
        let mut response = problem::response(ProblemKind::InvalidBody, &detail);
        *response.status_mut() = status;
        response
    };
    // A body that comes in one chunk (most small ones) is that chunk, not
    // a copy of it.
    let first = match payload.next().await {
        None => return Ok(Bytes::new()),
        Some(chunk) => chunk.map_err(unreadable)?,
    };
    if first.len() > limit {
        return Err(too_large(&format!("more than {}", first.len())));
    }
    let Some(second) = payload.next().await else { return Ok(first) };
    let mut body = BytesMut::with_capacity(capacity.max(first.len()));
    body.extend_from_slice(&first);
    let mut next = Some(second);
    while let Some(chunk) = next {
        let chunk = chunk.map_err(unreadable)?;
        if body.len() + chunk.len() > limit {
            return Err(too_large(&format!("more than {}", body.len() + chunk.len())));
        }
        body.extend_from_slice(&chunk);
        next = payload.next().await;
    }
    Ok(body.freeze())
}

/// The first content coding of the request other than `identity`, as
/// written (or a note that the header is not readable text), if any.
///
/// `Content-Encoding` is a comma-separated list, possibly over several
/// header lines; codings are case-insensitive and `identity` (or an empty
/// element) means no coding at all.
fn content_coding(headers: &HeaderMap) -> Option<String> {
    for value in headers.get_all(CONTENT_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Some("(not readable as text)".to_owned());
        };
        let coding = value
            .split(',')
            .map(|coding| coding.trim_matches([' ', '\t']))
            .find(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
        if let Some(coding) = coding {
            return Some(coding.chars().take(MAX_ECHOED_CODING).collect());
        }
    }
    None
}

/// The 415 for a content-encoded body, with `Accept-Encoding: identity`
/// (RFC 9110, 15.5.16: the codings that would have been accepted).
fn unsupported_encoding(coding: &str) -> HttpResponse {
    let detail = format!(
        "the request body has Content-Encoding `{coding}`; an idempotent request is recognized by its \
         content, and this server does not decode request bodies: send the body without \
         Content-Encoding (the request was not processed)"
    );
    let mut response = problem::response(ProblemKind::UnsupportedContentEncoding, &detail);
    response.headers_mut().insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    response
}

#[cfg(test)]
mod tests {
    use actix_web::http::StatusCode;
    use actix_web::test::TestRequest;

    use super::*;

    fn coding(values: &[&str]) -> Option<String> {
        let mut req = TestRequest::post();
        for &value in values {
            req = req.append_header((CONTENT_ENCODING, value));
        }
        content_coding(req.to_http_request().headers())
    }

    #[test]
    fn only_identity_is_no_coding() {
        assert_eq!(coding(&[]), None);
        assert_eq!(coding(&["identity"]), None);
        assert_eq!(coding(&["Identity"]), None);
        assert_eq!(coding(&[""]), None);
        assert_eq!(coding(&[" identity , identity"]), None);
        assert_eq!(coding(&["gzip"]).as_deref(), Some("gzip"));
        assert_eq!(coding(&["identity, GZip"]).as_deref(), Some("GZip"));
        assert_eq!(coding(&["identity", "br"]).as_deref(), Some("br"));
        assert_eq!(coding(&["x".repeat(100).as_str()]).map(|c| c.len()), Some(MAX_ECHOED_CODING));
    }

    #[test]
    fn an_unreadable_coding_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_bytes(b"gz\xffip").unwrap());
        assert_eq!(content_coding(&headers).as_deref(), Some("(not readable as text)"));
    }

    #[test]
    fn the_refusal_is_415_and_names_what_is_accepted() {
        let response = unsupported_encoding("gzip");
        assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(response.headers().get(ACCEPT_ENCODING).unwrap(), "identity");
        assert_eq!(response.headers().get("content-type").unwrap(), "application/problem+json");
    }
}
