//! The transaction extractor of the transactional mode (§8 of the
//! behaviour contract): the handler writes in a transaction that the
//! runtime opens after the claim and commits together with the stored
//! response.
//!
//! Extractors run before the claim, the transaction only after it. The
//! extractor therefore leaves the runtime two slots in the request's
//! extensions ([`PendingTx`]): one the runtime fills with the open
//! transaction before calling the handler, one the extractor hands the
//! transaction back through when the handler drops it (at its return). The
//! runtime then completes and commits, or rolls back.

use std::fmt;
use std::future::{Ready, ready};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use parking_lot::Mutex;
use sqlx::PgConnection;

use super::config::Config;
use super::config::config_of;
use super::context::{Annotated, annotated};
use super::problem::{ProblemError, ProblemKind};
use crate::store::{PgTransaction, Transactional};

/// A Postgres transaction on the store's pool (`PostgresStore`), opened after the
/// claim, in which the handler writes its business rows. Take it as an
/// extractor; use it as a connection (`&mut *tx`):
///
/// ```no_run
/// use actix_web::{HttpResponse, post, web};
/// use idem_runtime::{Tx, idempotent};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct NewOrder {
///     customer_id: String,
///     amount_cents: i64,
/// }
///
/// #[idempotent(ttl = "24h")]
/// #[post("/orders")]
/// async fn create_order(mut tx: Tx, body: web::Json<NewOrder>) -> HttpResponse {
///     let inserted = sqlx::query("INSERT INTO orders (customer_id, amount_cents) VALUES ($1, $2)")
///         .bind(&body.customer_id)
///         .bind(body.amount_cents)
///         .execute(&mut *tx)
///         .await;
///     match inserted {
///         Ok(_) => HttpResponse::Created().finish(),
///         Err(_) => HttpResponse::InternalServerError().finish(),
///     }
/// }
/// ```
///
/// When the handler returns, the runtime writes the fenced completion in
/// this same transaction and commits: the business rows and the stored
/// response exist together or not at all. The handler never commits it
/// itself (there is no `commit` to call), and must not keep it past its
/// return.
///
/// | the handler | the transaction | the key | the client gets |
/// |---|---|---|---|
/// | returns a response | completion written, committed | completed | the response |
/// | returns, but the lease was lost | rolled back | owned by the other execution | 409 `lease-lost`, `Retry-After` |
/// | returns a [retryable](crate::MarkRetryable) response (or a 5xx under [`ServerErrorPolicy::Release`](crate::ServerErrorPolicy::Release)) | rolled back | released | the response |
/// | panics | rolled back | released | 500 `handler-panicked` |
/// | left the transaction aborted (a failed statement) and answered 4xx/5xx | rolled back | that failure stored | the response |
/// | left it aborted and answered 2xx/3xx | rolled back | released | 500 `transaction-failed` |
/// | kept the `Tx` past its return | never committed | released | 500 `transaction-failed` |
/// | – the database refused the completion or `COMMIT` (a deferred constraint; a serialization failure or deadlock) | rolled back | released | 500 `transaction-failed` (503 `store-unavailable` with `Retry-After` for class 40) |
/// | – the completion or `COMMIT` got no answer | rolled back (or committed, answer lost) | released, if rolled back | 503 `store-unavailable`: the retry finds out |
///
/// Only `BEGIN ISOLATION LEVEL READ COMMITTED` and `COMMIT` are added to the
/// handler's own statements; the completion stays one statement. The
/// `BEGIN` and the completion with its `COMMIT` run on the lease keeper's
/// thread, never cancelled half way, so the record's row is locked only
/// for those two round trips whatever the application's threads do. Do not
/// send `COMMIT`, `ROLLBACK` or `SET TRANSACTION` through the connection:
/// the runtime owns the transaction's boundaries and its isolation level. With any other store than
/// `PostgresStore` (a wrapper around one included) the extractor fails with
/// a 500 `not-configured` problem naming the store: a handler that asks for
/// a transaction never runs without one. On a request without a key
/// (`required = false`) the handler still gets a transaction, committed
/// when it returns unless its response is retryable.
///
/// The transaction holds one connection of the store's pool while the
/// handler runs: size the pool for the concurrent transactional handlers
/// plus the claims and completions of the others (lease renewals have a
/// pool of their own).
pub struct Tx {
    /// Filled by the runtime before the handler runs.
    open: Arc<OnceLock<PgTransaction>>,
    /// Where the transaction goes back to when this is dropped.
    back: Arc<Mutex<Option<PgTransaction>>>,
}

