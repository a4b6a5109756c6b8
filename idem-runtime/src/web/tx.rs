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
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use sqlx::PgConnection;

use super::config::Config;
use super::context::Annotated;
use super::finish::{Answer, Ending, Won, releases, settle, settled};
use super::problem::{Problem, ProblemError, ProblemKind};
use super::{Framework, Incoming};
use crate::background;
use crate::engine::Releaser;
use crate::engine::tx_commit::{Commit, Committed, Plain, begin, commit_plain, roll_back};
use crate::observe::Outcome;
use crate::store::{PgTransaction, Transactional};

/// A Postgres transaction on the store's pool (`PostgresStore`), opened after the
/// claim, in which the handler writes its business rows. Take it as an
/// extractor; use it as a connection (`&mut *tx`):
///
/// ```no_run
/// # #[cfg(feature = "actix")] mod actix {
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
/// # }
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
/// | returns, but the lease was lost | rolled back | owned by the other execution (a failure it answered is stored if the key is still its own) | 409 `lease-lost`, `Retry-After` |
/// | returns a [retryable](crate::MarkRetryable) response (or a 5xx under [`ServerErrorPolicy::Release`](crate::ServerErrorPolicy::Release)) | rolled back | released | the response |
/// | panics | rolled back | released¹ | 500 `handler-panicked` |
/// | left the transaction aborted (a failed statement) and answered 4xx/5xx | rolled back | that failure stored | the response |
/// | left it aborted and answered 2xx/3xx | rolled back | released¹ | 500 `transaction-failed` |
/// | kept the `Tx` past its return and answered 4xx/5xx | never committed | that failure stored | the response |
/// | kept it and answered 2xx/3xx | never committed | released¹ | 500 `transaction-failed` |
/// | answered 4xx/5xx – the database refused the completion or `COMMIT`, or gave no answer, or the session ended | rolled back (or committed, answer lost) | that failure stored | the response |
/// | answered 2xx/3xx – the database refused the completion or `COMMIT` (a deferred constraint; a serialization failure or deadlock) | rolled back | released¹ | 500 `transaction-failed` (503 `store-unavailable` with `Retry-After` for class 40) |
/// | answered 2xx/3xx – the completion or `COMMIT` got no answer, or the session ended (a fatal error, SQLSTATE 08, 58, 57P01–57P05) | rolled back (or committed, answer lost) | released¹, if rolled back | 503 `store-unavailable`: the retry finds out |
///
/// ¹ Unless the record was held for an operator meanwhile (`on_lapse =
/// "hold"`): the runtime's own release leaves it held, and retries get 409
/// `execution-held`. A retryable answer is the handler's word that nothing
/// happened, and releases a held record too.
///
/// A failure the handler answered (not marked retryable) is kept whatever
/// became of its transaction, as it is without one: it may stand for an
/// effect outside the database that no durable step recorded, such as a
/// provider's charge whose answer was lost. Its rows are rolled back; the
/// failure is stored outside the transaction, fenced by the execution's
/// token, and retries replay it.
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
fn transactional(config: &Config) -> Option<&Arc<dyn Transactional>> {
    config.transactional.as_ref()
}

/// A [`Tx`] for a request marked `annotated`, under `config`, and the slots
/// the runtime keeps; refused outside `#[idempotent]`, without a
/// transactional store, or when the request has one already (`pending`).
pub(crate) fn tx_for(
    annotated: Option<Annotated>,
    config: Option<&Config>,
    pending: bool,
) -> Result<(Tx, PendingTx), ProblemError> {
    let refuse = |detail: String| Err(ProblemError::new(ProblemKind::NotConfigured, detail));
    if annotated.is_none() {
        return refuse("idem_runtime::Tx is only available in a handler annotated with #[idempotent]".into());
    }
    let Some(config) = config else {
        return refuse("idem_runtime::Tx needs an idem_runtime::Idem configuration registered for the route".into());
    };
    if transactional(config).is_none() {
        return refuse(format!(
            "the handler takes idem_runtime::Tx (transactional mode), which needs a PostgresStore, but the \
             configured store is `{}`; use PostgresStore, or drop the Tx argument",
            config.store.kind()
        ));
    }
    if pending {
        return refuse("a handler may take one idem_runtime::Tx only".into());
    }
    let (open, back) = (Arc::new(OnceLock::new()), Arc::new(Mutex::new(None)));
    let pending = PendingTx { open: Arc::clone(&open), back: Arc::clone(&back) };
    Ok((Tx { open, back }, pending))
}

