//! The transactional mode on Postgres (§8 of the behaviour contract): the
//! work's own writes and the fenced completion commit in one transaction,
//! so a crash at any instant leaves both or neither.
//!
//! The transaction is opened after the claim, on the store's pool (one
//! `BEGIN`); the work writes in it; then [`Execution::commit`] runs the
//! fenced completion *inside* it and commits. The completion's `UPDATE`
//! takes the record's row lock: from then on a concurrent claim of the key
//! waits for the `COMMIT` and finds the record completed, and a lease that
//! was lost before makes the `UPDATE` match nothing, so everything rolls
//! back. Extra statements: `BEGIN` and `COMMIT`, nothing else.

use std::time::Duration;

use sqlx::{Postgres, Transaction};

use super::Execution;
use crate::observe::{STORE_LATENCY_METRIC, store_call};
use crate::record::StoredResponse;
use crate::store::{Fence, StoreError};
use crate::stores::PostgresStore;

/// The transaction of one execution.
pub(crate) type PgTransaction = Transaction<'static, Postgres>;

/// SQLSTATE 25P02: a statement of the transaction failed, and the server
/// ignores everything until the rollback.
const IN_FAILED_TRANSACTION: &str = "25P02";

/// How a transactional execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// The work's writes and the response are committed together.
    Done,
    /// The lease was lost before the completion: everything was rolled
    /// back, nothing of this execution remains.
    LeaseLost,
    /// One of the work's own statements failed, leaving the transaction
    /// aborted: everything was rolled back, the claim is still held.
    Aborted,
    /// The completion or the commit failed or timed out: the transaction
    /// is rolled back, or (a commit whose answer was lost) possibly
    /// committed. Either way a retry of the same request finds out safely.
    Unknown,
}

/// Opens the transaction of an execution on `store`'s pool, after its
/// claim: one `BEGIN`, bounded by `timeout`.
pub(crate) async fn begin(store: &PostgresStore, timeout: Duration) -> Result<PgTransaction, StoreError> {
    store_call("postgres", "begin", timeout, store.begin()).await
}

/// Rolls `tx` back, bounded by `timeout`; a rollback that fails or times
/// out is left to the server, which rolls back when the connection goes.
pub(crate) async fn roll_back(tx: PgTransaction, timeout: Duration) {
    match tokio::time::timeout(timeout, tx.rollback()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "rolling back the handler's transaction failed"),
        Err(_) => tracing::warn!("rolling back the handler's transaction timed out"),
    }
}

impl Execution {
    /// One statement of the transaction, bounded by the store timeout and
    /// timed like any store call; `Err(None)` when it timed out.
    async fn timed<T>(
        &self,
        op: &'static str,
        statement: impl std::future::Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Option<sqlx::Error>> {
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(self.timeout, statement).await;
        metrics::histogram!(STORE_LATENCY_METRIC, "op" => op, "store" => "postgres")
            .record(started.elapsed().as_secs_f64());
        result.map_err(|_| None)?.map_err(Some)
    }

    /// Writes `response` as the fenced completion inside `tx` and commits:
    /// the work's writes and the response become visible together, or not
    /// at all.
    pub(crate) async fn commit(
        &self,
        store: &PostgresStore,
        mut tx: PgTransaction,
        response: &StoredResponse,
    ) -> Committed {
        if !self.is_held() {
            tracing::warn!("the lease was lost before the transaction could commit; rolling back");
            roll_back(tx, self.timeout).await;
            return Committed::LeaseLost;
        }
        let complete = store.complete_on(&mut *tx, self.key(), self.token(), response, self.ttl);
        match self.timed("complete", complete).await {
            Ok(Fence::Held) => {}
            Ok(_) => {
                tracing::warn!("the lease was lost before the transaction could commit; rolling back");
                roll_back(tx, self.timeout).await;
                return Committed::LeaseLost;
            }
            Err(Some(sqlx::Error::Database(error))) if error.code().as_deref() == Some(IN_FAILED_TRANSACTION) => {
                tracing::warn!("a statement of the handler's transaction failed; rolling back");
                roll_back(tx, self.timeout).await;
                return Committed::Aborted;
            }
            Err(error) => {
                match error {
                    Some(error) => tracing::error!(error = %store.error(error), "completing in the transaction failed"),
                    None => tracing::error!(after = ?self.timeout, "completing in the transaction timed out"),
                }
                roll_back(tx, self.timeout).await;
                return Committed::Unknown;
            }
        }
        match self.timed("commit", tx.commit()).await {
            Ok(()) => Committed::Done,
            Err(error) => {
                match error {
                    Some(error) => tracing::error!(error = %store.error(error), "the transaction's COMMIT failed"),
                    None => tracing::error!(after = ?self.timeout, "the COMMIT timed out; its outcome is unknown"),
                }
                Committed::Unknown
            }
        }
    }
}
