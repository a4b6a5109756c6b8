//! The one entry point the `#[idempotent]` expansion calls: §4 of the
//! behaviour contract (`docs/contract.md`),
//! steps 1 to 9.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::header::{CONTENT_TYPE, HOST};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, web};
use tokio::time::Instant;
use tracing::Instrument;

use super::IdempotentHandler;
use super::body::buffer;
use super::capture::replay;
use super::config::{Config, config_of};
use super::context::{Annotated, PendingContext};
use super::execute::{execute, run_without_key};
use super::finish::{Answer, Counted, Won};
use super::key_source::{Early, from_body, read_early};
use super::options::{InFlight, RouteOptions};
use super::problem::{self, ProblemKind};
use super::route::Route;
use crate::clock::later;
use crate::engine::{self, Terms};
use crate::fingerprint::{Hashed, RequestParts};
use crate::key::IdempotencyKey;
use crate::observe::Outcome;
use crate::scope::{Scope, StorageKey};
use crate::store::{Claim, StoreError};

/// Serves one request to an `#[idempotent]` handler.
pub async fn handle<F, Args>(
    options: &'static RouteOptions,
    req: HttpRequest,
    payload: web::Payload,
    handler: F,
) -> HttpResponse
where
    F: IdempotentHandler<Args>,
    Args: FromRequest + 'static,
{
    // The pattern, never the raw path: metric labels and route-scoped keys
    // must not grow with what clients send.
    let route = Route::of(&req);
    let span = tracing::info_span!(
        "idempotent",
        method = %req.method(),
        route = %route,
        scope = options.scope.as_str(),
        key = tracing::field::Empty,
        record = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let served = async move {
        let (response, counted) = process(options, &route, req, payload.into_inner(), handler).await;
        // The request ends here: counted now, unless its execution counted
        // it where it settled (see `Counted`).
        counted.tally(&route);
        response
    };
    served.instrument(span).await
}

/// A refusal, counted with `outcome`.
fn refuse(outcome: Outcome, response: HttpResponse) -> Answer {
    (response, Counted::Now(outcome))
}

fn reject(kind: ProblemKind, detail: &str) -> Answer {
    refuse(Outcome::Rejected, problem::response(kind, detail))
}

async fn process<F, Args>(
    options: &'static RouteOptions,
    route: &Route,
    req: HttpRequest,
    payload: Payload,
    handler: F,
) -> Answer
where
    F: IdempotentHandler<Args>,
    Args: FromRequest + 'static,
{
    // Borrowed from the request, not cloned: every worker would bounce the
    // shared reference count between cores on every request. Only an
    // execution, which outlives this future's borrow, takes a reference.
    let Some(config) = config_of(&req) else {
        tracing::error!(
            route = %route,
            "no idem_runtime::Idem is registered on the App; add App::new().app_data(Idem::new(store))"
        );
        let detail = format!(
            "the idempotent route {route} needs an idem_runtime::Idem configuration registered with App::app_data"
        );
        return reject(ProblemKind::NotConfigured, &detail);
    };
    if let Err(detail) = config.check_lease(options.lock_ttl) {
        tracing::error!(route = %route, "{detail}");
        return reject(ProblemKind::NotConfigured, &format!("the route {route} is misconfigured: {detail}"));
    }
    let (key, subject, mut hashed, args) = match read(options, route, config, &req, payload).await {
        Ok(Read::Keyed { key, subject, hashed, args }) => (key, subject, hashed, args),
        Ok(Read::Keyless(payload)) => return run_without_key(Arc::clone(config), req, payload, handler).await,
        Err(refused) => return refused,
    };
    // 6 to 9. Claim (waiting while another execution holds the key, if the
    // route waits), then execute, replay or refuse.
    let storage_key = StorageKey::new(options.scope, subject.as_deref(), req.method().as_str(), route, &key);
    let until = match options.in_flight {
        InFlight::Reject => None,
        // Saturating: the attribute takes any whole number of days.
        InFlight::Wait(wait) => Some(Instant::from_std(later(Instant::now().into_std(), wait))),
    };
    let span = crate::observe::current_span();
    if !span.is_disabled() {
        // The record's id, as operators find it (`idem inspect`).
        span.record("record", storage_key.record_id());
    }
    let terms = Terms {
        lease: options.lock_ttl,
        ttl: options.ttl,
        timeout: config.store_timeout,
        on_lapse: options.on_lapse.unwrap_or(config.on_lapse),
        route: Some(route.claimed()),
    };
    let mut fingerprint = hashed.fingerprint;
    loop {
        let claimed = engine::claim_until(
            &config.store,
            config.replays.as_ref(),
            &storage_key,
            &fingerprint,
            &terms,
            &config.running,
            until,
        );
        let claim = match claimed.await {
            Ok(engine::Claimed::Acquired(mut execution)) => {
                PendingContext::fill(&req, &key, &storage_key, &fingerprint, &mut execution, config.response_limit);
                let claimed = Won { config: Arc::clone(config), route: route.clone(), execution };
                return execute(claimed, req, handler, args).await;
            }
            // A record kept without the host in its fingerprint (by an
            // earlier version, or under `fingerprint_host(false)`) is this
            // same request's if that fingerprint matches: claimed again
            // with it, its execution keeps its derived keys. A record of
            // another host never matches it.
            Ok(engine::Claimed::Other(Claim::Mismatch)) => match hashed.take_without_host() {
                Some(without_host) => {
                    fingerprint = without_host;
                    continue;
                }
                None => Ok(engine::Claimed::Other(Claim::Mismatch)),
            },
            other => other,
        };
        return answer(claim);
    }
}

/// What steps 1 to 5 of a request made of it.
enum Read<Args> {
    /// Its key, subject, fingerprint, and the handler's arguments.
    Keyed { key: IdempotencyKey, subject: Option<String>, hashed: Hashed, args: Args },
    /// No key, and none required: the body, for the handler as it is.
    Keyless(Payload),
}

/// Steps 1 to 5: the key, the subject, the body, the fingerprint and the
/// handler's own extractors; a refusal on the way is the request's answer.
async fn read<Args>(
    options: &'static RouteOptions,
    route: &str,
    config: &Config,
    req: &HttpRequest,
    payload: Payload,
) -> Result<Read<Args>, Answer>
where
    Args: FromRequest + 'static,
{
    // 1. The key, from the header or the path; a key in the body is read
    // once the body is in (step 3).
    let early = match read_early(req, options, route) {
        Ok(None) => return Ok(Read::Keyless(payload)),
        Ok(Some(early)) => early,
        Err((kind, detail)) => return Err(reject(kind, &detail)),
    };
    // 2. The subject.
    let subject = match (options.scope, &config.subject) {
        (Scope::User, None) => {
            tracing::error!(route = %route, "scope = \"user\" needs Idem::subject(..) to resolve the subject");
            let detail = format!(
                "the route {route} has scope = \"user\" (the default), which needs a subject resolver: \
                 register one with Idem::subject(..), or give the route scope = \"route\" or \"global\""
            );
            return Err(reject(ProblemKind::NotConfigured, &detail));
        }
        (Scope::User, Some(resolve)) => match resolve(req) {
            Some(subject) => Some(subject),
            None => return Err(reject(ProblemKind::MissingSubject, "this request needs an authenticated user")),
        },
        _ => None,
    };
    // 3. The body.
    let body = match buffer(req, payload, config.body_limit).await {
        Ok(body) => body,
        Err(response) => return Err(refuse(Outcome::Rejected, response)),
    };
    let key = match early {
        Early::Key(key) => key,
        Early::InBody(pointer) => match from_body(&body, pointer, options.required) {
            Ok(Some(key)) => key,
            Ok(None) => return Ok(Read::Keyless(Payload::from(body))),
            Err((kind, detail)) => return Err(reject(kind, &detail)),
        },
    };
    let span = crate::observe::current_span();
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
    let hashed = Hashed::of(&RequestParts {
        method: req.method().as_str(),
        path: req.path(),
        query: req.query_string(),
        headers: &headers,
        host: config.fingerprint_host.then(|| host_of(req)),
        content_type: req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
        body: &body,
    });
    // 5. The handler's own extractors, over the buffered body. The runtime's
    // own extractors (execution context, transaction) learn from the mark
    // that they run under #[idempotent].
    req.extensions_mut().insert(Annotated::Keyed);
    let args = match Args::from_request(req, &mut Payload::from(body)).await {
        Ok(args) => args,
        Err(error) => return Err(refuse(Outcome::Rejected, error.into().error_response())),
    };
    Ok(Read::Keyed { key, subject, hashed, args })
}

/// The answer to a claim this request did not win.
fn answer(claim: Result<engine::Claimed, StoreError>) -> Answer {
    let retry = Duration::from_secs(1);
    match claim {
        Ok(engine::Claimed::Other(Claim::Replay(stored))) => refuse(Outcome::Replayed, replay(stored)),
        Ok(engine::Claimed::Other(Claim::Mismatch)) => {
            let detail = "this idempotency key was already used for a different request \
                          (method, host, path, query or body differ); use a new key for a new request";
            refuse(Outcome::Mismatch, problem::response(ProblemKind::KeyReused, detail))
        }
        Ok(engine::Claimed::Other(Claim::InFlight { retry_after })) => {
            let detail = "a request with this idempotency key is still being processed; retry later";
            refuse(Outcome::InFlight, problem::retry_after(ProblemKind::InFlight, detail, retry_after))
        }
        Ok(engine::Claimed::Other(Claim::Held { .. })) => {
            refuse(Outcome::Held, problem::response(ProblemKind::ExecutionHeld, problem::HELD))
        }
        Ok(engine::Claimed::Draining) => {
            let detail = "the server is shutting down; the request was not processed, retry";
            refuse(Outcome::Rejected, problem::retry_after(ProblemKind::ShuttingDown, detail, retry))
        }
        Ok(engine::Claimed::Overloaded) => {
            let detail = "too many requests are running in this server; the request was not processed, retry";
            refuse(Outcome::Overloaded, problem::retry_after(ProblemKind::Overloaded, detail, retry))
        }
        Ok(engine::Claimed::KeeperStopped) => {
            let detail = "the server cannot keep idempotency leases right now; the request was not processed, \
                          retry (on another server, if you can)";
            refuse(Outcome::Rejected, problem::retry_after(ProblemKind::KeeperStopped, detail, retry))
        }
        Err(error) => {
            // The error (already logged by store_call) names hosts and
            // tables: it stays in the logs, not in the client's answer.
            tracing::error!(%error, "refusing the request: the idempotency store is unavailable");
            unavailable()
        }
        Ok(engine::Claimed::Acquired(_) | engine::Claimed::Other(_)) => {
            tracing::error!("the store answered a claim in a way this version does not know");
            unavailable()
        }
    }
}

/// 503: the store is unavailable, nothing ran.
fn unavailable() -> Answer {
    let detail = "the idempotency store is unavailable; the request was not processed, retry later";
    let response = problem::retry_after(ProblemKind::StoreUnavailable, detail, Duration::from_secs(1));
    refuse(Outcome::StoreError, response)
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