const UNKNOWN: &str = "the request's transaction could not be confirmed as committed; retry with the same key: \
                       the retry gets the stored response if it was, and runs the request if it was not (unless \
                       it was held for an operator meanwhile)";

/// Runs a claimed request in transactional mode. `pending` holds the slots
/// of the handler's `Tx`.
pub(super) async fn run<R: Incoming>(
    claimed: Won,
    pending: PendingTx,
    mut req: R,
    args: R::Args,
) -> Answer<R::Framework> {
    let problem = <R::Framework as Framework>::problem;
    let Won { config, route, execution } = claimed;
    // The extractor checked the store; the configuration is shared, so it
    // is the same store.
    let Some(store) = transactional(&config).cloned() else {
        let counted = settle(&route, execution, Ending::Release).await;
        return (
            problem(Problem::new(ProblemKind::NotConfigured, "the transactional mode needs a PostgresStore")),
            counted,
        );
    };
    let tx = match begin(&*store, config.store_timeout).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::error!(%error, "could not open the handler's transaction; releasing the claim");
            let _ = execution.try_release().await;
            let detail = "the idempotency store is unavailable; the request was not processed, retry later";
            let response =
                problem(Problem::new(ProblemKind::StoreUnavailable, detail).retry_after(Duration::from_secs(1)));
            return (response, settled(&route, Outcome::StoreError));
        }
    };
    let lent = pending.lend(tx);
    let called = req.call(args, config.response_limit).await;
    let tx = lent.take_back();
    let captured = match called {
        Ok(captured) => captured,
        Err(_) => {
            rolled_back(tx, &config).await;
            let counted = settle(&route, execution, Ending::ReleaseUnlessHeld).await;
            let detail = "the request handler failed unexpectedly; its transaction was rolled back and nothing was \
                          kept, so a retry runs it again, unless it was held for an operator meanwhile";
            return (problem(Problem::new(ProblemKind::HandlerPanicked, detail)), counted);
        }
    };
    if captured.leaves_held() {
        // As in `run.rs`: the record stays held for an operator.
        tracing::error!("the execution found its record held for an operator; it stops and leaves the record held");
        rolled_back(tx, &config).await;
        drop(execution);
        return (captured.into_response(), settled(&route, Outcome::Held));
    }
    if releases(&captured, &config) {
        rolled_back(tx, &config).await;
        let counted = settle(&route, execution, Ending::Release).await;
        return (captured.into_response(), counted);
    }
    let Some(tx) = tx else {
        tracing::error!("the handler kept its idem_runtime::Tx past its return; nothing is committed");
        // Nothing can be committed; a failure it answered is kept like any
        // failure (see the commit's endings below).
        if captured.has_failure_status() {
            let counted = settle(&route, execution, Ending::Complete(captured.to_stored(&config))).await;
            return (captured.into_response(), counted);
        }
        let counted = settle(&route, execution, Ending::ReleaseUnlessHeld).await;
        let detail = "the request handler kept its transaction past its return, so it was never committed; \
                      nothing was kept";
        return (problem(Problem::new(ProblemKind::TransactionFailed, detail)), counted);
    };
    let stored = execution.sealed(captured.to_stored(&config));
    let Some(Commit { committed, execution, response: stored }) = execution.commit(store, tx, stored).await else {
        let response =
            problem(Problem::new(ProblemKind::StoreUnavailable, UNKNOWN).retry_after(Duration::from_secs(1)));
        return (response, settled(&route, Outcome::StoreError));
    };
    let lease_lost = || {
        let detail = "this request's lease was lost while it ran, so its transaction was rolled back; retry to get \
                      the key's outcome";
        problem(Problem::new(ProblemKind::LeaseLost, detail).retry_after(Duration::from_secs(1)))
    };
    match committed {
        Committed::Done => (captured.into_response(), settled(&route, Outcome::Executed)),
        // The handler's writes are gone, but a failure it answered is kept
        // like any failure, stored outside the transaction (fenced): it may
        // have had effects outside Postgres that no durable step recorded (a
        // provider's charge whose answer was lost), which a release would
        // let a retry make again.
        Committed::Aborted if captured.has_failure_status() => {
            let counted = settle(&route, execution, Ending::Complete(stored)).await;
            (captured.into_response(), counted)
        }
        // The completion in the transaction may have committed, its answer
        // lost (or, with synchronous standbys, an error after the local
        // commit): the record then holds this very response already.
        Committed::RolledBack { .. } | Committed::Unknown if captured.has_failure_status() => {
            let counted = settle(&route, execution, Ending::CompleteAfterLost(stored)).await;
            (captured.into_response(), counted)
        }
        // Kept if the record is still this execution's (only the lease's
        // confirmation came late); the client is told to retry for the
        // key's outcome, whichever execution it comes from.
        Committed::LeaseLost if captured.has_failure_status() => {
            let counted = settle(&route, execution, Ending::Complete(stored)).await;
            (lease_lost(), counted)
        }
        Committed::LeaseLost => {
            // Rolled back: if the key is still ours after all (only our
            // clock said the lease ran out), a tombstone lets the retry run.
            let _ = execution.try_release_as(Releaser::Runtime).await;
            (lease_lost(), settled(&route, Outcome::LeaseLost))
        }
        Committed::Aborted => {
            tracing::error!("the handler answered a success, but a statement of its transaction had failed");
            let counted = settle(&route, execution, Ending::ReleaseUnlessHeld).await;
            let detail = "a statement of the request's transaction failed, so nothing was committed";
            (problem(Problem::new(ProblemKind::TransactionFailed, detail)), counted)
        }
        Committed::RolledBack { transient } => {
            let counted = settle(&route, execution, Ending::ReleaseUnlessHeld).await;
            let response = if transient {
                let detail = "the request's transaction could not be committed (a conflict with another \
                              transaction); nothing was kept, retry";
                problem(Problem::new(ProblemKind::StoreUnavailable, detail).retry_after(Duration::from_secs(1)))
            } else {
                let detail = "the database refused to commit the request's transaction; nothing was kept";
                problem(Problem::new(ProblemKind::TransactionFailed, detail))
            };
            (response, counted)
        }
        Committed::Unknown => {
            // Rolled back for sure if the claim is still ours to release
            // (tried while the lease holds); otherwise the commit went
            // through, and the retry replays it.
            background::spawn(async move {
                let _ = execution.release(Releaser::Runtime).await;
            });
            let response =
                problem(Problem::new(ProblemKind::StoreUnavailable, UNKNOWN).retry_after(Duration::from_secs(1)));
            (response, settled(&route, Outcome::StoreError))
        }
    }
}

