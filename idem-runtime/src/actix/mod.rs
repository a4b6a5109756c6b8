//! The actix-web glue the `#[idempotent]` expansion calls into: the steps
//! of a request are `web/`'s, over an actix-web request.
//!
//! - [`handle`], the one entry point: the route, the span, then `web`'s
//!   steps, and a won claim run in place (on the worker's task set if the
//!   client leaves);
//! - `request.rs`: an actix-web request as `web::Incoming` (its head, its
//!   payload buffered by `body.rs`, the handler's extractors, the handler
//!   called and its response captured); `route.rs`: its route;
//! - `response.rs`: the answers made as actix-web responses, and the
//!   runtime's errors and marks as actix-web knows them;
//! - `extractors.rs`: the execution context and the transaction as
//!   extractors;
//! - `shutdown.rs`: the drain wired into actix's shutdown.

mod body;
mod extractors;
mod request;
mod response;
mod route;
mod shutdown;

use std::pin::Pin;

use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use tracing::Instrument;

use self::request::{ActixRequest, config_of};
use self::response::Actix;
use crate::web::{Answer, Detached, RouteOptions, Served, finish_detached, run, serve, span};

/// A handler `#[idempotent]` wraps: an actix-web handler whose output is a
/// responder. Named once here for every function that runs one.
#[doc(hidden)]
pub trait IdempotentHandler<Args>: actix_web::Handler<Args, Output: actix_web::Responder + 'static> {}

impl<F, Args> IdempotentHandler<Args> for F
where
    F: actix_web::Handler<Args>,
    F::Output: actix_web::Responder + 'static,
{
}

/// Serves one request to an `#[idempotent]` handler.
pub async fn handle<F, Args>(
    options: &'static RouteOptions,
    req: HttpRequest,
    payload: web::Payload,
    handler: F,
) -> HttpResponse
where
    F: IdempotentHandler<Args>,
    Args: FromRequest + 'static,
{
    // The pattern, never the raw path: metric labels and route-scoped keys
    // must not grow with what clients send.
    let route = route::of(&req);
    let span = span(req.method().as_str(), &route, options.scope);
    let served = async move {
        // The configuration borrowed through a second handle on the request
        // (a reference count of this worker's own, not shared).
        let head = req.clone();
        let incoming = ActixRequest::new(req, payload.into_inner(), handler);
        let (response, counted) = match serve(options, &route, config_of(&head), incoming).await {
            Served::Answered(answer) => answer,
            Served::Claimed(won, incoming, args) => {
                Detached::<Actix, _>::new(&route, run(won, incoming, args), finish_on_worker).await
            }
        };
        // The request ends here: counted now, unless its execution counted
        // it where it settled (see `Counted`).
        counted.tally(&route);
        response
    };
    served.instrument(span).await
}

/// Finishes an execution whose client left on the worker's task set.
fn finish_on_worker<W>(work: Pin<Box<W>>, route: crate::web::Route, span: tracing::Span) -> bool
where
    W: std::future::Future<Output = Answer<Actix>> + 'static,
{
    // Outside a task set (a plain Tokio runtime) there is nowhere to finish
    // it: the spawn panics, which the caller catches.
    drop(actix_web::rt::spawn(finish_detached::<Actix, W>(work, route).instrument(span)));
    true
}
