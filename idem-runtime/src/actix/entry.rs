//! The one entry point the `#[idempotent]` expansion calls: §4 of the
//! behaviour contract (`docs/contract.md`),
//! steps 1 to 9.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::header::{CONTENT_TYPE, HOST};
use actix_web::{FromRequest, Handler, HttpMessage, HttpRequest, HttpResponse, Responder, web};
use tokio::time::Instant;
use tracing::Instrument;

use super::body::buffer;
use super::capture::{REPLAYED, replay};
use super::config::{Config, Idem};
use super::context::{Annotated, PendingContext};
use super::execute::{Claimed, execute};
use super::key_source::{Early, from_body, read_early};
use super::options::{InFlight, RouteOptions};
use super::problem::{self, ProblemKind};
use super::route::route_of;
use crate::clock::later;
use crate::engine::{self, Terms};
use crate::fingerprint::{Hashed, RequestParts};
use crate::observe::{Outcome, count};
use crate::scope::{Scope, StorageKey};
use crate::store::{Claim, StoreError};

/// Shortest time given to a claim, even at the very end of a wait.
const MIN_CLAIM_TIMEOUT: Duration = Duration::from_millis(50);

/// Longest pause between two claims while waiting (`in_flight = "wait"`).
const MAX_WAIT_POLL: Duration = Duration::from_millis(250);

/// Serves one request to an `#[idempotent]` handler.
pub async fn handle<F, Args>(
    options: &'static RouteOptions,
    req: HttpRequest,
    payload: web::Payload,
    handler: F,
) -> HttpResponse
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    // The pattern, never the raw path: metric labels and route-scoped keys
    // must not grow with what clients send.
    let route = route_of(&req);
    let span = tracing::info_span!(
        "idempotent",
        method = %req.method(),
        route = %route,
        scope = options.scope.as_str(),
        key = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    process(options, route, req, payload.into_inner(), handler).instrument(span).await
}