/// Runs a handler that takes a `Tx` on a request without a key
/// (`required = false`): no claim, no stored response; the transaction is
/// committed when the handler returns (`call`), unless its response is a
/// failure marked retryable (`status_of` tells its status and the mark).
pub(crate) async fn run_without_key_in_tx<F: Framework, Fut>(
    config: &Config,
    pending: PendingTx,
    call: impl FnOnce() -> Fut,
    status_of: impl Fn(&F::Response) -> (u16, bool),
) -> F::Response
where
    Fut: Future<Output = F::Response>,
{
    let unavailable = || {
        let detail = "the database is unavailable; the request was not processed, retry later";
        F::problem(Problem::new(ProblemKind::StoreUnavailable, detail).retry_after(Duration::from_secs(1)))
    };
    let Some(store) = transactional(config) else { return unavailable() };
    let tx = match begin(&**store, config.store_timeout).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::error!(%error, "could not open the handler's transaction");
            return unavailable();
        }
    };
    let lent = pending.lend(tx);
    let response = call().await;
    let Some(tx) = lent.take_back() else {
        tracing::error!("the handler kept its idem_runtime::Tx past its return; nothing is committed");
        let detail = "the request handler kept its transaction past its return, so it was never committed";
        return F::problem(Problem::new(ProblemKind::TransactionFailed, detail));
    };
    // As with a key: the mark counts on failures only.
    let (status, retryable) = status_of(&response);
    let failure = super::retryable::is_failure_status(status);
    if failure && retryable {
        roll_back(tx, config.store_timeout).await;
        return response;
    }
    match commit_plain(tx, config.store_timeout).await {
        Plain::Done => response,
        Plain::Aborted if failure => response,
        Plain::Aborted => {
            tracing::error!("the handler answered a success, but a statement of its transaction had failed");
            let detail = "a statement of the request's transaction failed, so nothing was committed";
            F::problem(Problem::new(ProblemKind::TransactionFailed, detail))
        }
        Plain::Failed => {
            F::problem(Problem::new(ProblemKind::StoreUnavailable, UNKNOWN_KEYLESS).retry_after(Duration::from_secs(1)))
        }
    }
}

/// What a client without a key is told when the commit's outcome is not known.
const UNKNOWN_KEYLESS: &str = "the request's transaction could not be confirmed as committed; it may or may not \
                               have taken effect";

/// Rolls back what the handler handed back, if anything.
async fn rolled_back(tx: Option<PgTransaction>, config: &Config) {
    if let Some(tx) = tx {
        roll_back(tx, config.store_timeout).await;
    }
}
