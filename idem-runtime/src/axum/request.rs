//! An axum request as the steps of `web/` see it: a handler's request, or
//! the request a layer passes on to its inner service.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, OriginalUri, RawPathParams, Request};
use axum::response::Response;
use bytes::Bytes;
use futures_util::FutureExt;
use http::Method;
use http::request::Parts;
use http_body_util::BodyExt;
use parking_lot::Mutex;

use super::handler::{Call, Extract};
use super::response::{Axum, capture, without_replayed};
use crate::web::body::{declared_too_large, too_large, unreadable};
use crate::web::{
    Annotated, Captured, Config, Framework, Idem, Incoming, KeyPart, KeySource, NotUtf8, Panicked, PendingContext,
    Problem, RequestHead, RouteOptions, UNMATCHED_ROUTE,
};

/// The configuration of the request, as [`Idem::layer`] put it in its
/// extensions.
pub(super) fn config_of(parts: &Parts) -> Option<Arc<Config>> {
    parts.extensions.get::<Idem>().map(|idem| Arc::clone(&idem.inner))
}

/// The request's URI as the client sent it: a nested router strips its
/// prefix from the one it hands on (`/orders/{id}` off
/// `/orders/A/payments`), and two requests that differ only there are two
/// requests (§4.4 of the behaviour contract).
pub(super) fn uri_of(parts: &Parts) -> &http::Uri {
    parts.extensions.get::<OriginalUri>().map_or(&parts.uri, |original| &original.0)
}

/// The route of the request: the pattern axum matched (the nested routers'
/// prefixes included).
pub(super) fn route_of(parts: &Parts) -> &str {
    parts.extensions.get::<MatchedPath>().map_or(UNMATCHED_ROUTE, MatchedPath::as_str)
}

/// The slots the runtime's own extractors leave, shared between the
/// runtime and the request's extensions (an extractor of the last
/// argument takes the whole request, so a slot in its extensions would be
/// out of the runtime's reach).
#[derive(Clone, Default)]
pub(super) struct Slots(Arc<Mutex<Left>>);

/// The mark of a request whose service's extractors run after the claim
/// (a layer's): a transaction cannot be lent to them, as the runtime opens
/// it before the service runs, not knowing whether it takes one.
#[derive(Clone, Copy, Debug)]
pub(super) struct AfterTheClaim;

/// What the runtime's extractors left.
#[derive(Default)]
pub(super) struct Left {
    pub(super) context: Option<PendingContext>,
    #[cfg(feature = "postgres")]
    pub(super) tx: Option<crate::web::PendingTx>,
}

impl Slots {
    /// What the extractors left, to read or fill.
    pub(super) fn left(&self) -> parking_lot::MutexGuard<'_, Left> {
        self.0.lock()
    }
}

/// How an axum request is served once its arguments are extracted.
pub(super) trait Serve<Args>: Send + Sync + 'static {
    /// Serves the request with `args`: the handler called, or the inner
    /// service of a layer.
    fn serve(&self, args: Args) -> impl Future<Output = Response> + Send;
}

/// A handler, served with its arguments.
pub(super) struct Handler<H>(pub(super) H);

impl<H: Call<T>, T: Send + 'static, M: 'static> Serve<Extracted<T, M>> for Handler<H> {
    fn serve(&self, args: Extracted<T, M>) -> impl Future<Output = Response> + Send {
        self.0.clone().call(args.0)
    }
}

/// How the arguments of a request are made from it.
pub(super) trait Arguments<S>: Sized + Send + 'static {
    /// Whether the service's extractors run only once the claim is won (a
    /// layer's service), not before it (a handler under the attribute).
    const AFTER_THE_CLAIM: bool = false;

    /// The arguments, or the refusal of the first extractor that refused.
    fn make(req: Request, state: &S) -> impl Future<Output = Result<Self, Response>> + Send;
}

/// A handler's arguments, made by its extractors (`M` is axum's marker of
/// how the last one extracts).
pub(super) struct Extracted<T, M>(pub(super) T, PhantomData<fn() -> M>);

