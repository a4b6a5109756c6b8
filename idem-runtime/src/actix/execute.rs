//! Running a request: a claimed one in the request's own future (moved to
//! a task of its own if the client leaves), under a lease kept by the
//! process-wide keeper, ending as `finish.rs` says; and one without a key
//! (`required = false`), as if the handler were not annotated.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest, Responder};
use futures_util::FutureExt;
use tracing::Instrument;

use super::IdempotentHandler;
use super::capture::{REPLAYED, problem_record};
use super::config::Config;
use super::context::Annotated;
use super::finish::{Answer, Counted, Ending, Won, call, releases, settle, settled};
use super::problem::{self, ProblemKind};
use super::route::Route;
use crate::engine::Standing;
use crate::observe::Outcome;

/// Runs the handler in this request's own future, and moves it to a task of
/// its own if the client hangs up first (which drops this future), so that a
/// client leaving never cancels it half way; its retry gets the stored
/// result. Polling in place spares a task, a join handle and two scheduler
/// round trips per execution.
pub(crate) async fn execute<F, Args>(claimed: Won, req: HttpRequest, handler: F, args: Args) -> Answer
where
    F: IdempotentHandler<Args>,
    Args: 'static,
{
    let (route, span) = (claimed.route.clone(), crate::observe::current_span());
    let work = run(claimed, req, handler, args).instrument(span.clone());
    Detached { route, span, work: Some(Box::pin(work)) }.await
}

/// An execution polled by the request's future until that future is
/// dropped; then spawned, to finish on its own.
struct Detached {
    /// Its route and span, to count it by if it finishes on its own.
    route: Route,
    span: tracing::Span,
    work: Option<Pin<Box<dyn Future<Output = Answer>>>>,
}

/// What a request interrupted outside its handler is answered.
fn interrupted() -> Answer {
    (problem::response(ProblemKind::HandlerPanicked, "the request was interrupted"), Counted::Not)
}

impl Future for Detached {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(interrupted());
        };
        // The handler's own panics are caught and stored inside `run`; one
        // outside it must not take the worker down either.
        match std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(answer)) => {
                self.work = None;
                Poll::Ready(answer)
            }
            Err(_) => {
                self.work = None;
                tracing::error!("the idempotent execution panicked outside the handler");
                Poll::Ready(interrupted())
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
        // worker's task set, completes or releases as usual, and the
        // request ends (and is counted) there.
        let route = self.route.clone();
        let finish = async move {
            match AssertUnwindSafe(work).catch_unwind().await {
                Ok((_, counted)) => counted.tally(&route),
                Err(_) => {
                    tracing::error!("the idempotent execution panicked outside the handler after its client left")
                }
            }
        }
        .instrument(self.span.clone());
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

async fn run<F, Args>(claimed: Won, req: HttpRequest, handler: F, args: Args) -> Answer
where
    F: IdempotentHandler<Args>,
    Args: 'static,
{
    let Won { config, route, execution } = claimed;
    if !execution.is_held() {
        // The claim was answered (or this task started) after the lease's
        // end: another process may own the key by now. Never start.
        tracing::error!("the lease ran out before the handler could start; not running it");
        // A tombstone, if the store still holds the claim: the retry may run.
        let _ = execution.try_release().await;
        let detail = "the idempotency store answered too slowly to hold this key; the request was not processed, \
                      retry later";
        let response = problem::retry_after(ProblemKind::StoreUnavailable, detail, std::time::Duration::from_secs(1));
        return (response, settled(&route, Outcome::StoreError));
    }
    // A lease that lapsed before the start and was confirmed again may have
    // had its record held for an operator meanwhile: a renewal of a held
    // record confirms its holder's lease. The record tells (read only after
    // a lapse), as before a durable step.
    match execution.standing().await {
        Standing::Owner => {}
        Standing::Held => {
            // Left held, never released: the operator settles it on what it
            // saw, which is that nothing ran.
            tracing::error!(
                "the execution's record was held for an operator before its handler started; not running it"
            );
            drop(execution);
            let response = problem::response(ProblemKind::ExecutionHeld, problem::HELD);
            return (response, settled(&route, Outcome::Held));
        }
        Standing::Unknown => {
            tracing::error!("the lease could not be confirmed before the handler could start; not running it");
            let _ = execution.try_release().await;
            let detail = "the idempotency store could not confirm this request's hold on its key; the request was not \
                          processed, retry later";
            let response =
                problem::retry_after(ProblemKind::StoreUnavailable, detail, std::time::Duration::from_secs(1));
            return (response, settled(&route, Outcome::StoreError));
        }
        Standing::Lost => {
            tracing::warn!("the lease was lost before the handler could start; not running it");
            let detail = "another execution took this request's key over before its handler started; the request \
                          was not processed here, retry to get the key's outcome";
            let response = problem::retry_after(ProblemKind::LeaseLost, detail, std::time::Duration::from_secs(1));
            return (response, settled(&route, Outcome::LeaseLost));
        }
    }
    #[cfg(feature = "postgres")]
    if let Some(pending) = super::tx_extractor::PendingTx::take(&req) {
        let claimed = Won { config, route, execution };
        return super::run_in_tx::run(claimed, pending, req, handler, args).await;
    }
    let Ok(captured) = call(handler, args, &req, config.response_limit).await else {
        // Whatever the 5xx policy: a panic says nothing about what the
        // handler had done by then.
        let stored = problem_record(ProblemKind::HandlerPanicked, PANICKED);
        let counted = settle(&route, execution, Ending::Complete(stored)).await;
        return (problem::response(ProblemKind::HandlerPanicked, PANICKED), counted);
    };
    if captured.leaves_held() {
        // Its record waits for an operator, who settles it on the steps it
        // saw: neither completed nor released here.
        tracing::error!("the execution found its record held for an operator; it stops and leaves the record held");
        drop(execution);
        return (captured.into_response(), settled(&route, Outcome::Held));
    }
    let ending =
        if releases(&captured, &config) { Ending::Release } else { Ending::Complete(captured.to_stored(&config)) };
    let counted = settle(&route, execution, ending).await;
    (captured.into_response(), counted)
}

/// `required = false` and no key: the handler runs as if not annotated
/// (a `Tx` it takes is committed when it returns, unless its response is
/// retryable). Not counted: only requests with a key are.
pub(super) async fn run_without_key<F, Args>(
    config: Arc<Config>,
    req: HttpRequest,
    mut payload: Payload,
    handler: F,
) -> Answer
where
    F: IdempotentHandler<Args>,
    Args: FromRequest + 'static,
{
    req.extensions_mut().insert(Annotated::Keyless);
    let args = match Args::from_request(&req, &mut payload).await {
        Ok(args) => args,
        Err(error) => return (error.into().error_response(), Counted::Not),
    };
    #[cfg(feature = "postgres")]
    if let Some(pending) = super::tx_extractor::PendingTx::take(&req) {
        let response = super::run_in_tx::run_without_key(&config, pending, req, handler, args).await;
        return (response, Counted::Not);
    }
    #[cfg(not(feature = "postgres"))]
    let _ = config;
    let mut response = handler.call(args).await.respond_to(&req).map_into_boxed_body();
    // The header belongs to the runtime, with or without a key.
    response.headers_mut().remove(REPLAYED);
    (response, Counted::Not)
}
