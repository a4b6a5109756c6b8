//! An actix-web request as the steps of `web/` see it.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::http::header::{CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderName};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, Responder};
use bytes::Bytes;
use futures_util::FutureExt;

use super::IdempotentHandler;
use super::body::buffer;
use super::response::{Actix, capture, without_replayed};
use crate::web::{
    Annotated, Captured, Config, Idem, Incoming, NotUtf8, Panicked, PendingContext, Problem, RequestHead,
};

/// The configuration registered on the request's `App`, as `Idem` or
/// `web::Data<Idem>`.
pub(crate) fn config_of(req: &HttpRequest) -> Option<&Arc<Config>> {
    req.app_data::<Idem>()
        .or_else(|| req.app_data::<actix_web::web::Data<Idem>>().map(|data| data.get_ref()))
        .map(|idem| &idem.inner)
}

/// Whether `req` is served by `#[idempotent]`, and how.
pub(super) fn annotated(req: &HttpRequest) -> Option<Annotated> {
    req.extensions().get::<Annotated>().copied()
}

/// One request to an `#[idempotent]` actix-web handler.
pub(super) struct ActixRequest<F, Args> {
    req: HttpRequest,
    /// The payload, until it is read.
    payload: Option<Payload>,
    handler: F,
    args: PhantomData<fn() -> Args>,
}

impl<F, Args> ActixRequest<F, Args> {
    pub(super) fn new(req: HttpRequest, payload: Payload, handler: F) -> Self {
        Self { req, payload: Some(payload), handler, args: PhantomData }
    }
}

/// The key header unless a route renames it.
const DEFAULT_HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// Whether `name` is a header name `HeaderName::from_static` takes as it is.
fn is_lower_case_token(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl<F, Args> Incoming for ActixRequest<F, Args>
where
    F: IdempotentHandler<Args>,
    Args: FromRequest + 'static,
{
    type Framework = Actix;
    type Args = Args;

    fn method(&self) -> &str {
        self.req.method().as_str()
    }

    fn path(&self) -> &str {
        self.req.path()
    }

    fn query(&self) -> &str {
        self.req.query_string()
    }

    fn header_values<'a>(&'a self, name: &'static str) -> impl Iterator<Item = &'a [u8]> + 'a {
        // The default header, and any lower-case token (every name the
        // runtime and the attribute write), are looked up without copying
        // the name into a new header name.
        let headers = self.req.headers();
        let values = if name.eq_ignore_ascii_case(DEFAULT_HEADER.as_str()) {
            headers.get_all(DEFAULT_HEADER)
        } else if name == "content-type" {
            headers.get_all(CONTENT_TYPE)
        } else if name == "content-encoding" {
            headers.get_all(CONTENT_ENCODING)
        } else if is_lower_case_token(name) {
            headers.get_all(HeaderName::from_static(name))
        } else {
            headers.get_all(name)
        };
        values.map(|value| value.as_bytes())
    }

    fn path_param(&self, name: &str) -> Option<Result<Cow<'_, str>, NotUtf8>> {
        // As `web::Path` decodes it.
        let raw = self.req.match_info().get(name)?;
        Some(percent_encoding::percent_decode_str(raw).decode_utf8().map_err(|_| NotUtf8))
    }

    fn host(&self) -> &str {
        // As actix's `ConnectionInfo::host` where no forwarding header is
        // given: the `Host` header, else the request target's authority
        // (HTTP/2's `:authority`, which actix keeps in the URI).
        match self.req.headers().get(HOST) {
            Some(host) => host.to_str().unwrap_or(""),
            None => self.req.uri().authority().map_or("", |authority| authority.host()),
        }
    }

    fn head(&self) -> RequestHead<'_> {
        RequestHead::actix(&self.req)
    }

    async fn buffer(&mut self, limit: usize) -> Result<Bytes, Problem> {
        let payload = self.payload.take().unwrap_or(Payload::None);
        buffer(&self.req, payload, limit).await
    }

    async fn extract(&mut self, body: Bytes, annotated: Annotated) -> Result<Args, HttpResponse> {
        self.req.extensions_mut().insert(annotated);
        Args::from_request(&self.req, &mut Payload::from(body)).await.map_err(|error| error.into().error_response())
    }

    fn take_context(&self) -> Option<PendingContext> {
        self.req.extensions_mut().remove::<PendingContext>()
    }

    #[cfg(feature = "postgres")]
    fn take_tx(&self) -> Option<crate::web::PendingTx> {
        self.req.extensions_mut().remove::<crate::web::PendingTx>()
    }

    async fn call(&mut self, args: Args, limit: usize) -> Result<Captured<Actix>, Panicked> {
        let work = async {
            let response = self.handler.call(args).await.respond_to(&self.req).map_into_boxed_body();
            capture(response, limit).await
        };
        AssertUnwindSafe(work).catch_unwind().await.map_err(|_| {
            tracing::error!("the idempotent handler panicked");
            Panicked
        })
    }

    fn without_key(self, config: Arc<Config>, body: Option<Bytes>) -> impl Future<Output = HttpResponse> {
        run_without_key(config, self, body)
    }
}

/// `required = false` and no key: the handler runs as if not annotated
/// (a `Tx` it takes is committed when it returns, unless its response is
/// retryable). Not counted: only requests with a key are.
async fn run_without_key<F, Args>(
    config: Arc<Config>,
    incoming: ActixRequest<F, Args>,
    body: Option<Bytes>,
) -> HttpResponse
where
    F: IdempotentHandler<Args>,
    Args: FromRequest + 'static,
{
    let ActixRequest { req, payload, handler, .. } = incoming;
    let mut payload = match body {
        Some(body) => Payload::from(body),
        None => payload.unwrap_or(Payload::None),
    };
    req.extensions_mut().insert(Annotated::Keyless);
    let args = match Args::from_request(&req, &mut payload).await {
        Ok(args) => args,
        Err(error) => return error.into().error_response(),
    };
    #[cfg(feature = "postgres")]
    let pending = req.extensions_mut().remove::<crate::web::PendingTx>();
    #[cfg(feature = "postgres")]
    if let Some(pending) = pending {
        let call = || async { without_replayed(handler.call(args).await.respond_to(&req).map_into_boxed_body()) };
        let status_of =
            |response: &HttpResponse| (response.status().as_u16(), crate::web::MarkRetryable::is_retryable(response));
        return crate::web::run_without_key_in_tx::<Actix, _>(&config, pending, call, status_of).await;
    }
    #[cfg(not(feature = "postgres"))]
    let _ = config;
    // The header belongs to the runtime, with or without a key.
    without_replayed(handler.call(args).await.respond_to(&req).map_into_boxed_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lower_case_token_is_a_static_header_name() {
        let every = "abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~";
        assert!(is_lower_case_token(every));
        assert_eq!(HeaderName::from_static(every).as_str(), every);
        for name in ["", "Idempotency-Key", "x key", "x:key", "x\u{e9}"] {
            assert!(!is_lower_case_token(name), "{name:?}");
        }
    }
}
