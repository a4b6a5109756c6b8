//! Running a claimed request: in the request's own future (moved to a task
//! of its own if the client leaves), under a lease kept by the process-wide
//! keeper, ending with a fenced completion or a release.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::{Handler, HttpRequest, HttpResponse, Responder};
use futures_util::FutureExt;
use tracing::Instrument;

use super::capture::{Captured, not_kept, problem_record};
use super::config::{Config, ServerErrorPolicy};
use super::problem::{self, ProblemKind};
use crate::background;
use crate::engine::{Execution, Tried};
use crate::observe::{Outcome, count};
use crate::record::StoredResponse;

/// A claim this request won.
pub(crate) struct Claimed {
    pub(crate) config: Arc<Config>,
    pub(crate) route: String,
    pub(crate) execution: Execution,
}

/// Runs the handler in this request's own future, and moves it to a task of
/// its own if the client hangs up first (which drops this future), so that a
/// client leaving never cancels it half way; its retry gets the stored
/// result. Polling in place spares a task, a join handle and two scheduler
/// round trips per execution.
pub(crate) async fn execute<F, Args>(claimed: Claimed, req: HttpRequest, handler: F, args: Args) -> HttpResponse
where
    F: Handler<Args>,
    F::Output: Responder + 'static,
    Args: 'static,
{
    Detached { work: Some(Box::pin(run(claimed, req, handler, args).instrument(tracing::Span::current()))) }.await
}

/// An execution polled by the request's future until that future is
/// dropped; then spawned, to finish on its own.
struct Detached {
    work: Option<Pin<Box<dyn Future<Output = HttpResponse>>>>,
}

impl Future for Detached {
    type Output = HttpResponse;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<HttpResponse> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(problem::response(ProblemKind::HandlerPanicked, "the request was interrupted"));
        };
        // The handler's own panics are caught and stored inside `run`; one
        // outside it must not take the worker down either.
        match std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(response)) => {
                self.work = None;
                Poll::Ready(response)
            }
            Err(_) => {
                self.work = None;
                tracing::error!("the idempotent execution panicked outside the handler");
                Poll::Ready(problem::response(ProblemKind::HandlerPanicked, "the request was interrupted"))
            }
        }
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else { return };
        if std::thread::panicking() {
            // Something around this request (a middleware) panicked while
            // the handler ran: a second panic here would abort the process.
            // The handler stops half way; its lease lapses and a retry of
            // the same request takes the key over and runs it again (its
            // derived keys keep a deduplicating provider from acting twice).
            tracing::error!("a panic around an idempotent request stopped its handler half way");
            return;
        }
        // The client left while the handler runs: it finishes on the
        // worker's task set, and completes or releases as usual.
        let finish = async move {
            if AssertUnwindSafe(work).catch_unwind().await.is_err() {
                tracing::error!("the idempotent execution panicked outside the handler after its client left");
            }
        };
        // Outside a task set (a plain Tokio runtime) there is nowhere to
        // finish it: say so rather than panic in a destructor.
        if std::panic::catch_unwind(AssertUnwindSafe(|| drop(actix_web::rt::spawn(finish)))).is_err() {
            tracing::error!("no task set to finish an idempotent handler whose client left; it stopped half way");
        }
    }
}

/// What a panic is stored and answered as.
const PANICKED: &str = "the request handler failed unexpectedly; it may have had effects, \
                        so it will not run again for this key";

async fn run<F, Args>(claimed: Claimed, req: HttpRequest, handler: F, args: Args) -> HttpResponse
where
    F: Handler<Args>,
    F::Output: Responder + 'static,
    Args: 'static,
{
    let Claimed { config, route, execution } = claimed;
    if !execution.is_held() {
        // The claim was answered (or this task started) after the lease's
        // end: another process may own the key by now. Never start.
        tracing::error!("the lease ran out before the handler could start; not running it");
        // A tombstone, if the store still holds the claim: the retry may run.
        let _ = execution.try_release().await;
        count(&route, Outcome::StoreError);
        let detail = "the idempotency store answered too slowly to hold this key; the request was not processed, \
                      retry later";
        return problem::retry_after(ProblemKind::StoreUnavailable, detail, std::time::Duration::from_secs(1));
    }
    #[cfg(feature = "postgres")]
    if let Some(pending) = super::transaction::PendingTx::take(&req) {
        let claimed = Claimed { config, route, execution };
        return super::transactional::run(claimed, pending, req, handler, args).await;
    }
    let Ok(captured) = call(handler, args, &req, config.response_limit).await else {
        // Whatever the 5xx policy: a panic says nothing about what the
        // handler had done by then.
        let stored = problem_record(ProblemKind::HandlerPanicked, PANICKED);
        settle(route, execution, Ending::Complete(stored)).await;
        return problem::response(ProblemKind::HandlerPanicked, PANICKED);
    };
    let ending =
        if releases(&captured, &config) { Ending::Release } else { Ending::Complete(captured.to_stored(&config)) };
    settle(route, execution, ending).await;
    captured.into_response()
}

/// The handler panicked.
pub(super) struct Panicked;

/// Calls the handler and captures its response, its body read up to
/// `limit`; a panic is caught and logged.
pub(super) async fn call<F, Args>(handler: F, args: Args, req: &HttpRequest, limit: usize) -> Result<Captured, Panicked>
where
    F: Handler<Args>,
    F::Output: Responder + 'static,
    Args: 'static,
{
    let work = async {
        let response = handler.call(args).await.respond_to(req).map_into_boxed_body();
        Captured::collect(response, limit).await
    };
    AssertUnwindSafe(work).catch_unwind().await.map_err(|_| {
        tracing::error!("the idempotent handler panicked");
        Panicked
    })
}

/// Whether `captured` says that nothing happened: marked retryable, or a
/// plain 5xx under [`ServerErrorPolicy::Release`].
pub(super) fn releases(captured: &Captured, config: &Config) -> bool {
    captured.is_marked_retryable()
        || (config.server_errors == ServerErrorPolicy::Release && captured.is_plain_server_error())
}

/// How an execution ends.
pub(super) enum Ending {
    /// Keep this response for replay.
    Complete(StoredResponse),
    /// Nothing happened: leave a tombstone.
    Release,
}

/// Ends the execution: one attempt now, and if that fails, more in the
/// background for as long as the lease holds, while the response goes to
/// the client. The request is counted once, when that is settled.
pub(super) async fn settle(route: String, execution: Execution, ending: Ending) {
    let processed = || {
        not_kept(
            "the request was processed, but the store refused to keep its response; \
             it will not run again for this key",
        )
    };
    let first = match &ending {
        Ending::Complete(stored) => match execution.try_complete(stored).await {
            Tried::Done(outcome) => Ok(outcome),
            // Refused for good: the small record goes in its place at once.
            Tried::Refused => match execution.try_complete(&processed()).await {
                Tried::Done(outcome) => Ok(outcome),
                _ => Err(Tried::Refused),
            },
            Tried::Failed => Err(Tried::Failed),
        },
        Ending::Release => execution.try_release().await.ok_or(Tried::Failed),
    };
    let first = match first {
        Ok(outcome) => return count(&route, outcome),
        Err(first) => first,
    };
    let span = tracing::Span::current();
    let rest = async move {
        let outcome = match ending {
            Ending::Complete(stored) => execution.complete(first, &stored, &processed()).await,
            Ending::Release => execution.release().await,
        };
        count(&route, outcome);
    };
    // On the keeper's runtime: the worker that ran the handler may stop
    // before the store is back; the drain still waits for this.
    background::spawn(rest.instrument(span));
}
