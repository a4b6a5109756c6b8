//! The handler's word that nothing happened: a retryable response; and the
//! runtime's own marks on a response.
//!
//! Every response of an idempotent handler is kept and replayed, failures
//! included (4xx, 5xx, a panic as a 500 problem), because a handler that
//! failed half way may already have charged (§4.8 of the behaviour
//! contract). A handler that *knows* nothing happened (the payment provider
//! was unreachable before any charge, say) marks its response retryable:
//! then the claim is released instead, and the same request may run again.
//! A different request with the same key is still refused (422).
//!
//! The marks live in the response's extensions, in either framework; each
//! framework's glue implements [`MarkRetryable`] for its response and
//! makes [`Retryable`] one of its responders.

use super::problem::StepEnd;

/// The mark, kept in the response's extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryableMark;

/// Marks responses as retryable: "nothing happened, the same request may
/// run again". Implemented for actix-web's `HttpResponse` (feature
/// `actix`) and for `http::Response`, axum's response (feature `axum`).
///
/// ```
/// # #[cfg(feature = "actix")] {
/// use actix_web::HttpResponse;
/// use idem_runtime::MarkRetryable;
///
/// // In a handler, or in an error type's `ResponseError::error_response`:
/// let response = HttpResponse::ServiceUnavailable().body("provider unavailable, nothing was charged").retryable();
/// assert!(response.is_retryable());
/// # }
/// ```
pub trait MarkRetryable {
    /// The same response, marked retryable.
    #[must_use]
    fn retryable(self) -> Self;

    /// Whether the response is marked retryable.
    fn is_retryable(&self) -> bool;
}

/// A response whose response is marked retryable, for handlers that return
/// `impl Responder` (actix-web) or `impl IntoResponse` (axum):
///
/// ```
/// # #[cfg(feature = "actix")] {
/// use actix_web::{HttpResponse, Responder};
/// use idem_runtime::Retryable;
///
/// async fn pay() -> impl Responder {
///     // The provider refused the connection: nothing was charged.
///     Retryable(HttpResponse::ServiceUnavailable().finish())
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Retryable<R>(pub R);

/// What a handler's response says of itself, read from its marks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Marks {
    /// The handler marked it retryable.
    pub(crate) retryable: bool,
    /// A durable step's failure: kept whatever the policies say, or left
    /// held for an operator.
    pub(crate) step: Option<StepEnd>,
}

/// Whether `status` is a failure (4xx or 5xx).
pub(crate) fn is_failure_status(status: u16) -> bool {
    (400..600).contains(&status)
}
