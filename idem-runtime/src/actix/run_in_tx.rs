//! Running a request whose handler takes a [`Tx`](super::tx_extractor::Tx):
//! its writes and the fenced completion commit together (§8 of the
//! behaviour contract). The table on [`Tx`](super::tx_extractor::Tx) lists
//! every ending.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, Responder};

use super::IdempotentHandler;
use super::capture::REPLAYED;
use super::config::Config;
use super::finish::{Answer, Ending, Won, call, releases, settle, settled};
use super::problem::{self, ProblemKind};
use super::retryable::MarkRetryable;
use super::tx_extractor::{PendingTx, transactional};
use crate::engine::tx_commit::{Commit, Committed, Plain, begin, commit_plain, roll_back};
use crate::observe::Outcome;
use crate::store::PgTransaction;

/// What a client is told when the transaction's outcome is not known.
const UNKNOWN: &str = "the request's transaction could not be confirmed as committed; retry with the same key: \
                       the retry gets the stored response if it was, and runs the request if it was not";

/// Runs a claimed request in transactional mode. `pending` holds the slots
/// of the handler's `Tx`.
pub(super) async fn run<F, Args>(claimed: Won, pending: PendingTx, req: HttpRequest, handler: F, args: Args) -> Answer
where
    F: IdempotentHandler<Args>,
    Args: 'static,
{
    let Won { config, route, execution } = claimed;
    // The extractor checked the store; the configuration is shared, so it
    // is the same store.
    let Some(store) = transactional(&config).cloned() else {
        let counted = settle(&route, execution, Ending::Release).await;
        return (
            problem::response(ProblemKind::NotConfigured, "the transactional mode needs a PostgresStore"),
            counted,
        );
    };
    let tx = match begin(&*store, config.store_timeout).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::error!(%error, "could not open the handler's transaction; releasing the claim");
            let _ = execution.try_release().await;
            let detail = "the idempotency store is unavailable; the request was not processed, retry later";
            let response = problem::retry_after(ProblemKind::StoreUnavailable, detail, Duration::from_secs(1));
            return (response, settled(&route, Outcome::StoreError));
        }
    };
    let lent = pending.lend(tx);
    let called = call(handler, args, &req, config.response_limit).await;
    let tx = lent.take_back();
    let (captured, tx) = match (called, tx) {
        (Ok(captured), Some(tx)) => (captured, tx),
        (Err(_), tx) => {
            rolled_back(tx, &config).await;
            let counted = settle(&route, execution, Ending::Release).await;
            let detail = "the request handler failed unexpectedly; its transaction was rolled back and nothing was \
                          kept, so a retry runs it again";
            return (problem::response(ProblemKind::HandlerPanicked, detail), counted);
        }
        (Ok(_), None) => {
            tracing::error!("the handler kept its idem_runtime::Tx past its return; nothing is committed");
            let counted = settle(&route, execution, Ending::Release).await;
            let detail = "the request handler kept its transaction past its return, so it was never committed; \
                          nothing was kept";
            return (problem::response(ProblemKind::TransactionFailed, detail), counted);
        }
    };
    if captured.leaves_held() {
        // As in `execute.rs`: the record stays held for an operator.
        tracing::error!("the execution found its record held for an operator; it stops and leaves the record held");
        rolled_back(Some(tx), &config).await;
        drop(execution);
        return (captured.into_response(), settled(&route, Outcome::Held));
    }
    if releases(&captured, &config) {
        rolled_back(Some(tx), &config).await;
        let counted = settle(&route, execution, Ending::Release).await;
        return (captured.into_response(), counted);
    }
    let stored = captured.to_stored(&config);
    let Some(Commit { committed, execution, response: stored }) = execution.commit(store, tx, stored).await else {
        let response = problem::retry_after(ProblemKind::StoreUnavailable, UNKNOWN, Duration::from_secs(1));
        return (response, settled(&route, Outcome::StoreError));
    };
    match committed {
        Committed::Done => (captured.into_response(), settled(&route, Outcome::Executed)),
        Committed::LeaseLost => {
            // Rolled back: if the key is still ours after all (only our
            // clock said the lease ran out), a tombstone lets the retry run.
            let _ = execution.try_release().await;
            let detail = "this request's lease was lost while it ran, so its transaction was rolled back and \
                          nothing was kept; retry to get the key's outcome";
            let response = problem::retry_after(ProblemKind::LeaseLost, detail, Duration::from_secs(1));
            (response, settled(&route, Outcome::LeaseLost))
        }
        // The handler's own writes are gone. A failure it answered is kept
        // like any failure (it may have had effects outside Postgres); a
        // success over an aborted transaction would be a lie.
        Committed::Aborted if captured.is_failure() => {
            let counted = settle(&route, execution, Ending::Complete(stored)).await;
            (captured.into_response(), counted)
        }
        Committed::Aborted => {
            tracing::error!("the handler answered a success, but a statement of its transaction had failed");
            let counted = settle(&route, execution, Ending::Release).await;
            let detail = "a statement of the request's transaction failed, so nothing was committed";
            (problem::response(ProblemKind::TransactionFailed, detail), counted)
        }
        Committed::RolledBack { transient } => {
            let counted = settle(&route, execution, Ending::Release).await;
            let response = if transient {
                let detail = "the request's transaction could not be committed (a conflict with another \
                              transaction); nothing was kept, retry";
                problem::retry_after(ProblemKind::StoreUnavailable, detail, Duration::from_secs(1))
            } else {
                let detail = "the database refused to commit the request's transaction; nothing was kept";
                problem::response(ProblemKind::TransactionFailed, detail)
            };
            (response, counted)
        }
        Committed::Unknown => {
            // Rolled back for sure if the claim is still ours to release;
            // otherwise the commit went through, and the retry replays it.
            let _ = execution.try_release().await;
            let response = problem::retry_after(ProblemKind::StoreUnavailable, UNKNOWN, Duration::from_secs(1));
            (response, settled(&route, Outcome::StoreError))
        }
    }
}

