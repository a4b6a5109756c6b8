//! The engine as a tower layer, for routes configured without the
//! attribute: a route's service (a handler, a nested router, any tower
//! service) made idempotent as `#[idempotent]` makes a handler.
//!
//! The one difference: a layer cannot run a handler's extractors before
//! the claim, since they run inside the service it wraps. A request its
//! service refuses (a 400 from a `Json` extractor, say) is therefore a
//! response like any other, kept and replayed for its key; the same request
//! with the same key gets that refusal again, a corrected one needs a new
//! key. Use the attribute where that matters (a webhook's signature check).

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use tower::{Layer, Service};

use super::request::Serve;
use crate::scope::Scope;
use crate::store::OnLapse;
use crate::web::{ComputedKey, InFlight, KeyFunction, KeyPart, KeyRequest, KeySource, RouteOptions};

/// The arguments of an [`IdempotentLayer`], the attribute's, checked when
/// it is built.
#[derive(Debug, Clone)]
pub struct IdempotentLayerBuilder {
    options: Options,
}

/// The arguments of a layer, as its builder holds them.
#[derive(Debug, Clone)]
struct Options {
    ttl: Duration,
    lock_ttl: Duration,
    scope: Scope,
    key: Key,
    fingerprint_headers: Vec<String>,
    fingerprint_exclude: Vec<String>,
    header: String,
    /// Whether `header` was set (a natural key has no header).
    header_set: bool,
    required: bool,
    wait: Option<Duration>,
    on_lapse: Option<OnLapse>,
}

/// Where a layer's key comes from.
#[derive(Debug, Clone)]
enum Key {
    Header,
    Path(String),
    Json(String),
    Parts(Vec<String>),
    Computed(ComputedKey),
}

/// A layer's arguments that do not hold together, found when it is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid idempotency layer: {0}")]
pub struct InvalidLayer(String);

impl Default for IdempotentLayerBuilder {
    fn default() -> Self {
        Self {
            options: Options {
                ttl: Duration::from_secs(24 * 3600),
                lock_ttl: Duration::from_secs(30),
                scope: Scope::User,
                key: Key::Header,
                fingerprint_headers: Vec::new(),
                fingerprint_exclude: Vec::new(),
                header: "Idempotency-Key".to_owned(),
                header_set: false,
                required: true,
                wait: None,
                on_lapse: None,
            },
        }
    }
}

impl IdempotentLayerBuilder {
    fn with(mut self, change: impl FnOnce(&mut Options)) -> Self {
        change(&mut self.options);
        self
    }