async fn process<F, Args>(
    options: &'static RouteOptions,
    route: String,
    req: HttpRequest,
    payload: Payload,
    handler: F,
) -> HttpResponse
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    // Borrowed from the request, not cloned: every worker would bounce the
    // shared reference count between cores on every request. Only an
    // execution, which outlives this future's borrow, takes a reference.
    let Some(config) = config_of(&req) else {
        tracing::error!(
            route = %route,
            "no idem_runtime::Idem is registered on the App; add App::new().app_data(Idem::new(store))"
        );
        count(&route, Outcome::Rejected);
        let detail = format!(
            "the idempotent route {route} needs an idem_runtime::Idem configuration registered with App::app_data"
        );
        return problem::response(ProblemKind::NotConfigured, &detail);
    };
    if let Err(detail) = config.check_lease(options.lock_ttl) {
        tracing::error!(route = %route, "{detail}");
        return reject(&route, ProblemKind::NotConfigured, &format!("the route {route} is misconfigured: {detail}"));
    }
    // 1. The key, from the header or the path; a key in the body is read
    // once the body is in (step 3).
    let early = match read_early(&req, options, &route) {
        Ok(None) => return run_without_key(Arc::clone(config), req, payload, handler).await,
        Ok(Some(early)) => early,
        Err((kind, detail)) => return reject(&route, kind, &detail),
    };
    // 2. The subject.
    let subject = match (options.scope, &config.subject) {
        (Scope::User, None) => {
            tracing::error!(route = %route, "scope = \"user\" needs Idem::subject(..) to resolve the subject");
            let detail = format!(
                "the route {route} has scope = \"user\" (the default), which needs a subject resolver: \
                 register one with Idem::subject(..), or give the route scope = \"route\" or \"global\""
            );
            return reject(&route, ProblemKind::NotConfigured, &detail);
        }
        (Scope::User, Some(resolve)) => match resolve(&req) {
            Some(subject) => Some(subject),
            None => return reject(&route, ProblemKind::MissingSubject, "this request needs an authenticated user"),
        },
        _ => None,
    };
    // 3. The body.
    let body = match buffer(&req, payload, config.body_limit).await {
        Ok(body) => body,
        Err(response) => {
            count(&route, Outcome::Rejected);
            return response;
        }
    };
    let key = match early {
        Early::Key(key) => key,
        Early::InBody(pointer) => match from_body(&body, pointer, options.required) {
            Ok(Some(key)) => key,
            Ok(None) => return run_without_key(Arc::clone(config), req, Payload::from(body), handler).await,
            Err((kind, detail)) => return reject(&route, kind, &detail),
        },
    };
    let span = tracing::Span::current();
    if !span.is_disabled() {
        // A short hash identifies the key in traces; never the key itself.
        span.record("key", key.short_hash());
    }
    // 4. The fingerprint, with the route's fingerprint headers.
    let headers: Vec<(&str, Vec<&[u8]>)> = options
        .fingerprint_headers
        .iter()
        .map(|&name| (name, req.headers().get_all(name).map(|value| value.as_bytes()).collect()))
        .collect();
    let mut hashed = Hashed::of(&RequestParts {
        method: req.method().as_str(),
        path: req.path(),
        query: req.query_string(),
        headers: &headers,
        host: config.fingerprint_host.then(|| host_of(&req)),
        content_type: req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
        body: &body,
    });
    // 5. The handler's own extractors, over the buffered body. The runtime's
    // own extractors (execution context, transaction) learn from the mark
    // that they run under #[idempotent].
    req.extensions_mut().insert(Annotated::Keyed);
    let args = match Args::from_request(&req, &mut Payload::from(body)).await {
        Ok(args) => args,
        Err(error) => {
            count(&route, Outcome::Rejected);
            return error.into().error_response();
        }
    };
    let mut fingerprint = hashed.fingerprint;
    // 6 to 9. Claim, then execute, replay or refuse.
    let storage_key = StorageKey::new(options.scope, subject.as_deref(), req.method().as_str(), &route, &key);
    let deadline = match options.in_flight {
        InFlight::Reject => None,
        // Saturating: the attribute takes any whole number of days.
        InFlight::Wait(wait) => Some(Instant::from_std(later(Instant::now().into_std(), wait))),
    };
    let terms = Terms { lease: options.lock_ttl, ttl: options.ttl, timeout: config.store_timeout };
    let mut pause = Duration::from_millis(20);
    loop {
        // While waiting, no claim may run past the wait's deadline.
        let (timeout, cut) = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now()).max(MIN_CLAIM_TIMEOUT);
                (config.store_timeout.min(left), left < config.store_timeout)
            }
            None => (config.store_timeout, false),
        };
        let claim = engine::claim(&config.store, &storage_key, &fingerprint, &terms, timeout, &config.running).await;
        let claim = match claim {
            Ok(engine::Claimed::Acquired(execution)) => {
                PendingContext::fill(&req, &key, &storage_key, &fingerprint, execution.token(), execution.attempt());
                let claimed = Claimed { config: Arc::clone(config), route, execution };
                return execute(claimed, req, handler, args).await;
            }
            Ok(engine::Claimed::Other(claim)) => claim,
            Ok(engine::Claimed::Draining) => {
                count(&route, Outcome::Rejected);
                let detail = "the server is shutting down; the request was not processed, retry";
                return problem::retry_after(ProblemKind::ShuttingDown, detail, Duration::from_secs(1));
            }
            Ok(engine::Claimed::Overloaded) => {
                count(&route, Outcome::Overloaded);
                let detail = "too many requests are running in this server; the request was not processed, retry";
                return problem::retry_after(ProblemKind::Overloaded, detail, Duration::from_secs(1));
            }
            Ok(engine::Claimed::KeeperStopped) => {
                count(&route, Outcome::Rejected);
                let detail = "the server cannot keep idempotency leases right now; the request was not processed, \
                              retry (on another server, if you can)";
                return problem::retry_after(ProblemKind::KeeperStopped, detail, Duration::from_secs(1));
            }
            // A wait that ran into its own deadline is still a wait: the
            // first request is in flight, as far as anyone knows.
            Err(StoreError::Timeout { .. }) if cut => Claim::InFlight { retry_after: Duration::from_secs(1) },
            Err(error) => {
                count(&route, Outcome::StoreError);
                // The error (already logged by store_call) names hosts and
                // tables: it stays in the logs, not in the client's answer.
                tracing::error!(%error, "refusing the request: the idempotency store is unavailable");
                let detail = "the idempotency store is unavailable; the request was not processed, retry later";
                return problem::retry_after(ProblemKind::StoreUnavailable, detail, Duration::from_secs(1));
            }
        };
        match claim {
            Claim::Replay(stored) => {
                count(&route, Outcome::Replayed);
                return replay(stored);
            }
            Claim::Mismatch => {
                // A record kept without the host in its fingerprint (by an
                // earlier version, or under `fingerprint_host(false)`) is
                // this same request's if that fingerprint matches: claimed
                // again with it, its execution keeps its derived keys. A
                // record of another host never matches it.
                if let Some(without_host) = hashed.take_without_host() {
                    fingerprint = without_host;
                    continue;
                }
                count(&route, Outcome::Mismatch);
                let detail = "this idempotency key was already used for a different request \
                              (method, host, path, query or body differ); use a new key for a new request";
                return problem::response(ProblemKind::KeyReused, detail);
            }
            Claim::InFlight { retry_after } => {
                let now = Instant::now();
                match deadline {
                    Some(deadline) if now < deadline => {
                        tokio::time::sleep(pause.min(deadline - now)).await;
                        pause = (pause * 2).min(MAX_WAIT_POLL);
                    }
                    _ => {
                        count(&route, Outcome::InFlight);
                        let detail = "a request with this idempotency key is still being processed; retry later";
                        return problem::retry_after(ProblemKind::InFlight, detail, retry_after);
                    }
                }
            }
            _ => {
                count(&route, Outcome::StoreError);
                tracing::error!("the store answered a claim in a way this version does not know");
                let detail = "the idempotency store is unavailable; the request was not processed, retry later";
                return problem::retry_after(ProblemKind::StoreUnavailable, detail, Duration::from_secs(1));
            }
        }
    }
}