impl<S: Send + Sync, T: Extract<S, M>, M: 'static> Arguments<S> for Extracted<T, M> {
    async fn make(req: Request, state: &S) -> Result<Self, Response> {
        T::extract(req, state).await.map(|args| Self(args, PhantomData))
    }
}

/// The request itself, with its buffered body, for a layer's inner service.
impl<S: Send + Sync> Arguments<S> for Request {
    const AFTER_THE_CLAIM: bool = true;

    async fn make(req: Request, _: &S) -> Result<Self, Response> {
        Ok(req)
    }
}

/// One request to an `#[idempotent]` axum handler, or to a route under
/// the idempotency layer.
pub(super) struct AxumRequest<A, V, S> {
    method: Method,
    /// The request's head, until its arguments are made.
    parts: Option<Parts>,
    /// Its body, until it is read.
    body: Option<Body>,
    /// Its path parameters, when its route reads its key from one.
    params: Option<Result<RawPathParams, NotUtf8>>,
    state: S,
    serve: V,
    slots: Slots,
    arguments: PhantomData<fn() -> A>,
}

impl<A: Arguments<S>, V: Serve<A>, S: Send + Sync> AxumRequest<A, V, S> {
    /// The request `req` to a route with `options`, served by `serve`.
    pub(super) async fn new(options: &RouteOptions, req: Request, state: S, serve: V) -> Self {
        let (mut parts, body) = req.into_parts();
        let reads_params = match options.key {
            KeySource::Path(_) | KeySource::Computed(_) => true,
            KeySource::Composite(parts) => parts.iter().any(|part| matches!(part, KeyPart::Path(_))),
            KeySource::Header | KeySource::Json(_) => false,
        };
        let params = if reads_params {
            match RawPathParams::from_request_parts(&mut parts, &state).await {
                Ok(params) => Some(Ok(params)),
                Err(axum::extract::rejection::RawPathParamsRejection::InvalidUtf8InPathParam(_)) => Some(Err(NotUtf8)),
                Err(_) => None,
            }
        } else {
            None
        };
        Self {
            method: parts.method.clone(),
            parts: Some(parts),
            body: Some(body),
            params,
            state,
            serve,
            slots: Slots::default(),
            arguments: PhantomData,
        }
    }

    fn parts(&self) -> Option<&Parts> {
        self.parts.as_ref()
    }
}

impl<A: Arguments<S>, V: Serve<A>, S: Send + Sync> Incoming for AxumRequest<A, V, S> {
    type Framework = Axum;
    type Args = A;

    fn method(&self) -> &str {
        self.method.as_str()
    }

    fn path(&self) -> &str {
        self.parts().map_or("", |parts| uri_of(parts).path())
    }

    fn query(&self) -> &str {
        self.parts().and_then(|parts| uri_of(parts).query()).unwrap_or("")
    }