    /// How long a completed response is kept and replayed (`ttl`).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|o| o.ttl = ttl)
    }

    /// The lease of an execution in flight (`lock_ttl`), shorter than the TTL.
    pub fn lock_ttl(self, lease: Duration) -> Self {
        self.with(|o| o.lock_ttl = lease)
    }

    /// The namespace of the key (`scope`).
    pub fn scope(self, scope: Scope) -> Self {
        self.with(|o| o.scope = scope)
    }

    /// The header that carries the key (`header`).
    pub fn header(self, name: impl Into<String>) -> Self {
        self.with(|o| {
            o.header = name.into();
            o.header_set = true;
        })
    }

    /// The key from the path parameter `name` (`key = "path:NAME"`).
    pub fn key_from_path(self, name: impl Into<String>) -> Self {
        self.with(|o| o.key = Key::Path(name.into()))
    }

    /// The key at the JSON pointer `pointer` in the body (`key = "json:/POINTER"`).
    pub fn key_from_json(self, pointer: impl Into<String>) -> Self {
        self.with(|o| o.key = Key::Json(pointer.into()))
    }

    /// The key made of several sources, joined so that no two different
    /// tuples give one key (`key = ["path:order_id", "json:/line_id"]`):
    /// each `"header"`, `"path:NAME"` or `"json:/POINTER"`.
    pub fn key_from_parts<I: IntoIterator<Item = impl Into<String>>>(self, parts: I) -> Self {
        self.with(|o| o.key = Key::Parts(parts.into_iter().map(Into::into).collect()))
    }

    /// The key computed by `function` from the request (`key =
    /// "fn:path::to::function"`): `None` or an empty string when the
    /// request has none.
    pub fn key_with<F>(self, function: F) -> Self
    where
        F: Fn(&KeyRequest<'_>) -> Option<String> + Send + Sync + 'static,
    {
        let name = std::any::type_name::<F>();
        // Made once per layer, for the life of the process.
        let compute: &'static KeyFunction = Box::leak(Box::new(function));
        self.with(|o| o.key = Key::Computed(ComputedKey { name, compute }))
    }

    /// JSON pointers whose values a JSON body's fingerprint leaves out
    /// (`fingerprint_exclude`): never compared between a request and its
    /// retries.
    pub fn fingerprint_exclude<I: IntoIterator<Item = impl Into<String>>>(self, pointers: I) -> Self {
        self.with(|o| o.fingerprint_exclude = pointers.into_iter().map(Into::into).collect())
    }

    /// Request headers that are part of the fingerprint
    /// (`fingerprint_headers`).
    pub fn fingerprint_headers<I: IntoIterator<Item = impl Into<String>>>(self, names: I) -> Self {
        self.with(|o| o.fingerprint_headers = names.into_iter().map(Into::into).collect())
    }

    /// Whether a request without a key is refused (`required`, the default)
    /// or runs without idempotency.
    pub fn required(self, required: bool) -> Self {
        self.with(|o| o.required = required)
    }

    /// A concurrent duplicate waits up to `wait` for the first one's
    /// response (`in_flight = "wait"`), instead of a 409 at once.
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|o| o.wait = Some(wait))
    }

    /// What a retry finds when an execution lapsed unfinished (`on_lapse`).
    pub fn on_lapse(self, policy: OnLapse) -> Self {
        self.with(|o| o.on_lapse = Some(policy))
    }

    /// The layer, once its arguments are checked as the attribute checks
    /// them: durations above zero, a lease shorter than the TTL, header
    /// names that are header names (each fingerprint header once, and not
    /// the key's own), a path parameter's name or a JSON pointer that is
    /// one, `header` only for a key from a header, and `required(false)`
    /// not with a key from the path (a matched route always has it); a
    /// composite key of two parts or more, none twice; excluded pointers
    /// that are pointers, none twice or inside another.
    pub fn build(self) -> Result<IdempotentLayer, InvalidLayer> {
        let o = self.options;
        let invalid = |detail: String| Err(InvalidLayer(detail));
        let uses_header = match &o.key {
            Key::Header => true,
            Key::Parts(parts) => parts.iter().any(|part| part == "header"),
            _ => false,
        };
        if o.header_set && !uses_header {
            return invalid("`header` names the key's header; this key is not read from one".to_owned());
        }
        if !o.required && matches!(o.key, Key::Path(_)) {
            return invalid("a key from the path is always there: `required(false)` would never apply".to_owned());
        }
        for (at, name) in o.fingerprint_headers.iter().enumerate() {
            if uses_header && name.eq_ignore_ascii_case(&o.header) {
                return invalid(format!(
                    "`{name}` is the key's own header: a key sent quoted and bare would be two requests"
                ));
            }
            if o.fingerprint_headers[..at].iter().any(|earlier| earlier.eq_ignore_ascii_case(name)) {
                return invalid(format!("the fingerprint header `{name}` is given twice"));
            }
        }
        if o.ttl.is_zero() || o.lock_ttl.is_zero() || o.wait.is_some_and(|wait| wait.is_zero()) {
            return invalid("durations must be above zero".to_owned());
        }
        if o.lock_ttl >= o.ttl {
            return invalid(format!("lock_ttl ({:?}) must be shorter than ttl ({:?})", o.lock_ttl, o.ttl));
        }
        for name in std::iter::once(&o.header).chain(&o.fingerprint_headers) {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return invalid(format!("`{name}` is not a valid header name"));
            }
        }
        let leak = |text: &str| -> &'static str { Box::leak(text.to_owned().into_boxed_str()) };
        let key = match &o.key {
            Key::Header => KeySource::Header,
            Key::Path(name) => KeySource::Path(leak(path_parameter(name).map_err(InvalidLayer)?)),
            Key::Json(pointer) => KeySource::Json(leak(json_pointer(pointer).map_err(InvalidLayer)?)),
            Key::Parts(parts) => KeySource::Composite(composite(parts, o.required).map_err(InvalidLayer)?),
            Key::Computed(function) => KeySource::Computed(*function),
        };
        let exclude: Vec<&str> = o.fingerprint_exclude.iter().map(String::as_str).collect();
        crate::canonical_json::check_exclusions(&exclude)
            .map_err(|error| InvalidLayer(format!("fingerprint_exclude: {error}")))?;
        let fingerprint_exclude: Vec<&'static str> = exclude.into_iter().map(leak).collect();
        let fingerprint_headers: Vec<&'static str> =
            o.fingerprint_headers.iter().map(|name| leak(&name.to_ascii_lowercase())).collect();
        // Made once per layer, as the attribute makes one per route.
        let options: &'static RouteOptions = Box::leak(Box::new(RouteOptions {
            ttl: o.ttl,
            lock_ttl: o.lock_ttl,
            scope: o.scope,
            key,
            fingerprint_headers: Box::leak(fingerprint_headers.into_boxed_slice()),
            fingerprint_exclude: Box::leak(fingerprint_exclude.into_boxed_slice()),
            header: leak(&o.header),
            required: o.required,
            in_flight: o.wait.map_or(InFlight::Reject, InFlight::Wait),
            on_lapse: o.on_lapse,
        }));
        Ok(IdempotentLayer { options })
    }
}

