//! Running a claimed request: on its own task, under a renewed lease,
//! ending with a fenced completion or a release.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::{Handler, HttpRequest, HttpResponse, Responder};
use futures_util::FutureExt;
use tracing::Instrument;

use super::capture::Captured;
use super::config::{Config, ServerErrorPolicy};
use super::observe::{Outcome, count, store_call};
use super::options::RouteOptions;
use super::problem::{self, ProblemKind};
use crate::record::StoredResponse;
use crate::scope::StorageKey;
use crate::store::{Fence, FencingToken};

/// A claim this request won.
pub(crate) struct Claimed {
    pub(crate) config: Arc<Config>,
    pub(crate) options: &'static RouteOptions,
    pub(crate) route: String,
    pub(crate) key: StorageKey,
    pub(crate) token: FencingToken,
}

/// Runs the handler on a task of its own, so that a client hanging up (which
/// drops this future) does not cancel it half way; its retry gets the stored
/// result.
pub(crate) async fn execute<F, Args>(claimed: Claimed, req: HttpRequest, handler: F, args: Args) -> HttpResponse
where
    F: Handler<Args>,
    F::Output: Responder + 'static,
    Args: 'static,
{
    let task = actix_web::rt::spawn(run(claimed, req, handler, args).instrument(tracing::Span::current()));
    match task.await {
        Ok(response) => response,
        Err(error) => {
            tracing::error!(%error, "the idempotent handler task was cancelled");
            problem::response(ProblemKind::HandlerPanicked, "the request was interrupted")
        }
    }
}

async fn run<F, Args>(claimed: Claimed, req: HttpRequest, handler: F, args: Args) -> HttpResponse
where
    F: Handler<Args>,
    F::Output: Responder + 'static,
    Args: 'static,
{
    let heartbeat = Heartbeat::start(&claimed);
    let work = async {
        let output = handler.call(args).await;
        Captured::collect(output.respond_to(&req).map_into_boxed_body()).await
    };
    let outcome = AssertUnwindSafe(work).catch_unwind().await;
    // The heartbeat keeps the lease through the completion (and its retries);
    // it stops when `heartbeat` is dropped at the end of this function.
    heartbeat.finishing.store(true, Ordering::Relaxed);
    let Claimed { config, options, route, key, token } = claimed;
    let store = config.store.kind();
    let release = || store_call(store, "release", config.store_timeout, config.store.release(&key, token));
    let captured = match outcome {
        Ok(captured) => captured,
        Err(_) => {
            tracing::error!("the idempotent handler panicked; releasing its claim");
            let _ = release().await;
            count(&route, Outcome::Executed);
            return problem::response(ProblemKind::HandlerPanicked, "the request handler failed unexpectedly");
        }
    };
    let retryable = captured.status.is_server_error() && !captured.body_failed;
    if retryable && config.server_errors == ServerErrorPolicy::Release {
        // The client may retry a server error; the next attempt runs again.
        let _ = release().await;
        count(&route, Outcome::Executed);
        return captured.to_response();
    }
    let stored = captured.to_stored(&config);
    let outcome = complete(&config, &key, token, &stored, options.ttl).await;
    count(&route, outcome);
    drop(heartbeat);
    captured.to_response()
}

/// Stores the response, retrying a failed call a few times while the
/// heartbeat keeps the lease: a store blip at the end of a handler must not
/// let the lease lapse and a retry run the handler again.
async fn complete(
    config: &Config,
    key: &StorageKey,
    token: FencingToken,
    stored: &StoredResponse,
    ttl: Duration,
) -> Outcome {
    let mut failed_before = false;
    for attempt in 1..=COMPLETE_ATTEMPTS {
        let completion = config.store.complete(key, token, stored, ttl);
        match store_call(config.store.kind(), "complete", config.store_timeout, completion).await {
            Ok(Fence::Held) => return Outcome::Executed,
            Ok(Fence::Lost) if failed_before => {
                // An earlier attempt that timed out may have been applied.
                tracing::warn!("storing the response: an earlier attempt may have been applied; outcome unknown");
                return Outcome::StoreError;
            }
            Ok(Fence::Lost) => {
                tracing::warn!("the lease was lost before completion; the response was not stored");
                return Outcome::LeaseLost;
            }
            Err(error) if attempt < COMPLETE_ATTEMPTS => {
                tracing::warn!(%error, attempt, "storing the response failed; retrying");
                failed_before = true;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(error) => {
                tracing::error!(%error, "storing the response failed; the lease will expire");
            }
        }
    }
    Outcome::StoreError
}

/// Attempts at a completion before giving up (the lease then expires).
const COMPLETE_ATTEMPTS: u32 = 3;
/// Pause between attempts after a failed store call.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Renews the lease every `lock_ttl / 3` while the handler runs, and sooner
/// after a failed renewal (a short store outage must not let the lease
/// lapse); stops when dropped.
struct Heartbeat {
    task: actix_web::rt::task::JoinHandle<()>,
    /// Set once the handler is done: a renewal refused from then on only
    /// means the completion got there first.
    finishing: Arc<AtomicBool>,
}

impl Heartbeat {
    fn start(claimed: &Claimed) -> Self {
        let config = Arc::clone(&claimed.config);
        let (key, token, lease) = (claimed.key.clone(), claimed.token, claimed.options.lock_ttl);
        let finishing = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&finishing);
        let every = (lease / 3).max(Duration::from_millis(10));
        let after_failure = (lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1)).min(every);
        let beat = async move {
            let mut pause = every;
            loop {
                tokio::time::sleep(pause).await;
                let renewal = config.store.renew(&key, token, lease);
                match store_call(config.store.kind(), "renew", config.store_timeout, renewal).await {
                    Ok(Fence::Held) => pause = every,
                    Ok(Fence::Lost) => {
                        if !done.load(Ordering::Relaxed) {
                            tracing::warn!("the lease was lost while the handler ran");
                        }
                        return;
                    }
                    // Logged by store_call; try again soon.
                    Err(_) => pause = after_failure,
                }
            }
        };
        Self { task: actix_web::rt::spawn(beat.instrument(tracing::Span::current())), finishing }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}