    fn header_values<'a>(&'a self, name: &'static str) -> impl Iterator<Item = &'a [u8]> + 'a {
        // Looked up by name, any case, without a copy of it.
        let values = self.parts().map(|parts| parts.headers.get_all(name));
        values.into_iter().flatten().map(|value| value.as_bytes())
    }

    fn path_param(&self, name: &str) -> Option<Result<Cow<'_, str>, NotUtf8>> {
        match self.params.as_ref()? {
            Ok(params) => params.iter().find(|(key, _)| *key == name).map(|(_, value)| Ok(Cow::Borrowed(value))),
            Err(NotUtf8) => Some(Err(NotUtf8)),
        }
    }

    fn host(&self) -> &str {
        // The `Host` header, else the request target's authority (HTTP/2's
        // `:authority`).
        let Some(parts) = self.parts() else { return "" };
        match parts.headers.get(http::header::HOST) {
            Some(host) => host.to_str().unwrap_or(""),
            None => parts.uri.authority().map_or("", |authority| authority.host()),
        }
    }

    fn head(&self) -> RequestHead<'_> {
        // The head is read before the arguments are made, which take it.
        static NONE: std::sync::LazyLock<Parts> = std::sync::LazyLock::new(|| Request::new(()).into_parts().0);
        RequestHead::axum(self.parts().unwrap_or(&NONE))
    }

    async fn buffer(&mut self, limit: usize) -> Result<Bytes, Problem> {
        let headers = self.parts.as_ref().map(|parts| &parts.headers);
        let lengths = headers.into_iter().flat_map(|headers| headers.get_all(http::header::CONTENT_LENGTH));
        declared_too_large(lengths.map(http::HeaderValue::as_bytes), limit)?;
        let body = self.body.take().unwrap_or_default();
        match http_body_util::Limited::new(body, limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            // This limit's, or an outer layer's (`RequestBodyLimitLayer`),
            // wrapped in the body's error.
            Err(error) if over_a_limit(&*error) => Err(too_large(&format!("more than {limit}"), limit)),
            Err(error) => Err(unreadable(&error, None)),
        }
    }

    async fn extract(&mut self, body: Bytes, annotated: Annotated) -> Result<A, Response> {
        let mut parts = self.parts.take().unwrap_or_else(|| Request::new(Body::empty()).into_parts().0);
        parts.extensions.insert(annotated);
        if A::AFTER_THE_CLAIM {
            // The service's extractors run after the claim: the context they
            // may take is made now, filled at the claim, found by them then.
            self.slots.left().context = Some(PendingContext::new().0);
            parts.extensions.insert(AfterTheClaim);
        }
        parts.extensions.insert(self.slots.clone());
        A::make(Request::from_parts(parts, Body::from(body)), &self.state).await
    }

    fn take_context(&self) -> Option<PendingContext> {
        let mut left = self.slots.left();
        if A::AFTER_THE_CLAIM { left.context.clone() } else { left.context.take() }
    }

    #[cfg(feature = "postgres")]
    fn take_tx(&self) -> Option<crate::web::PendingTx> {
        self.slots.left().tx.take()
    }

    async fn call(&mut self, args: A, limit: usize) -> Result<Captured<Axum>, Panicked> {
        let work = async { capture(self.serve.serve(args).await, limit).await };
        AssertUnwindSafe(work).catch_unwind().await.map_err(|_| {
            tracing::error!("the idempotent handler panicked");
            Panicked
        })
    }

    fn without_key(self, config: Arc<Config>, body: Option<Bytes>) -> impl Future<Output = Response> {
        run_without_key(config, self, body)
    }
}

/// Whether `error`, or an error it wraps, is a body over a length limit.
fn over_a_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// `required = false` and no key: the handler runs as if not annotated
/// (a `Tx` it takes is committed when it returns, unless its response is
/// retryable). Not counted: only requests with a key are.
async fn run_without_key<A, V, S>(
    config: Arc<Config>,
    mut incoming: AxumRequest<A, V, S>,
    body: Option<Bytes>,
) -> Response
where
    A: Arguments<S>,
    V: Serve<A>,
    S: Send + Sync,
{
    let Some(mut parts) = incoming.parts.take() else {
        return Axum::problem(Problem::new(crate::problem::ProblemKind::InvalidBody, "the request was already read"));
    };
    parts.extensions.insert(Annotated::Keyless);
    parts.extensions.insert(incoming.slots.clone());
    let body = match body {
        Some(body) => Body::from(body),
        None => incoming.body.take().unwrap_or_default(),
    };
    let args = match A::make(Request::from_parts(parts, body), &incoming.state).await {
        Ok(args) => args,
        Err(refused) => return refused,
    };
    #[cfg(feature = "postgres")]
    let pending = incoming.slots.left().tx.take();
    #[cfg(feature = "postgres")]
    if let Some(pending) = pending {
        let serve = &incoming.serve;
        let call = move || async move { without_replayed(serve.serve(args).await) };
        let status_of =
            |response: &Response| (response.status().as_u16(), crate::web::MarkRetryable::is_retryable(response));
        return crate::web::run_without_key_in_tx::<Axum, _>(&config, pending, call, status_of).await;
    }
    #[cfg(not(feature = "postgres"))]
    let _ = config;
    // The header belongs to the runtime, with or without a key.
    without_replayed(incoming.serve.serve(args).await)
}