/// `name`, if it is a path parameter's name as the attribute takes it.
fn path_parameter(name: &str) -> Result<&str, String> {
    if !name.is_empty() && name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-') {
        return Ok(name);
    }
    Err(format!("`{name}` is not a path parameter's name (write the name alone: \"id\" for `{{id}}`)"))
}

/// `pointer`, if it is an RFC 6901 pointer: it starts with `/` and every
/// `~` is `~0` or `~1`.
fn json_pointer(pointer: &str) -> Result<&str, String> {
    let bytes = pointer.as_bytes();
    let escapes = bytes.iter().enumerate().all(|(at, &b)| b != b'~' || matches!(bytes.get(at + 1), Some(b'0' | b'1')));
    if pointer.starts_with('/') && escapes {
        return Ok(pointer);
    }
    Err(format!("`{pointer}` is not a JSON pointer (RFC 6901)"))
}

/// The parts of a composite key, checked as the attribute checks them.
fn composite(parts: &[String], required: bool) -> Result<&'static [KeyPart], String> {
    if parts.len() < 2 {
        return Err("a composite key needs two parts or more; give one source with key_from_path or \
                    key_from_json"
            .to_owned());
    }
    let leak = |text: &str| -> &'static str { Box::leak(text.to_owned().into_boxed_str()) };
    let mut read = Vec::with_capacity(parts.len());
    for (at, part) in parts.iter().enumerate() {
        if parts[..at].contains(part) {
            return Err(format!("the key part `{part}` is given twice"));
        }
        read.push(if part == "header" {
            KeyPart::Header
        } else if let Some(name) = part.strip_prefix("path:") {
            KeyPart::Path(leak(path_parameter(name)?))
        } else if let Some(pointer) = part.strip_prefix("json:") {
            KeyPart::Json(leak(json_pointer(pointer)?))
        } else {
            return Err(format!("`{part}` is not a key part: \"header\", \"path:NAME\" or \"json:/POINTER\""));
        });
    }
    if !required && read.iter().all(|part| matches!(part, KeyPart::Path(_))) {
        return Err("a key from the path is always there: `required(false)` would never apply".to_owned());
    }
    Ok(Box::leak(read.into_boxed_slice()))
}

/// Makes a route idempotent without the attribute: a tower layer, with the
/// attribute's arguments.
///
/// ```no_run
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use idem_runtime::axum::IdempotentLayer;
/// use idem_runtime::store::Scope;
/// use idem_runtime::{Idem, MemoryStore};
///
/// # async fn create_order() {}
/// let idempotent = IdempotentLayer::builder().ttl(Duration::from_secs(3600)).scope(Scope::Route).build()?;
/// let app: Router = Router::new()
///     .route("/orders", post(create_order).layer(idempotent))
///     .layer(Idem::new(MemoryStore::new()).layer());
/// # Ok::<(), idem_runtime::axum::InvalidLayer>(())
/// ```
///
/// It finds its configuration where the attribute does: on the router
/// ([`Idem::layer`](crate::Idem::layer)), outside it. Its arguments are made
/// once, for the life of the process, as the attribute's are.
#[derive(Debug, Clone, Copy)]
pub struct IdempotentLayer {
    options: &'static RouteOptions,
}

impl IdempotentLayer {
    /// The layer with the attribute's defaults: a TTL of 24 hours, scope
    /// `user`, the key from the `Idempotency-Key` header (required), a
    /// lease of 30 seconds, concurrent duplicates refused with 409.
    pub fn new() -> Self {
        match Self::builder().build() {
            Ok(layer) => layer,
            Err(error) => unreachable!("the defaults are valid: {error}"),
        }
    }

