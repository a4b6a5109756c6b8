//! Running a claimed request: on its own task, under a renewed lease,
//! ending with a fenced completion or a release.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{Handler, HttpRequest, HttpResponse, Responder};
use futures_util::FutureExt;
use tracing::Instrument;

use super::capture::Captured;
use super::config::{Config, ServerErrorPolicy};
use super::observe::{Outcome, count, store_call};
use super::options::RouteOptions;
use super::problem::{self, ProblemKind};
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
    drop(heartbeat);
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
    if captured.status.is_server_error() && config.server_errors == ServerErrorPolicy::Release {
        // The client may retry a server error; the next attempt runs again.
        let _ = release().await;
        count(&route, Outcome::Executed);
        return captured.to_response();
    }
    let stored = captured.to_stored(&config);
    let completion = config.store.complete(&key, token, &stored, options.ttl);
    match store_call(store, "complete", config.store_timeout, completion).await {
        Ok(Fence::Held) => count(&route, Outcome::Executed),
        Ok(Fence::Lost) => {
            tracing::warn!("the lease was lost before completion; the response was not stored");
            count(&route, Outcome::LeaseLost);
        }
        Err(error) => {
            tracing::error!(%error, "storing the response failed; the lease will expire");
            count(&route, Outcome::StoreError);
        }
    }
    captured.to_response()
}

/// Renews the lease every `lock_ttl / 3` while the handler runs; stops
/// when dropped.
struct Heartbeat(actix_web::rt::task::JoinHandle<()>);

impl Heartbeat {
    fn start(claimed: &Claimed) -> Self {
        let config = Arc::clone(&claimed.config);
        let (key, token, lease) = (claimed.key.clone(), claimed.token, claimed.options.lock_ttl);
        let every = (lease / 3).max(Duration::from_millis(10));
        let beat = async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                ticks.tick().await;
                let renewal = config.store.renew(&key, token, lease);
                match store_call(config.store.kind(), "renew", config.store_timeout, renewal).await {
                    Ok(Fence::Held) => {}
                    Ok(Fence::Lost) => {
                        tracing::warn!("the lease was lost while the handler ran");
                        return;
                    }
                    // Logged by store_call; the next beat tries again.
                    Err(_) => {}
                }
            }
        };
        Self(actix_web::rt::spawn(beat.instrument(tracing::Span::current())))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}
