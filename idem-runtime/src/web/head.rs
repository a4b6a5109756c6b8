//! The request as a subject resolver sees it, whatever the framework.

/// A request as [`Idem::subject`](crate::Idem::subject) gives it to the
/// resolver: its method, path and headers, and what an authentication
/// layer put in its extensions. The same in an actix-web and an axum
/// application, so that one resolver serves both.
///
/// ```
/// use idem_runtime::{Idem, MemoryStore};
///
/// # #[derive(Clone)] struct User { id: String }
/// // A header set by a gateway that authenticated the caller...
/// let by_header = Idem::new(MemoryStore::new()).subject(|req| req.header("x-user-id").map(str::to_owned));
/// // ... or the user an authentication middleware left in the request.
/// let by_middleware = Idem::new(MemoryStore::new()).subject(|req| req.extension::<User>().map(|user| user.id));
/// ```
pub struct RequestHead<'a> {
    inner: Inner<'a>,
}

/// The framework's request behind a [`RequestHead`].
enum Inner<'a> {
    #[cfg(feature = "actix")]
    Actix(&'a actix_web::HttpRequest),
    #[cfg(feature = "axum")]
    Axum(&'a http::request::Parts),
}

impl<'a> RequestHead<'a> {
    /// The head of an actix-web request.
    #[cfg(feature = "actix")]
    pub(crate) fn actix(req: &'a actix_web::HttpRequest) -> Self {
        Self { inner: Inner::Actix(req) }
    }

    /// The head of an axum (`http`) request.
    #[cfg(feature = "axum")]
    pub(crate) fn axum(parts: &'a http::request::Parts) -> Self {
        Self { inner: Inner::Axum(parts) }
    }

    /// The request's method (`"POST"`).
    pub fn method(&self) -> &str {
        match &self.inner {
            #[cfg(feature = "actix")]
            Inner::Actix(req) => req.method().as_str(),
            #[cfg(feature = "axum")]
            Inner::Axum(parts) => parts.method.as_str(),
        }
    }

    /// The request's path, as requested.
    pub fn path(&self) -> &str {
        match &self.inner {
            #[cfg(feature = "actix")]
            Inner::Actix(req) => req.path(),
            // As the client sent it, above any nested router.
            #[cfg(feature = "axum")]
            Inner::Axum(parts) => {
                parts.extensions.get::<axum::extract::OriginalUri>().map_or(&parts.uri, |original| &original.0).path()
            }
        }
    }

    /// The first value of the header `name` (any case), if it is visible
    /// ASCII text.
    pub fn header(&self, name: &str) -> Option<&str> {
        as_text(self.header_bytes(name)?)
    }

    /// The value of the header `name` (any case) when the request has it
    /// once, as visible ASCII text (`None` when it is absent or not such
    /// text); `Err` when the request has it more than once.
    pub(crate) fn single_header(&self, name: &str) -> Result<Option<&str>, Repeated> {
        let mut values: Box<dyn Iterator<Item = &[u8]>> = match &self.inner {
            #[cfg(feature = "actix")]
            Inner::Actix(req) => Box::new(req.headers().get_all(name).map(|value| value.as_bytes())),
            #[cfg(feature = "axum")]
            Inner::Axum(parts) => Box::new(parts.headers.get_all(name).iter().map(|value| value.as_bytes())),
        };
        match (values.next(), values.next()) {
            (_, Some(_)) => Err(Repeated),
            (value, None) => Ok(value.and_then(as_text)),
        }
    }

    /// The first value of the header `name` (any case), as bytes.
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        match &self.inner {
            #[cfg(feature = "actix")]
            Inner::Actix(req) => req.headers().get(name).map(|value| value.as_bytes()),
            #[cfg(feature = "axum")]
            Inner::Axum(parts) => parts.headers.get(name).map(|value| value.as_bytes()),
        }
    }

    /// A value of type `T` that a layer or middleware put in the request's
    /// extensions (an authenticated user, say), cloned.
    pub fn extension<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        match &self.inner {
            #[cfg(feature = "actix")]
            Inner::Actix(req) => actix_web::HttpMessage::extensions(*req).get::<T>().cloned(),
            #[cfg(feature = "axum")]
            Inner::Axum(parts) => parts.extensions.get::<T>().cloned(),
        }
    }

    /// The actix-web request itself, when the application is an actix-web
    /// one.
    #[cfg(feature = "actix")]
    pub fn as_actix(&self) -> Option<&actix_web::HttpRequest> {
        match &self.inner {
            Inner::Actix(req) => Some(req),
            #[cfg(feature = "axum")]
            Inner::Axum(_) => None,
        }
    }

    /// The request's parts (method, URI, headers, extensions), when the
    /// application is an axum one.
    #[cfg(feature = "axum")]
    pub fn as_parts(&self) -> Option<&http::request::Parts> {
        match &self.inner {
            Inner::Axum(parts) => Some(parts),
            #[cfg(feature = "actix")]
            Inner::Actix(_) => None,
        }
    }
}

/// A header value as text, as `HeaderValue::to_str` reads it (in either
/// version of the `http` crate): visible ASCII, spaces and tabs; `None`
/// otherwise.
pub(crate) fn as_text(value: &[u8]) -> Option<&str> {
    if !value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b)) {
        return None;
    }
    std::str::from_utf8(value).ok()
}

impl std::fmt::Debug for RequestHead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers may carry credentials: the method and path only.
        f.debug_struct("RequestHead")
            .field("method", &self.method())
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

/// A header the request has more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Repeated;
