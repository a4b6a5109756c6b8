//! The rules of a request body (§4.3 of the behaviour contract): a limit,
//! known as soon as possible, and no content coding. Each framework reads
//! its own kind of body by these rules.

use super::head::as_text;
use super::problem::{Problem, ProblemKind};

/// Longest part of a refused `Content-Encoding` value echoed in a problem.
const MAX_ECHOED_CODING: usize = 40;

/// The 413 for a body of `size` bytes (or "more than" some), over `limit`.
pub(crate) fn too_large(size: &dyn std::fmt::Display, limit: usize) -> Problem {
    Problem::new(
        ProblemKind::BodyTooLarge,
        format!("the request body ({size} bytes) is over the limit of {limit} bytes"),
    )
}

/// The 413 for a body whose `Content-Length` is over `limit` (before any
/// of it is read), if it is; `None` without one.
pub(crate) fn declared_too_large<'a>(
    content_length: impl IntoIterator<Item = &'a [u8]>,
    limit: usize,
) -> Result<Option<u64>, Problem> {
    let declared = content_length.into_iter().next().and_then(|v| as_text(v)?.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => Err(too_large(&length, limit)),
        declared => Ok(declared),
    }
}

/// The 400 (or the transport's own status) for a body that could not be
/// read.
pub(crate) fn unreadable(error: &dyn std::fmt::Display, status: Option<u16>) -> Problem {
    let mut problem = Problem::new(ProblemKind::InvalidBody, format!("the request body could not be read: {error}"));
    problem.status = status;
    problem
}

/// The 415 for a content-encoded body (before any of it is read), if the
/// request's `Content-Encoding` values name a coding.
pub(crate) fn refuse_coding<'a>(content_encoding: impl IntoIterator<Item = &'a [u8]>) -> Option<Problem> {
    let coding = content_coding(content_encoding)?;
    let detail = format!(
        "the request body has Content-Encoding `{coding}`; an idempotent request is recognized by its \
         content, and this server does not decode request bodies: send the body without \
         Content-Encoding (the request was not processed)"
    );
    let mut problem = Problem::new(ProblemKind::UnsupportedContentEncoding, detail);
    problem.accept_identity = true;
    Some(problem)
}

/// The first content coding of the request other than `identity`, as
/// written (or a note that the header is not readable text), if any.
///
/// `Content-Encoding` is a comma-separated list, possibly over several
/// header lines; codings are case-insensitive and `identity` (or an empty
/// element) means no coding at all.
fn content_coding<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    for value in values {
        let Some(value) = as_text(value) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn coding(values: &[&str]) -> Option<String> {
        content_coding(values.iter().map(|value| value.as_bytes()))
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
        assert_eq!(content_coding([&b"gz\xffip"[..]]).as_deref(), Some("(not readable as text)"));
    }

    #[test]
    fn the_refusal_is_415_and_names_what_is_accepted() {
        let problem = refuse_coding([&b"gzip"[..]]).unwrap();
        assert_eq!(problem.status(), 415);
        assert!(problem.accept_identity);
    }

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_reading() {
        assert_eq!(declared_too_large([&b"10"[..]], 10).unwrap(), Some(10));
        assert_eq!(declared_too_large([&b"11"[..]], 10).unwrap_err().status(), 413);
        assert_eq!(declared_too_large([&b"x"[..]], 10).unwrap(), None, "unreadable: found while reading");
        assert_eq!(declared_too_large(std::iter::empty(), 10).unwrap(), None);
    }
}
