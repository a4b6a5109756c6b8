//! Running a claimed request: in the request's own future, moved to a task
//! of its own if the client hangs up (each framework spawns it its own
//! way), under a lease kept by the process-wide keeper, ending as
//! `finish.rs` says.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;

use super::capture::problem_record;
use super::finish::{Answer, Counted, Ending, Won, releases, settle, settled};
use super::problem::{HELD, Problem, ProblemKind};
use super::route::Route;
use super::{Framework, Incoming};
use crate::engine::Standing;
use crate::observe::Outcome;

/// An execution polled by the request's future until that future is
/// dropped (the client left); then handed to `finish`, which spawns it to
/// finish on its own, so that a client leaving never cancels a handler
/// half way: its retry gets the stored result. Polling in place spares a
/// task, a join handle and two scheduler round trips per execution.
pub(crate) struct Detached<F, W: Future> {
    /// Its route, to count it by if it finishes on its own.
    route: Route,
    span: tracing::Span,
    work: Option<Pin<Box<W>>>,
    /// Spawns what is left of the work, which counts the request where it
    /// ends (see [`finish_detached`]); `false` when there is nowhere to
    /// spawn it.
    spawn: fn(Pin<Box<W>>, Route, tracing::Span) -> bool,
    framework: std::marker::PhantomData<fn() -> F>,
}

impl<F, W: Future> Detached<F, W> {
    /// `work`, run in place until dropped, then spawned with `spawn`.
    pub(crate) fn new(route: &Route, work: W, spawn: fn(Pin<Box<W>>, Route, tracing::Span) -> bool) -> Self {
        let span = crate::observe::current_span();
        Self { route: route.clone(), span, work: Some(Box::pin(work)), spawn, framework: std::marker::PhantomData }
    }
}

/// What a request interrupted outside its handler is answered.
fn interrupted<F: Framework>() -> Answer<F> {
    (F::problem(Problem::new(ProblemKind::HandlerPanicked, "the request was interrupted")), Counted::Not)
}

impl<F: Framework, W: Future<Output = Answer<F>>> Future for Detached<F, W> {
    type Output = Answer<F>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer<F>> {
        let this = self.get_mut();
        let Some(work) = this.work.as_mut() else {
            return Poll::Ready(interrupted::<F>());
        };
        let span = &this.span;
        // The handler's own panics are caught and stored inside `run`; one
        // outside it must not take the worker down either.
        match std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _entered = span.enter();
            work.as_mut().poll(cx)
        })) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(answer)) => {
                this.work = None;
                Poll::Ready(answer)
            }
            Err(_) => {
                this.work = None;
                tracing::error!("the idempotent execution panicked outside the handler");
                Poll::Ready(interrupted::<F>())
            }
        }
    }
}

impl<F, W: Future> Drop for Detached<F, W> {
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
        // The client left while the handler runs: it finishes on a task of
        // its own, completes or releases as usual, and the request ends
        // (and is counted) there.
        let spawned =
            std::panic::catch_unwind(AssertUnwindSafe(|| (self.spawn)(work, self.route.clone(), self.span.clone())));
        // Outside a runtime there is nowhere to finish it: say so rather
        // than panic in a destructor.
        if !matches!(spawned, Ok(true)) {
            tracing::error!("no runtime to finish an idempotent handler whose client left; it stopped half way");
        }
    }
}

/// The rest of a detached execution, as its task runs it: to its end,
/// counted there.
pub(crate) async fn finish_detached<F: Framework, W: Future<Output = Answer<F>>>(work: Pin<Box<W>>, route: Route) {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok((_, counted)) => counted.tally(&route),
        Err(_) => tracing::error!("the idempotent execution panicked outside the handler after its client left"),
    }
}

/// What a panic is stored and answered as.
const PANICKED: &str = "the request handler failed unexpectedly; it may have had effects, \
                        so it will not run again for this key";

/// Runs a claimed request to its end.
pub(crate) async fn run<R: Incoming>(claimed: Won, mut req: R, args: R::Args) -> Answer<R::Framework> {
    let Won { config, route, execution } = claimed;
    let unavailable = |detail: &'static str| {
        <R::Framework as Framework>::problem(
            Problem::new(ProblemKind::StoreUnavailable, detail).retry_after(Duration::from_secs(1)),
        )
    };
    if !execution.is_held() {
        // The claim was answered (or this task started) after the lease's
        // end: another process may own the key by now. Never start.
        tracing::error!("the lease ran out before the handler could start; not running it");
        // A tombstone, if the store still holds the claim: the retry may run.
        let _ = execution.try_release().await;
        let detail = "the idempotency store answered too slowly to hold this key; the request was not processed, \
                      retry later";
        return (unavailable(detail), settled(&route, Outcome::StoreError));
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
            let response = <R::Framework as Framework>::problem(Problem::new(ProblemKind::ExecutionHeld, HELD));
            return (response, settled(&route, Outcome::Held));
        }
        Standing::Unknown => {
            tracing::error!("the lease could not be confirmed before the handler could start; not running it");
            let _ = execution.try_release().await;
            let detail = "the idempotency store could not confirm this request's hold on its key; the request was \
                          not processed, retry later";
            return (unavailable(detail), settled(&route, Outcome::StoreError));
        }
        Standing::Lost => {
            tracing::warn!("the lease was lost before the handler could start; not running it");
            let detail = "another execution took this request's key over before its handler started; the request \
                          was not processed here, retry to get the key's outcome";
            let problem = Problem::new(ProblemKind::LeaseLost, detail).retry_after(Duration::from_secs(1));
            return (<R::Framework as Framework>::problem(problem), settled(&route, Outcome::LeaseLost));
        }
    }
    #[cfg(feature = "postgres")]
    if let Some(pending) = req.take_tx() {
        let claimed = Won { config, route, execution };
        return super::tx::run(claimed, pending, req, args).await;
    }
    let Ok(captured) = req.call(args, config.response_limit).await else {
        // Whatever the 5xx policy: a panic says nothing about what the
        // handler had done by then.
        let stored = problem_record(ProblemKind::HandlerPanicked, PANICKED);
        let counted = settle(&route, execution, Ending::Complete(stored)).await;
        return (<R::Framework as Framework>::problem(Problem::new(ProblemKind::HandlerPanicked, PANICKED)), counted);
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
