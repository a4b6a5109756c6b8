//! The runtime configuration an application registers: on the actix
//! `App` (`app_data`), or on the axum `Router` (`Idem::layer`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::head::RequestHead;
use crate::engine::{Drained, ReplayCache, Replays, Running};
use crate::sealing::Keyring;
use crate::store::{OnLapse, Store};

/// Resolves the authenticated subject of a request for `scope = "user"`.
pub(crate) type SubjectResolver = dyn for<'a> Fn(&RequestHead<'a>) -> Option<String> + Send + Sync;

/// What to do with a 5xx response from the handler that is not marked
/// [retryable](crate::MarkRetryable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerErrorPolicy {
    /// Store the 5xx response and replay it, as Stripe does: a handler that
    /// failed half way may already have charged. The default.
    #[default]
    Store,
    /// Release every 5xx, so the same request may run again: for handlers
    /// whose 5xx answers always mean that nothing happened.
    Release,
}

/// The idempotency runtime configuration: register one on the actix-web
/// `App`, or on the axum `Router` with [`Idem::layer`] (feature `axum`).
///
/// ```no_run
/// # #[cfg(feature = "actix")]
/// # async fn run() -> std::io::Result<()> {
/// use actix_web::{App, HttpServer};
/// use idem_runtime::{Idem, MemoryStore};
///
/// let idem = Idem::new(MemoryStore::new()).subject(|req| req.header("x-user-id").map(str::to_owned));
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
    /// Lower-case names of the headers never kept or replayed.
    pub(crate) skipped_headers: Vec<Box<str>>,
    pub(crate) drain_timeout: Duration,
    /// Whether the request's host name is part of its fingerprint.
    pub(crate) fingerprint_host: bool,
    /// What a retry does with a lapsed execution, on routes that do not say.
    pub(crate) on_lapse: OnLapse,
    /// Shared by every clone of the configuration.
    pub(crate) running: Arc<Running>,
    /// The replay cache, if on; shared by every clone of the configuration.
    pub(crate) replays: Option<Arc<Replays>>,
    /// The keys records are sealed with, if they are.
    pub(crate) records: Option<Arc<Keyring>>,
    /// The store's transactional mode, if it has one.
    #[cfg(feature = "postgres")]
    pub(crate) transactional: Option<Arc<dyn crate::store::Transactional>>,
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
    /// Default time a single store call may take before the runtime gives
    /// up. It must stay within a third of every route's `lock_ttl` (default
    /// 30 s), so that a lease can be renewed twice before it runs out.
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default longest wait of [`Idem::drain`] for running executions.
    pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default bound on the executions running at once in the process
    /// ([`Idem::max_running`]).
    pub const DEFAULT_MAX_RUNNING: usize = Running::DEFAULT_MAX;

    /// A configuration using `store`, with every other setting at its default.
    pub fn new(store: impl Store + 'static) -> Self {
        Self::from_arc(Arc::new(store))
    }

    /// Like [`Idem::new`], for a store that is already shared.
    pub fn from_arc(store: Arc<dyn Store>) -> Self {
        Self {
            inner: Arc::new(Config {
                #[cfg(feature = "postgres")]
                transactional: store.transactional(),
                store,
                subject: None,
                body_limit: Self::DEFAULT_BODY_LIMIT,
                response_limit: Self::DEFAULT_RESPONSE_LIMIT,
                store_timeout: Self::DEFAULT_STORE_TIMEOUT,
                server_errors: ServerErrorPolicy::default(),
                skipped_headers: DEFAULT_SKIPPED.iter().map(|&name| name.into()).collect(),
                drain_timeout: Self::DEFAULT_DRAIN_TIMEOUT,
                fingerprint_host: true,
                on_lapse: OnLapse::Takeover,
                running: Arc::default(),
                replays: None,
                records: None,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.inner));
        self
    }

    /// How to find the authenticated subject for `scope = "user"`, from the
    /// request's [head](RequestHead) (a header, or what an authentication
    /// middleware left in its extensions); a request for which it returns
    /// `None` is answered 401.
    pub fn subject<F>(self, resolver: F) -> Self
    where
        F: for<'a> Fn(&RequestHead<'a>) -> Option<String> + Send + Sync + 'static,
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
    ///
    /// A route whose `lock_ttl` is less than three times this timeout
    /// cannot keep its lease through one slow renewal: its requests are
    /// refused with a 500 problem naming both values (and logged).
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.with(|c| c.store_timeout = timeout)
    }

    /// Longest wait of [`Idem::drain`] (default 30 s).
    pub fn drain_timeout(self, timeout: Duration) -> Self {
        self.with(|c| c.drain_timeout = timeout)
    }

    /// Most executions running at once under this configuration (default
    /// [`Idem::DEFAULT_MAX_RUNNING`]): claimed and not yet completed or
    /// released, those whose client left and those still storing their
    /// response included. A client that resets its connection leaves its
    /// execution running (it may have charged half way), so without a
    /// bound handlers could be piled up faster than they finish. Past the
    /// bound a request is answered 503 `overloaded` with `Retry-After`
    /// before its claim: nothing is claimed, nothing runs, and a retry is
    /// served normally once executions end. Counted per configuration: set
    /// it before cloning the configuration into the app.
    pub fn max_running(self, executions: usize) -> Self {
        self.with(|c| c.running = Arc::new(Running::with_limit(executions)))
    }

    /// Keeps the completed records this process sees (replayed by the store,
    /// or completed here) in a bounded in-process cache, so that the same
    /// request again is replayed without a store round trip, for up to the
    /// cache's `max_age` (default: off). What that allows is on
    /// [`ReplayCache`]: a record removed from the store behind the library's
    /// back may still be replayed by this process until then. For Redis and
    /// Postgres; the memory store gains nothing from it. Shared by every
    /// clone of the configuration: set it before cloning the configuration
    /// into the app.
    pub fn replay_cache(self, cache: ReplayCache) -> Self {
        self.with(|c| c.replays = Replays::new(cache).map(Arc::new))
    }

    /// Whether the request's host name is part of its fingerprint (default
    /// `true`): the `Host` as received, lower-cased, without its port, so
    /// that two tenants told apart by host name never receive each other's
    /// stored response (the second is answered 422). Turn it off for a
    /// service reached under several names for the same tenant (a retry
    /// through another name is then the same request).
    pub fn fingerprint_host(self, included: bool) -> Self {
        self.with(|c| c.fingerprint_host = included)
    }

    /// What a retry does with an execution whose lease lapsed unfinished
    /// (its process crashed, or went silent past its lease), on routes whose
    /// attribute does not say (`on_lapse = ".."`): [`OnLapse::Takeover`] (the
    /// default) runs it again, handing back its recorded durable steps;
    /// [`OnLapse::Hold`] never runs it again by itself: the key answers 409
    /// `execution-held` until an operator releases or resolves it (the
    /// `idem` tool, [`Operator`](crate::Operator)).
    pub fn on_lapse(self, policy: OnLapse) -> Self {
        self.with(|c| c.on_lapse = policy)
    }

    /// Seals what records keep (a response's headers and body, a durable
    /// step's result) with XChaCha20-Poly1305 under `keyring`'s current key,
    /// the storage key as associated data, so that the store holds
    /// nothing readable and a record copied to another key never opens.
    /// A record that does not open (another key, altered, or in the clear
    /// unless [`Keyring::accept_unsealed`]) is answered 500 `record-sealed`
    /// and logged; nothing runs. Off by default.
    pub fn encrypt_records(self, keyring: Keyring) -> Self {
        self.with(|c| c.records = Some(Arc::new(keyring)))
    }

    /// What to do with 5xx responses not marked retryable (default: store
    /// and replay them).
    pub fn server_errors(self, policy: ServerErrorPolicy) -> Self {
        self.with(|c| c.server_errors = policy)
    }

    /// Also replay `header` (a header name, any case), even if it is
    /// skipped by default (`Set-Cookie`, say). Hop-by-hop headers stay
    /// skipped.
    pub fn replay_header(self, header: impl AsRef<str>) -> Self {
        let header = header.as_ref().to_ascii_lowercase();
        self.with(|c| c.skipped_headers.retain(|h| **h != *header || is_hop_by_hop(h)))
    }

    /// Never store or replay `header` (a header name, any case).
    pub fn skip_header(self, header: impl AsRef<str>) -> Self {
        let header = header.as_ref().to_ascii_lowercase();
        self.with(|c| {
            if !c.skipped_headers.iter().any(|h| **h == *header) {
                c.skipped_headers.push(header.into());
            }
        })
    }

    /// The configured store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Executions running now under this configuration (claimed, not yet
    /// completed or released), including those whose client left, and
    /// claims on their way to the store (which may turn out to be replays).
    pub fn running(&self) -> usize {
        self.inner.running.count()
    }

    /// Graceful shutdown: refuses new executions from now on (their
    /// requests get 503 with `Retry-After`, and nothing runs), then waits up
    /// to the [drain timeout](Idem::drain_timeout) for the running ones to
    /// finish and complete, including those whose client already left.
    ///
    /// Call it after the server stopped accepting connections and before
    /// its workers stop: actix drops a worker's tasks when it stops, and a
    /// detached execution is one of them; with axum, after `axum::serve`
    /// returned from its graceful shutdown, before the runtime stops.
    /// `Idem::shutdown_on_signal` (actix-web) does the whole sequence.
    pub async fn drain(&self) -> Drained {
        let drained = self.inner.running.drain(self.inner.drain_timeout).await;
        if drained.is_complete() {
            tracing::info!(waited = ?drained.waited, "idempotent executions drained");
        } else {
            tracing::error!(
                still_running = drained.still_running,
                "drain timeout reached with idempotent executions still running; their leases will run out"
            );
        }
        drained
    }
}

