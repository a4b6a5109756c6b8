//! The transactional mode on Postgres (§8 of the behaviour contract): the
//! work's own writes and the fenced completion commit in one transaction,
//! so a crash at any instant leaves both or neither.
//!
//! The transaction is opened after the claim, on the store's pool (one
//! `BEGIN ISOLATION LEVEL READ COMMITTED`); the work writes in it; then
//! [`Execution::commit`] runs the fenced completion *inside* it and
//! commits. The completion's `UPDATE` takes the record's row lock: from then
//! on a concurrent claim of the key waits for the `COMMIT` and finds the
//! record completed, and a lease that was lost before makes the `UPDATE`
//! match nothing, so everything rolls back. Extra statements: `BEGIN` and
//! `COMMIT`, nothing else.
//!
//! Two things run on the lease keeper's runtime rather than where the work
//! ran, and are never cancelled half way:
//!
//! - `BEGIN`: sqlx (0.9) returns a connection whose `BEGIN` was cut short to
//!   the pool *inside* that transaction, where later claims and completions
//!   would run uncommitted. A `BEGIN` that outlasts its timeout finishes on
//!   its own, and its transaction is rolled back when dropped.
//! - the completion and the `COMMIT`: between the two the record's row is
//!   locked, and the keeper's renewals of every lease wait for that lock.
//!   An application thread blocked by a handler must not stretch it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use sqlx::postgres::PgSeverity;

use super::Execution;
use crate::background;
use crate::observe::{STORE_LATENCY_METRIC, store_call};
use crate::record::StoredResponse;
use crate::store::{Fence, PgTransaction, StoreError, Transactional};

/// SQLSTATE 25P02: a statement of the transaction failed, and the server
/// ignores everything until the rollback.
const IN_FAILED_TRANSACTION: &str = "25P02";

/// SQLSTATE class 40: serialization failure, deadlock. Trying again may
/// work.
const TRANSACTION_ROLLBACK: &str = "40";

/// Whether a server's error says that the session ended rather than that
/// the statement was refused: a fatal error (an administrator or a shutdown
/// ending the backend, an idle-in-transaction timeout), SQLSTATE class 08
/// (connection) or 58 (system), or one of 57P01 to 57P05 (shutdowns, a
/// server not accepting connections, the idle-session timeout). A `COMMIT`
/// that gets one may have committed (with synchronous standbys, the local
/// commit stands when the wait for them is cut short).
fn session_ended(error: &dyn sqlx::error::DatabaseError) -> bool {
    let fatal = error
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some_and(|error| matches!(error.severity(), PgSeverity::Fatal | PgSeverity::Panic));
    let code = error.code().unwrap_or_default();
    fatal || code.starts_with("08") || code.starts_with("58") || code.starts_with("57P")
}

/// How a transactional execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// The work's writes and the response are committed together.
    Done,
    /// The lease was lost before the completion: everything was rolled
    /// back, nothing of this execution remains.
    LeaseLost,
    /// One of the work's own statements failed, leaving the transaction
    /// aborted: everything was rolled back; the claim is still held.
    Aborted,
    /// The server refused the completion or the `COMMIT` (a deferred
    /// constraint, a serialization failure): everything was rolled back.
    /// `transient`: trying again may work (SQLSTATE class 40).
    RolledBack {
        /// Whether the same request may succeed when tried again.
        transient: bool,
    },
    /// No answer to the completion or the `COMMIT` (a broken connection, a
    /// timeout): rolled back, or (a `COMMIT` whose answer was lost)
    /// committed. Either way a retry of the same request finds out safely.
    Unknown,
}

/// What [`Execution::commit`] hands back.
pub(crate) struct Commit {
    /// How it ended.
    pub(crate) committed: Committed,
    /// The execution, to release or settle.
    pub(crate) execution: Execution,
    /// The response it tried to store.
    #[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
    pub(crate) response: StoredResponse,
}

/// Opens the transaction of an execution on `store`'s pool, after its
/// claim: one `BEGIN`, awaited at most `timeout`, never cancelled (see the
/// module's docs).
pub(crate) async fn begin(store: &dyn Transactional, timeout: Duration) -> Result<PgTransaction, StoreError> {
    let task = background::spawn_joined(store.begin());
    let opened = async {
        match task.await {
            Ok(result) => result.map_err(|error| store.error(error)),
            Err(error) => Err(StoreError::unavailable("postgres", error)),
        }
    };
    store_call("postgres", "begin", timeout, opened).await
}

/// Rolls `tx` back on the keeper's runtime, awaited at most `timeout`; a
/// rollback that fails or times out is left to the server, which rolls back
/// when the connection goes.
pub(crate) async fn roll_back(tx: PgTransaction, timeout: Duration) {
    let rollback = background::spawn_joined(async move {
        match tokio::time::timeout(timeout, tx.rollback()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "rolling back the handler's transaction failed"),
            Err(_) => tracing::warn!("rolling back the handler's transaction timed out"),
        }
    });
    let _ = rollback.await;
}

/// How committing a transaction without a claim (a request without a key)
/// ended.
#[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plain {
    /// Committed.
    Done,
    /// A statement of the work had failed: rolled back, nothing committed.
    Aborted,
    /// The `COMMIT` failed or was not answered.
    Failed,
}

