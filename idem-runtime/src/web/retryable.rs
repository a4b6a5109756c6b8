//! The handler's word that nothing happened: a retryable response.
//!
//! Every response of an idempotent handler is kept and replayed, failures
//! included (4xx, 5xx, a panic as a 500 problem), because a handler that
//! failed half way may already have charged (§4.8 of the behaviour
//! contract). A handler that *knows* nothing happened (the payment provider
//! was unreachable before any charge, say) marks its response retryable:
//! then the claim is released instead, and the same request may run again.
//! A different request with the same key is still refused (422).

use actix_web::body::BoxBody;
use actix_web::{HttpRequest, HttpResponse, Responder};

/// The mark, kept in the response's extensions.
#[derive(Debug, Clone, Copy)]
struct RetryableMark;

/// Marks responses as retryable: "nothing happened, the same request may
/// run again".
///
/// ```
/// use actix_web::HttpResponse;
/// use idem_runtime::MarkRetryable;
///
/// // In a handler, or in an error type's `ResponseError::error_response`:
/// let response = HttpResponse::ServiceUnavailable().body("provider unavailable, nothing was charged").retryable();
/// assert!(response.is_retryable());
/// ```
pub trait MarkRetryable {
    /// The same response, marked retryable.
    #[must_use]
    fn retryable(self) -> Self;

    /// Whether the response is marked retryable.
    fn is_retryable(&self) -> bool;
}

impl<B> MarkRetryable for HttpResponse<B> {
    fn retryable(mut self) -> Self {
        self.extensions_mut().insert(RetryableMark);
        self
    }

    fn is_retryable(&self) -> bool {
        self.extensions().contains::<RetryableMark>()
    }
}

/// A responder whose response is marked retryable, for handlers that
/// return `impl Responder`:
///
/// ```
/// use actix_web::{HttpResponse, Responder};
/// use idem_runtime::Retryable;
///
/// async fn pay() -> impl Responder {
///     // The provider refused the connection: nothing was charged.
///     Retryable(HttpResponse::ServiceUnavailable().finish())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Retryable<R>(pub R);

impl<R: Responder> Responder for Retryable<R> {
    type Body = BoxBody;

    fn respond_to(self, req: &HttpRequest) -> HttpResponse<BoxBody> {
        self.0.respond_to(req).map_into_boxed_body().retryable()
    }
}

/// Whether the handler marked `response` retryable.
pub(crate) fn is_marked(response: &HttpResponse<BoxBody>) -> bool {
    response.is_retryable()
}

/// The runtime's own mark on a failure that must be kept whatever the 5xx
/// policy: a durable step's failure (`step-failed`), after which the step's
/// effect may have happened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeptMark;

/// The runtime's own mark on a response after which the execution stops
/// without completing or releasing: a durable step found its record held
/// for an operator, who settles it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeftHeldMark;

/// Whether `response` carries [`LeftHeldMark`].
pub(crate) fn is_left_held(response: &HttpResponse<BoxBody>) -> bool {
    response.extensions().contains::<LeftHeldMark>()
}

/// Whether `response` carries [`KeptMark`].
pub(crate) fn is_kept(response: &HttpResponse<BoxBody>) -> bool {
    response.extensions().contains::<KeptMark>()
}
