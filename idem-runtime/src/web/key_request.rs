//! The request as a computed key's function sees it (`key =
//! "fn:path::to::function"`).

use std::borrow::Cow;
use std::cell::RefCell;

use super::{Incoming, NotUtf8, RequestHead};

/// A request as a key function (`key = "fn:path::to::function"`) sees it:
/// its head, its path parameters, its query and its whole body, read
/// before the function runs. The same in an actix-web and an axum
/// application.
///
/// ```
/// use idem_runtime::KeyRequest;
///
/// /// One key per tenant and invoice number, whichever sent them.
/// fn invoice_key(req: &KeyRequest<'_>) -> Option<String> {
///     let tenant = req.header("x-tenant-id")?;
///     let invoice: serde_json::Value = serde_json::from_slice(req.body()).ok()?;
///     Some(format!("{tenant}/{}", invoice.get("number")?.as_str()?))
/// }
/// ```
pub struct KeyRequest<'a> {
    head: RequestHead<'a>,
    query: &'a str,
    params: &'a dyn PathParams,
    body: &'a [u8],
    /// The first header [`Self::header`] found repeated.
    repeated: RefCell<Option<String>>,
}

/// Where a [`KeyRequest`] finds path parameters.
pub(crate) trait PathParams {
    fn param(&self, name: &str) -> Option<Result<Cow<'_, str>, NotUtf8>>;
}

impl<R: Incoming> PathParams for R {
    fn param(&self, name: &str) -> Option<Result<Cow<'_, str>, NotUtf8>> {
        self.path_param(name)
    }
}

impl<'a> KeyRequest<'a> {
    /// The request `req`, its body `body`.
    pub(crate) fn new<R: Incoming>(req: &'a R, body: &'a [u8]) -> Self {
        Self { head: req.head(), query: req.query(), params: req, body, repeated: RefCell::new(None) }
    }

    /// The request's method (`"POST"`).
    pub fn method(&self) -> &str {
        self.head.method()
    }

    /// The request's path, as requested.
    pub fn path(&self) -> &str {
        self.head.path()
    }

    /// The query string, without the `?` (empty if none).
    pub fn query(&self) -> &str {
        self.query
    }

    /// The value of the header `name` (any case), if the request has it
    /// once and it is visible ASCII text. A header sent twice is `None`:
    /// another layer may read the other value (an authenticated tenant,
    /// say), and a key must not be made of one the request did not mean;
    /// if the function then makes no key, the request is refused (400
    /// `invalid-key`), never run without one. Read [`Self::head`] for
    /// every value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.single_header(name).unwrap_or_else(|_| {
            self.repeated.borrow_mut().get_or_insert_with(|| name.to_ascii_lowercase());
            None
        })
    }

    /// The first header [`Self::header`] was asked for and found sent more
    /// than once: a function that returned no key then had no say, and
    /// the request is refused rather than run without one.
    pub(crate) fn repeated_header(&self) -> Option<String> {
        self.repeated.borrow().clone()
    }

    /// The value of the route's path parameter `name`, percent-decoded as
    /// the framework's path extractor gives it; `None` when the route has
    /// no such parameter or it is not UTF-8 once decoded.
    pub fn path_param(&self, name: &str) -> Option<Cow<'_, str>> {
        self.params.param(name)?.ok()
    }

    /// The whole body, as received (before any extractor).
    pub fn body(&self) -> &[u8] {
        self.body
    }

    /// The rest of the head: every header's bytes, the extensions an
    /// authentication layer set, the framework's own request.
    pub fn head(&self) -> &RequestHead<'a> {
        &self.head
    }
}

/// A route's key function (`key = "fn:path::to::function"`, or a layer's
/// `key_with`), and its name for messages.
#[derive(Clone, Copy)]
pub struct ComputedKey {
    /// The function as the attribute names it.
    pub name: &'static str,
    /// The function: the key of a request, or `None` when it has none (as
    /// an empty string is taken).
    pub compute: &'static KeyFunction,
}

/// What a key function is: the key of a request, or `None`.
pub type KeyFunction = dyn Fn(&KeyRequest<'_>) -> Option<String> + Send + Sync;

impl std::fmt::Debug for ComputedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputedKey").field("name", &self.name).finish_non_exhaustive()
    }
}