#[cfg_attr(not(any(feature = "actix", feature = "axum")), allow(dead_code))]
/// Commits a transaction that has no claim: first a probe, since a `COMMIT`
/// of an aborted transaction answers success (it rolls back), then the
/// `COMMIT`, on the keeper's runtime.
pub(crate) async fn commit_plain(tx: PgTransaction, timeout: Duration) -> Plain {
    let commit = background::spawn_joined(async move {
        let mut tx = tx;
        match tokio::time::timeout(timeout, sqlx::query("SELECT 1").execute(&mut *tx)).await {
            Ok(Ok(_)) => {}
            Ok(Err(sqlx::Error::Database(error))) if error.code().as_deref() == Some(IN_FAILED_TRANSACTION) => {
                let _ = tokio::time::timeout(timeout, tx.rollback()).await;
                return Plain::Aborted;
            }
            _ => return Plain::Failed,
        }
        match tokio::time::timeout(timeout, tx.commit()).await {
            Ok(Ok(())) => Plain::Done,
            Ok(Err(error)) => {
                tracing::error!(%error, "committing the handler's transaction failed");
                Plain::Failed
            }
            Err(_) => {
                tracing::error!("committing the handler's transaction timed out; its outcome is unknown");
                Plain::Failed
            }
        }
    });
    commit.await.unwrap_or(Plain::Failed)
}

impl Execution {
    /// Writes `response` as the fenced completion inside `tx` and commits,
    /// on the keeper's runtime: the work's writes and the response become
    /// visible together, or not at all. A panic on the way (in the driver,
    /// say) is an unknown outcome: the execution comes back to be settled.
    /// `None` only if the task itself could not finish (its runtime shut
    /// down; the execution is then gone, and its lease runs out).
    pub(crate) async fn commit(
        self,
        store: Arc<dyn Transactional>,
        tx: PgTransaction,
        response: StoredResponse,
    ) -> Option<Commit> {
        let task = background::spawn_joined(async move {
            let committing = AssertUnwindSafe(self.commit_here(&*store, tx, &response)).catch_unwind();
            let committed = committing.await.unwrap_or_else(|_| {
                tracing::error!("committing the handler's transaction panicked; its outcome is unknown");
                Committed::Unknown
            });
            Commit { committed, execution: self, response }
        });
        match task.await {
            Ok(commit) => Some(commit),
            Err(error) => {
                tracing::error!(%error, "committing the handler's transaction failed unexpectedly");
                None
            }
        }
    }

    async fn commit_here(
        &self,
        store: &dyn Transactional,
        mut tx: PgTransaction,
        response: &StoredResponse,
    ) -> Committed {
        if !self.confirmed_within(self.timeout).await {
            tracing::warn!("the lease was lost before the transaction could commit; rolling back");
            rolled_back_here(tx, self.timeout).await;
            return Committed::LeaseLost;
        }
        let sent = std::time::Instant::now();
        let complete = store.complete_in(&mut tx, self.key(), self.token(), response, self.ttl);
        let (what, error) = match self.timed("complete", complete).await {
            Ok(Fence::Held) => match self.timed("commit", tx.commit()).await {
                Ok(()) => {
                    self.completed(response, sent);
                    return Committed::Done;
                }
                Err(error) => ("the transaction's COMMIT", error),
            },
            Ok(_) => {
                tracing::warn!("the lease was lost before the transaction could commit; rolling back");
                rolled_back_here(tx, self.timeout).await;
                return Committed::LeaseLost;
            }
            Err(Some(sqlx::Error::Database(error))) if error.code().as_deref() == Some(IN_FAILED_TRANSACTION) => {
                tracing::warn!("a statement of the handler's transaction failed; rolling back");
                rolled_back_here(tx, self.timeout).await;
                return Committed::Aborted;
            }
            Err(error) => {
                rolled_back_here(tx, self.timeout).await;
                ("completing in the transaction", error)
            }
        };
        match error {
            // The server refused the statement: the transaction is rolled back.
            Some(sqlx::Error::Database(error)) if !session_ended(&*error) => {
                let transient = error.code().is_some_and(|code| code.starts_with(TRANSACTION_ROLLBACK));
                tracing::error!(%error, "{what} failed; everything was rolled back");
                Committed::RolledBack { transient }
            }
            // The session ended (the server said why, or it went): the
            // `COMMIT` may stand.
            Some(error) => {
                tracing::error!(error = %store.error(error), "{what} failed; its outcome is unknown");
                Committed::Unknown
            }
            None => {
                tracing::error!(after = ?self.timeout, "{what} timed out; its outcome is unknown");
                Committed::Unknown
            }
        }
    }

    /// One statement of the transaction, bounded by the store timeout and
    /// timed like any store call; `Err(None)` when it timed out.
    async fn timed<T>(
        &self,
        op: &'static str,
        statement: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Option<sqlx::Error>> {
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(self.timeout, statement).await;
        metrics::histogram!(STORE_LATENCY_METRIC, "op" => op, "store" => "postgres")
            .record(started.elapsed().as_secs_f64());
        result.map_err(|_| None)?.map_err(Some)
    }
}

impl Execution {
    /// Whether the lease is confirmed, waiting up to `wait` for the keeper
    /// to confirm a lapsed one again (it renews a lapsed lease at least
    /// once a second). The transactional mode never commits on a lease
    /// that is not confirmed.
    async fn confirmed_within(&self, wait: Duration) -> bool {
        let until = std::time::Instant::now() + wait;
        while !self.is_held() {
            if self.lease.state().is_lost() || std::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// Rolls back on the current runtime (already the keeper's).
async fn rolled_back_here(tx: PgTransaction, timeout: Duration) {
    if let Ok(Err(error)) = tokio::time::timeout(timeout, tx.rollback()).await {
        tracing::warn!(%error, "rolling back the handler's transaction failed");
    }
}