fn is_hop_by_hop(header: &str) -> bool {
    DEFAULT_SKIPPED[..9].contains(&header)
}

impl Config {
    /// Whether a response header named `header` (lower-case, as both
    /// frameworks keep names) is kept and replayed.
    pub(crate) fn replays(&self, header: &str) -> bool {
        !self.skipped_headers.iter().any(|skipped| **skipped == *header)
    }

    /// Refuses a lease that one slow store call could let run out.
    pub(crate) fn check_lease(&self, lock_ttl: Duration) -> Result<(), String> {
        if self.store_timeout.saturating_mul(3) <= lock_ttl {
            return Ok(());
        }
        Err(format!(
            "the store timeout ({:?}) is above a third of this route's lock_ttl ({:?}): a lease could run out \
             during one slow renewal; lower Idem::store_timeout or raise lock_ttl",
            self.store_timeout, lock_ttl
        ))
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
            .field("drain_timeout", &c.drain_timeout)
            .field("max_running", &c.running.max())
            .field("on_lapse", &c.on_lapse)
            .field("fingerprint_host", &c.fingerprint_host)
            .field("replay_cache", &c.replays.as_ref().map(|replays| replays.settings()))
            .field("encrypt_records", &c.records.as_ref().map(|keyring| keyring.current().id()))
            .finish_non_exhaustive()
    }
}
