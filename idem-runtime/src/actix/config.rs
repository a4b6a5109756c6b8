//! The runtime configuration registered on the actix `App`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::http::header::HeaderName;

use crate::store::Store;

/// Resolves the authenticated subject of a request for `scope = "user"`.
pub(crate) type SubjectResolver = dyn Fn(&HttpRequest) -> Option<String> + Send + Sync;

/// What to do with a 5xx response from the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerErrorPolicy {
    /// Release the claim, so the client may retry and run the handler again.
    #[default]
    Release,
    /// Store the 5xx response and replay it, as Stripe does.
    Store,
}

/// The idempotency runtime configuration: register one on the `App`.
///
/// ```no_run
/// use actix_web::{App, HttpServer};
/// use idem_runtime::{Idem, MemoryStore};
///
/// # async fn run() -> std::io::Result<()> {
/// let idem = Idem::new(MemoryStore::new()).subject(|req| {
///     req.headers().get("x-user-id")?.to_str().ok().map(str::to_owned)
/// });
/// HttpServer::new(move || App::new().app_data(idem.clone()))
///     .bind(("127.0.0.1", 8080))?
///     .run()
///     .await
/// # }
/// ```
///
/// Cloning is cheap: every clone shares the same store.
#[derive(Clone)]
pub struct Idem {
    pub(crate) inner: Arc<Config>,
}

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) subject: Option<Arc<SubjectResolver>>,
    pub(crate) body_limit: usize,
    pub(crate) response_limit: usize,
    pub(crate) store_timeout: Duration,
    pub(crate) server_errors: ServerErrorPolicy,
    pub(crate) skipped_headers: Vec<HeaderName>,
}

/// Headers never replayed by default: hop-by-hop ones, `Date`, `Set-Cookie`,
/// and `Content-Length` (recomputed from the stored body).
const DEFAULT_SKIPPED: [&str; 12] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "date",
    "set-cookie",
    "content-length",
];

impl Idem {
    /// Default limit on a buffered request body (1 MiB).
    pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;
    /// Default limit on a stored response (1 MiB of headers and body).
    pub const DEFAULT_RESPONSE_LIMIT: usize = 1 << 20;
    /// Default time a single store call may take before the runtime gives up.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(2);

    /// A configuration using `store`, with every other setting at its default.
    pub fn new(store: impl Store) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// Like [`Idem::new`], for a store that is already shared.
    pub fn from_arc(store: Arc<dyn Store>) -> Self {
        Self {
            inner: Arc::new(Config {
                store,
                subject: None,
                body_limit: Self::DEFAULT_BODY_LIMIT,
                response_limit: Self::DEFAULT_RESPONSE_LIMIT,
                store_timeout: Self::DEFAULT_STORE_TIMEOUT,
                server_errors: ServerErrorPolicy::default(),
                skipped_headers: DEFAULT_SKIPPED.iter().map(|h| HeaderName::from_static(h)).collect(),
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.inner));
        self
    }

    /// How to find the authenticated subject for `scope = "user"`; a request
    /// for which it returns `None` is answered 401.
    pub fn subject<F>(self, resolver: F) -> Self
    where
        F: Fn(&HttpRequest) -> Option<String> + Send + Sync + 'static,
    {
        self.with(|c| c.subject = Some(Arc::new(resolver)))
    }

    /// Largest request body buffered for fingerprinting (default 1 MiB);
    /// larger requests are answered 413.
    pub fn body_limit(self, bytes: usize) -> Self {
        self.with(|c| c.body_limit = bytes)
    }

    /// Largest response stored for replay (default 1 MiB). A larger response
    /// still reaches the client, but retries get a 500 problem saying it
    /// could not be kept: the handler is never run twice.
    pub fn response_limit(self, bytes: usize) -> Self {
        self.with(|c| c.response_limit = bytes)
    }

    /// Longest a single store call may take (default 2 s); a slower call
    /// counts as a store failure (503 before the handler runs).
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.with(|c| c.store_timeout = timeout)
    }

    /// What to do with 5xx responses (default: release the claim).
    pub fn server_errors(self, policy: ServerErrorPolicy) -> Self {
        self.with(|c| c.server_errors = policy)
    }

    /// Also replay `header`, even if it is skipped by default (`Set-Cookie`,
    /// say). Hop-by-hop headers stay skipped.
    pub fn replay_header(self, header: HeaderName) -> Self {
        self.with(|c| c.skipped_headers.retain(|h| *h != header || is_hop_by_hop(h)))
    }

    /// Never store or replay `header`.
    pub fn skip_header(self, header: HeaderName) -> Self {
        self.with(|c| {
            if !c.skipped_headers.contains(&header) {
                c.skipped_headers.push(header);
            }
        })
    }

    /// The configured store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }
}

fn is_hop_by_hop(header: &HeaderName) -> bool {
    DEFAULT_SKIPPED[..9].contains(&header.as_str())
}

impl Config {
    pub(crate) fn replays(&self, header: &HeaderName) -> bool {
        !self.skipped_headers.contains(header)
    }
}

impl fmt::Debug for Idem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.inner;
        f.debug_struct("Idem")
            .field("store", &c.store.kind())
            .field("subject", &c.subject.as_ref().map(|_| "<resolver>"))
            .field("body_limit", &c.body_limit)
            .field("response_limit", &c.response_limit)
            .field("store_timeout", &c.store_timeout)
            .field("server_errors", &c.server_errors)
            .field("skipped_headers", &c.skipped_headers)
            .finish()
    }
}