    /// The layer's arguments, to set one by one.
    pub fn builder() -> IdempotentLayerBuilder {
        IdempotentLayerBuilder::default()
    }
}

impl Default for IdempotentLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for IdempotentLayer {
    type Service = IdempotentService<S>;

    fn layer(&self, inner: S) -> IdempotentService<S> {
        IdempotentService { inner, options: self.options }
    }
}

/// A service made idempotent by an [`IdempotentLayer`].
#[derive(Debug, Clone)]
pub struct IdempotentService<S> {
    inner: S,
    options: &'static RouteOptions,
}

/// The service a layer wraps, served the request with its buffered body.
struct Inner<S>(S);

impl<S> Serve<Request> for Inner<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send,
{
    async fn serve(&self, req: Request) -> Response {
        let mut service = self.0.clone();
        match poll_fn(|cx| service.poll_ready(cx)).await {
            Ok(()) => {}
            Err(never) => match never {},
        }
        match service.call(req).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

impl<S> Service<Request> for IdempotentService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The inner service is made ready per request, on a clone of it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let (options, inner) = (self.options, Inner(self.inner.clone()));
        Box::pin(async move { Ok(super::served::<Request, Inner<S>, ()>(options, req, (), inner).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: IdempotentLayerBuilder) -> String {
        match builder.build() {
            Ok(_) => panic!("accepted"),
            Err(InvalidLayer(detail)) => detail,
        }
    }

    #[test]
    fn the_layer_checks_what_the_attribute_checks() {
        assert!(IdempotentLayer::builder().build().is_ok());
        let second = Duration::from_secs(1);
        assert!(refused(IdempotentLayer::builder().ttl(60 * second).lock_ttl(60 * second)).contains("shorter"));
        assert!(refused(IdempotentLayer::builder().lock_ttl(Duration::ZERO)).contains("above zero"));
        assert!(refused(IdempotentLayer::builder().header("Idempotency Key")).contains("not a valid header"));
        assert!(refused(IdempotentLayer::builder().fingerprint_headers(["idempotency-key"])).contains("own header"));
        assert!(refused(IdempotentLayer::builder().fingerprint_headers(["X-A", "x-a"])).contains("twice"));
        assert!(refused(IdempotentLayer::builder().key_from_path("{id}")).contains("name alone"));
        assert!(refused(IdempotentLayer::builder().key_from_path("id").required(false)).contains("always there"));
        assert!(refused(IdempotentLayer::builder().key_from_json("/id").header("X-Key")).contains("not read from one"));
        assert!(refused(IdempotentLayer::builder().key_from_json("id")).contains("JSON pointer"));
        assert!(refused(IdempotentLayer::builder().key_from_json("/a~2")).contains("JSON pointer"));
        assert!(
            IdempotentLayer::builder().key_from_path("order_id").fingerprint_headers(["x-account-id"]).build().is_ok()
        );
        let parts = |parts: &[&str]| IdempotentLayer::builder().key_from_parts(parts.iter().copied());
        assert!(parts(&["path:order_id", "json:/line_id"]).build().is_ok());
        assert!(parts(&["header", "path:order_id"]).header("X-Key").build().is_ok(), "a header part has a header");
        assert!(refused(parts(&["header", "path:id"]).fingerprint_headers(["Idempotency-Key"])).contains("own header"));
        assert!(refused(parts(&["path:id"])).contains("two parts or more"));
        assert!(refused(parts(&["path:id", "path:id"])).contains("twice"));
        assert!(refused(parts(&["path:id", "query:q"])).contains("not a key part"));
        assert!(refused(parts(&["path:id", "json:x"])).contains("JSON pointer"));
        assert!(refused(parts(&["path:a", "path:b"]).required(false)).contains("always there"));
        assert!(parts(&["path:a", "json:/b"]).required(false).build().is_ok());
        assert!(
            IdempotentLayer::builder()
                .key_with(|req: &KeyRequest<'_>| req.header("x-k").map(str::to_owned))
                .build()
                .is_ok()
        );
        let exclude = |pointers: &[&str]| IdempotentLayer::builder().fingerprint_exclude(pointers.iter().copied());
        assert!(exclude(&["/attempt", "/meta/sent_at"]).build().is_ok());
        assert!(refused(exclude(&["/meta", "/meta/sent_at"])).contains("inside"));
        assert!(refused(exclude(&["attempt"])).contains("fingerprint_exclude"));
    }
}
