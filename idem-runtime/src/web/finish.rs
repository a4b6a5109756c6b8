//! How every run of a claimed request ends, plain or transactional: the
//! choice between keeping the handler's response and releasing the claim,
//! and the fenced completion or release itself; and how the request is
//! counted.

use std::sync::Arc;

use tracing::Instrument;

use super::Framework;
use super::capture::{Captured, not_kept};
use super::config::{Config, ServerErrorPolicy};
use super::route::Route;
use crate::background;
use crate::engine::{Execution, Releaser, Tried};
use crate::observe::Outcome;
use crate::record::StoredResponse;

/// A claim this request won.
pub(crate) struct Won {
    pub(crate) config: Arc<Config>,
    pub(crate) route: Route,
    pub(crate) execution: Execution,
}

/// What a run answers: the response, and how the request is counted.
pub(crate) type Answer<F> = (<F as Framework>::Response, Counted);

/// How a request is counted (`idem_requests_total`), once: where it ends,
/// or, for one that ran, where its execution settled (at once, or in the
/// background when its completion lands), while the execution still
/// counts as running, so that a drain never ends before its count.
#[must_use]
pub(crate) enum Counted {
    /// With this outcome, now.
    Now(Outcome),
    /// Where its execution settled.
    Settled,
    /// Not at all: a request without a key, or one interrupted outside its
    /// handler.
    Not,
}

impl Counted {
    /// Counts the request of `route` if it is to be counted now.
    pub(crate) fn tally(self, route: &Route) {
        if let Self::Now(outcome) = self {
            route.count(outcome);
        }
    }
}

/// The handler panicked.
pub(crate) struct Panicked;

/// Whether `captured` says that nothing happened: marked retryable, or a
/// plain 5xx under [`ServerErrorPolicy::Release`].
pub(super) fn releases<F: Framework>(captured: &Captured<F>, config: &Config) -> bool {
    captured.is_marked_retryable()
        || (config.server_errors == ServerErrorPolicy::Release && captured.is_plain_server_error())
}

/// Counts the request whose execution settled with `outcome`, while the
/// execution still counts as running.
pub(super) fn settled(route: &Route, outcome: Outcome) -> Counted {
    route.count(outcome);
    Counted::Settled
}

/// How an execution ends.
pub(super) enum Ending {
    /// Keep this response for replay.
    Complete(StoredResponse),
    /// Keep this response, which an earlier attempt whose answer was lost
    /// may have stored already (the completion inside a transaction whose
    /// `COMMIT` went unanswered): a refusal by the fence is settled by what
    /// the record holds.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    CompleteAfterLost(StoredResponse),
    /// Nothing happened, as the handler said: leave a tombstone.
    Release,
    /// Leave a tombstone for a handler that never said that nothing
    /// happened (a transactional execution rolled back after a panic, or
    /// after a success that did not commit), unless the record was held
    /// for an operator meanwhile: a held execution stays held.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    ReleaseUnlessHeld,
}

/// Ends the execution: one attempt now, and if that fails, more in the
/// background for as long as the lease holds, while the response goes to
/// the client. The request is counted when that is settled (now, or in
/// the background), before the execution ends.
pub(super) async fn settle(route: &Route, execution: Execution, ending: Ending) -> Counted {
    // Sealed once, and only when needed (the store refused the response,
    // or the first try failed): every try stores the same bytes, which an
    // unknown outcome is then compared with.
    let processed = |execution: &Execution| {
        execution.sealed(not_kept(
            "the request was processed, but the store refused to keep its response; it will not run again for \
             this key",
        ))
    };
    // The response to keep (sealed), and whether an attempt whose answer
    // was lost may have stored it; none: release, by whom.
    let (kept, after_lost, releaser) = match ending {
        Ending::Complete(stored) => (Some(execution.sealed(stored)), false, Releaser::Handler),
        Ending::CompleteAfterLost(stored) => (Some(execution.sealed(stored)), true, Releaser::Handler),
        Ending::Release => (None, false, Releaser::Handler),
        Ending::ReleaseUnlessHeld => (None, false, Releaser::Runtime),
    };
    let mut placed = None;
    let first = match &kept {
        Some(stored) => match execution.try_complete(stored).await {
            Tried::Done(Outcome::LeaseLost) if after_lost => Ok(execution.settle_unknown(stored).await),
            Tried::Done(outcome) => Ok(outcome),
            // Refused for good: the small record goes in its place at once.
            Tried::Refused => match execution.try_complete(placed.insert(processed(&execution))).await {
                Tried::Done(outcome) => Ok(outcome),
                _ => Err(Tried::Refused),
            },
            Tried::Failed => Err(Tried::Failed),
        },
        None => execution.try_release_as(releaser).await.ok_or(Tried::Failed),
    };
    let first = match first {
        Ok(outcome) => return settled(route, outcome),
        Err(first) => first,
    };
    let route = route.clone();
    let span = crate::observe::current_span();
    let rest = async move {
        let outcome = match kept {
            Some(stored) => {
                let processed = placed.unwrap_or_else(|| processed(&execution));
                execution.complete(first, &stored, &processed).await
            }
            None => execution.release(releaser).await,
        };
        route.count(outcome);
    };
    // On the keeper's runtime: the worker that ran the handler may stop
    // before the store is back; the drain still waits for this.
    background::spawn(rest.instrument(span));
    Counted::Settled
}
