//! `#[idempotent]` on axum handlers, and the same engine as a tower layer
//! for routes configured without the attribute (feature `axum`).
//!
//! ```no_run
//! use axum::{Json, Router, routing::post};
//! use idem_runtime::axum::idempotent;
//! use idem_runtime::{Idem, MemoryStore};
//!
//! #[idempotent(ttl = "24h", scope = "user")]
//! async fn create_order(Json(order): Json<serde_json::Value>) -> Json<serde_json::Value> {
//!     Json(order)
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let idem = Idem::new(MemoryStore::new()).subject(|req| req.header("x-user-id").map(str::to_owned));
//! let app = Router::new().route("/orders", post(create_order)).layer(idem.layer());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! The attribute takes the same arguments, with the same compile-time
//! checks, as on actix-web; the steps of a request, its answers and its
//! problems are the same (`web/`). The handler keeps its own extractors
//! (`Json`, `Path`, `State`, `Extension`, `Bytes`, `String`, any
//! `FromRequest`); they run over the buffered body before the claim.
//!
//! - [`handle`]: the entry point of an annotated handler;
//! - `handler.rs`: a handler's extractors apart from its call;
//! - `request.rs`: an axum request as `web::Incoming`; `response.rs`: the
//!   answers as axum responses;
//! - `extractors.rs`: the execution context and the transaction as
//!   extractors;
//! - `layer.rs`: [`IdempotentLayer`], for routes without the attribute.

mod extractors;
mod handler;
mod layer;
mod request;
mod response;

use std::future::Future;
use std::pin::Pin;

use axum::extract::Request;
use axum::response::Response;
use tracing::Instrument;

#[doc(hidden)]
pub use self::handler::{Call, Extract};
pub use self::layer::{IdempotentLayer, IdempotentLayerBuilder, IdempotentService, InvalidLayer};
use self::request::{Arguments, AxumRequest, Extracted, Handler, Serve, config_of, route_of};
use self::response::Axum;
use crate::problem::ProblemKind;
use crate::web::{
    Annotated, Answer, Detached, Framework, Idem, MarkRetryable, Problem, Route, RouteOptions, Served, finish_detached,
    run, serve, span,
};
pub use idem_macros::idempotent_axum as idempotent;

impl Idem {
    /// The layer that registers this configuration on an axum `Router`
    /// (or on one route): every `#[idempotent]` handler and every
    /// [`IdempotentLayer`] under it finds it there.
    ///
    /// ```no_run
    /// # use axum::{Router, routing::post};
    /// # use idem_runtime::{Idem, MemoryStore};
    /// # async fn create_order() {}
    /// let idem = Idem::new(MemoryStore::new());
    /// let app: Router = Router::new().route("/orders", post(create_order)).layer(idem.layer());
    /// ```
    pub fn layer(&self) -> axum::Extension<Idem> {
        axum::Extension(self.clone())
    }
}

/// The future an `#[idempotent]` axum handler answers with.
#[doc(hidden)]
pub type Answering = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Serves one request to an `#[idempotent]` axum handler: `T` is the
/// handler's argument list, `M` axum's marker of how its last argument
/// extracts.
#[doc(hidden)]
pub async fn handle<H, T, S, M>(options: &'static RouteOptions, req: Request, state: S, handler: H) -> Response
where
    H: Call<T>,
    T: Extract<S, M>,
    S: Send + Sync + 'static,
    M: 'static,
{
    served::<Extracted<T, M>, Handler<H>, S>(options, req, state, Handler(handler)).await
}

/// Serves one request whose arguments are `A`, served by `serve`.
async fn served<A, V, S>(options: &'static RouteOptions, req: Request, state: S, serve_with: V) -> Response
where
    A: Arguments<S>,
    V: Serve<A>,
    S: Send + Sync + 'static,
{
    let (parts, body) = req.into_parts();
    if parts.extensions.get::<Annotated>().is_some() {
        // An `IdempotentLayer` around a handler under the attribute, or two
        // layers: the inner claim would find the outer one in flight, and
        // the outer would keep that 409 for the key.
        tracing::error!("a request is served under two idempotency claims (IdempotentLayer around #[idempotent])");
        let detail = "this route is made idempotent twice (an IdempotentLayer around a handler under \
                      #[idempotent], or two layers); keep one";
        return Axum::problem(Problem::new(ProblemKind::NotConfigured, detail)).retryable();
    }
    // The pattern, never the raw path: metric labels and route-scoped keys
    // must not grow with what clients send.
    let route = Route::named(route_of(&parts), parts.method.as_str());
    let config = config_of(&parts);
    let span = span(parts.method.as_str(), &route, options.scope);
    let req = Request::from_parts(parts, body);
    let answered = async move {
        let incoming = AxumRequest::<A, V, S>::new(options, req, state, serve_with).await;
        let (response, counted) = match serve(options, &route, config.as_ref(), incoming).await {
            Served::Answered(answer) => answer,
            Served::Claimed(won, incoming, args) => {
                Detached::<Axum, _>::new(&route, run(won, incoming, args), finish_on_runtime).await
            }
        };
        // The request ends here: counted now, unless its execution counted
        // it where it settled (see `Counted`).
        counted.tally(&route);
        response
    };
    answered.instrument(span).await
}

/// Finishes an execution whose client left on a task of the runtime.
fn finish_on_runtime<W>(work: Pin<Box<W>>, route: Route, span: tracing::Span) -> bool
where
    W: Future<Output = Answer<Axum>> + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return false };
    drop(runtime.spawn(finish_detached::<Axum, W>(work, route).instrument(span)));
    true
}