/// The host a request was sent to, as received: its `Host` header, else
/// the request target's authority (HTTP/2's `:authority`, which actix
/// keeps in the URI). The same order as actix's `ConnectionInfo::host`
/// where no forwarding header is given, so that the host the fingerprint
/// counts is the host the application sees. Empty when there is neither:
/// a request without a host is one host of its own, never another's.
fn host_of(req: &HttpRequest) -> &str {
    match req.headers().get(HOST) {
        Some(host) => host.to_str().unwrap_or(""),
        None => req.uri().authority().map_or("", |authority| authority.host()),
    }
}

pub(super) fn config_of(req: &HttpRequest) -> Option<&Arc<Config>> {
    req.app_data::<Idem>()
        .or_else(|| req.app_data::<web::Data<Idem>>().map(|data| data.get_ref()))
        .map(|idem| &idem.inner)
}

fn reject(route: &str, kind: ProblemKind, detail: &str) -> HttpResponse {
    count(route, Outcome::Rejected);
    problem::response(kind, detail)
}

/// `required = false` and no key: the handler runs as if not annotated
/// (a `Tx` it takes is committed when it returns, unless its response is
/// retryable).
async fn run_without_key<F, Args>(
    config: Arc<Config>,
    req: HttpRequest,
    mut payload: Payload,
    handler: F,
) -> HttpResponse
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    req.extensions_mut().insert(Annotated::Keyless);
    let args = match Args::from_request(&req, &mut payload).await {
        Ok(args) => args,
        Err(error) => return error.into().error_response(),
    };
    #[cfg(feature = "postgres")]
    if let Some(pending) = super::transaction::PendingTx::take(&req) {
        return super::transactional::run_without_key(&config, pending, req, handler, args).await;
    }
    #[cfg(not(feature = "postgres"))]
    let _ = config;
    let mut response = handler.call(args).await.respond_to(&req).map_into_boxed_body();
    // The header belongs to the runtime, with or without a key.
    response.headers_mut().remove(REPLAYED);
    response
}