/// The slots a [`Tx`] extractor left for the runtime.
pub(crate) struct PendingTx {
    open: Arc<OnceLock<PgTransaction>>,
    back: Arc<Mutex<Option<PgTransaction>>>,
}

/// A transaction handed to the handler, to be taken back after it returns.
pub(crate) struct LentTx {
    back: Arc<Mutex<Option<PgTransaction>>>,
}

impl PendingTx {
    /// The slots of `req`'s [`Tx`], if its handler takes one.
    pub(crate) fn take(req: &HttpRequest) -> Option<Self> {
        req.extensions_mut().remove::<Self>()
    }

    /// Gives `tx` to the handler's [`Tx`].
    pub(crate) fn lend(self, tx: PgTransaction) -> LentTx {
        let Self { open, back } = self;
        // The slot is new and filled once; dropping `open` here leaves the
        // extractor the only owner, which `DerefMut` relies on.
        let _ = open.set(tx);
        LentTx { back }
    }
}

impl LentTx {
    /// The transaction, once the handler dropped its [`Tx`]; `None` if the
    /// handler kept it (moved it into a task, say).
    pub(crate) fn take_back(self) -> Option<PgTransaction> {
        self.back.lock().take()
    }
}

impl Tx {
    fn transaction(&mut self) -> &mut PgTransaction {
        Arc::get_mut(&mut self.open)
            .and_then(OnceLock::get_mut)
            .expect("idem_runtime::Tx used before the runtime opened its transaction")
    }
}

impl Deref for Tx {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.open.get().expect("idem_runtime::Tx used before the runtime opened its transaction")
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.transaction()
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        let open = Arc::get_mut(&mut self.open).and_then(OnceLock::take);
        if let Some(tx) = open {
            *self.back.lock() = Some(tx);
        }
    }
}

impl fmt::Debug for Tx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx").field("open", &self.open.get().is_some()).finish()
    }
}

/// The transactional mode of `config`'s store, if it has one.
pub(super) fn transactional(config: &Config) -> Option<&Arc<dyn Transactional>> {
    config.transactional.as_ref()
}

impl FromRequest for Tx {
    type Error = ProblemError;
    type Future = Ready<Result<Self, ProblemError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(extract(req))
    }
}

fn extract(req: &HttpRequest) -> Result<Tx, ProblemError> {
    let refuse = |detail: String| Err(ProblemError::new(ProblemKind::NotConfigured, detail));
    if !matches!(annotated(req), Some(Annotated::Keyed | Annotated::Keyless)) {
        return refuse("idem_runtime::Tx is only available in a handler annotated with #[idempotent]".into());
    }
    let Some(config) = config_of(req) else {
        return refuse("idem_runtime::Tx needs an idem_runtime::Idem configuration registered on the App".into());
    };
    if transactional(config).is_none() {
        return refuse(format!(
            "the handler takes idem_runtime::Tx (transactional mode), which needs a PostgresStore, but the \
             configured store is `{}`; use PostgresStore, or drop the Tx argument",
            config.store.kind()
        ));
    }
    if req.extensions().contains::<PendingTx>() {
        return refuse("a handler may take one idem_runtime::Tx only".into());
    }
    let (open, back) = (Arc::new(OnceLock::new()), Arc::new(Mutex::new(None)));
    let pending = PendingTx { open: Arc::clone(&open), back: Arc::clone(&back) };
    req.extensions_mut().insert(pending);
    Ok(Tx { open, back })
}