/// Runs a handler that takes a `Tx` on a request without a key
/// (`required = false`): no claim, no stored response; the transaction is
/// committed when the handler returns, unless its response is retryable.
pub(super) async fn run_without_key<F, Args>(
    config: &Config,
    pending: PendingTx,
    req: HttpRequest,
    handler: F,
    args: Args,
) -> HttpResponse
where
    F: IdempotentHandler<Args>,
{
    let unavailable = || {
        let detail = "the database is unavailable; the request was not processed, retry later";
        problem::retry_after(ProblemKind::StoreUnavailable, detail, Duration::from_secs(1))
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
    let mut response = handler.call(args).await.respond_to(&req).map_into_boxed_body();
    response.headers_mut().remove(REPLAYED);
    let Some(tx) = lent.take_back() else {
        tracing::error!("the handler kept its idem_runtime::Tx past its return; nothing is committed");
        let detail = "the request handler kept its transaction past its return, so it was never committed";
        return problem::response(ProblemKind::TransactionFailed, detail);
    };
    // As with a key: the mark counts on failures only.
    let failure = response.status().is_client_error() || response.status().is_server_error();
    if failure && response.is_retryable() {
        roll_back(tx, config.store_timeout).await;
        return response;
    }
    match commit_plain(tx, config.store_timeout).await {
        Plain::Done => response,
        Plain::Aborted if failure => response,
        Plain::Aborted => {
            tracing::error!("the handler answered a success, but a statement of its transaction had failed");
            let detail = "a statement of the request's transaction failed, so nothing was committed";
            problem::response(ProblemKind::TransactionFailed, detail)
        }
        Plain::Failed => problem::retry_after(ProblemKind::StoreUnavailable, UNKNOWN_KEYLESS, Duration::from_secs(1)),
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
