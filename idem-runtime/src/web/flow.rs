//! One request to an `#[idempotent]` handler, steps 1 to 9 of §4 of the
//! behaviour contract (`docs/contract.md`), up to the claim: the key, the
//! subject, the body, the fingerprint, the handler's own extractors, then
//! the claim and the answer to a claim this request did not win. A won
//! claim goes on in `run.rs`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::body::refuse_coding;
use super::config::Config;
use super::context::Annotated;
use super::finish::{Answer, Counted, Won};
use super::head::as_text;
use super::key_source::{Early, read_early, read_late};
use super::options::{InFlight, RouteOptions};
use super::problem::{HELD, Problem, ProblemKind};
use super::route::Route;
use super::{Framework, Incoming};
use crate::background;
use crate::clock::later;
use crate::engine::{self, Terms};
use crate::fingerprint::{Hashed, RequestParts};
use crate::key::IdempotencyKey;
use crate::observe::Outcome;
use crate::scope::{Scope, StorageKey};
use crate::sealing::{self, Keyring};
use crate::store::{Claim, StoreError};

/// What steps 1 to 9 made of a request.
pub(crate) enum Served<R: Incoming> {
    /// Answered without running its handler under a claim (a refusal, a
    /// replay, a run without a key): the response, and how it is counted.
    Answered(Answer<R::Framework>),
    /// The claim is won: its handler runs next, with these arguments.
    Claimed(Won, R, R::Args),
}

/// The span of one request (§7 of the behaviour contract): never the key
/// itself, a short hash of it once read.
pub(crate) fn span(method: &str, route: &Route, scope: Scope) -> tracing::Span {
    tracing::info_span!(
        "idempotent",
        method = %method,
        route = %route,
        scope = scope.as_str(),
        key = tracing::field::Empty,
        record = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// A refusal, counted with `outcome`.
fn refuse<F: Framework>(outcome: Outcome, problem: Problem) -> Answer<F> {
    (F::problem(problem), Counted::Now(outcome))
}

fn reject<F: Framework>(problem: Problem) -> Answer<F> {
    refuse::<F>(Outcome::Rejected, problem)
}

/// Steps 1 to 9 of `req` to the route `route` with `options`, under the
/// configuration its application registered, if any.
///
/// The configuration is borrowed, not cloned: every worker would bounce
/// its shared reference count between cores on every request. Only an
/// execution, which outlives the borrow, takes a reference.
pub(crate) async fn serve<R: Incoming>(
    options: &'static RouteOptions,
    route: &Route,
    config: Option<&Arc<Config>>,
    mut req: R,
) -> Served<R> {
    let Some(config) = config else {
        tracing::error!(
            route = %route,
            "no idem_runtime::Idem is registered for this route; add it to the App with app_data(idem), \
             or to the axum Router with .layer(idem.layer())"
        );
        let detail =
            format!("the idempotent route {route} needs an idem_runtime::Idem configuration registered for it");
        return Served::Answered(reject::<R::Framework>(Problem::new(ProblemKind::NotConfigured, detail)));
    };
    if let Err(detail) = config.check_lease(options.lock_ttl) {
        tracing::error!(route = %route, "{detail}");
        let detail = format!("the route {route} is misconfigured: {detail}");
        return Served::Answered(reject::<R::Framework>(Problem::new(ProblemKind::NotConfigured, detail)));
    }
    let (key, subject, mut hashed, args) = match read(options, route, config, &mut req).await {
        Ok(Read::Keyed { key, subject, hashed, args }) => (key, subject, hashed, args),
        Ok(Read::Keyless(body)) => {
            return Served::Answered((req.without_key(Arc::clone(config), body).await, Counted::Not));
        }
        Err(refused) => return Served::Answered(refused),
    };
    // 6 to 9. Claim (waiting while another execution holds the key, if the
    // route waits), then execute, replay or refuse.
    let storage_key = StorageKey::new(options.scope, subject.as_deref(), req.method(), route, &key);
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
                if let Err((step, unopened)) = execution.open_steps(config.records.as_ref()) {
                    // Its step would run again: nothing runs, and the key is
                    // released (its recorded steps kept) for a server that
                    // can open them.
                    tracing::error!(record = %storage_key.record_id(), step = %step, error = %unopened, "a recorded step result does not open; nothing ran");
                    background::spawn(async move {
                        let _ = execution.release(engine::Releaser::Handler).await;
                    });
                    return Served::Answered(reject::<R::Framework>(sealed_problem()));
                }
                if let Some(pending) = req.take_context() {
                    pending.fill(&key, &storage_key, &fingerprint, &mut execution, config.response_limit);
                }
                let won = Won { config: Arc::clone(config), route: route.clone(), execution };
                return Served::Claimed(won, req, args);
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
        return Served::Answered(answer::<R::Framework>(claim, config.records.as_deref(), &storage_key));
    }
}

/// What steps 1 to 5 of a request made of it.
enum Read<Args> {
    /// Its key, subject, fingerprint, and the handler's arguments.
    Keyed { key: IdempotencyKey, subject: Option<String>, hashed: Hashed, args: Args },
    /// No key, and none required: the body if it was read, for the handler
    /// as it is.
    Keyless(Option<bytes::Bytes>),
}

/// Steps 1 to 5: the key, the subject, the body, the fingerprint and the
/// handler's own extractors; a refusal on the way is the request's answer.
async fn read<R: Incoming>(
    options: &'static RouteOptions,
    route: &str,
    config: &Config,
    req: &mut R,
) -> Result<Read<R::Args>, Answer<R::Framework>> {
    // 1. The key, from the header or the path; a key in the body is read
    // once the body is in (step 3).
    let early = match read_early(req, options, route) {
        Ok(None) => return Ok(Read::Keyless(None)),
        Ok(Some(early)) => early,
        Err(problem) => return Err(reject::<R::Framework>(problem)),
    };
    // 2. The subject.
    let subject = match (options.scope, &config.subject) {
        (Scope::User, None) => {
            tracing::error!(route = %route, "scope = \"user\" needs Idem::subject(..) to resolve the subject");
            let detail = format!(
                "the route {route} has scope = \"user\" (the default), which needs a subject resolver: \
                 register one with Idem::subject(..), or give the route scope = \"route\" or \"global\""
            );
            return Err(reject::<R::Framework>(Problem::new(ProblemKind::NotConfigured, detail)));
        }
        (Scope::User, Some(resolve)) => match resolve(&req.head()) {
            Some(subject) => Some(subject),
            None => {
                let problem = Problem::new(ProblemKind::MissingSubject, "this request needs an authenticated user");
                return Err(reject::<R::Framework>(problem));
            }
        },
        _ => None,
    };
    // 3. The body: never fingerprinted by its wire bytes.
    if let Some(problem) = refuse_coding(req.header_values("content-encoding")) {
        return Err(reject::<R::Framework>(problem));
    }
    let body = match req.buffer(config.body_limit).await {
        Ok(body) => body,
        Err(problem) => return Err(reject::<R::Framework>(problem)),
    };
    let key = match early {
        Early::Key(key) => key,
        Early::Late(late) => match read_late(late, req, &body, options.required, options.header) {
            Ok(Some(key)) => key,
            Ok(None) => return Ok(Read::Keyless(Some(body))),
            Err(problem) => return Err(reject::<R::Framework>(problem)),
        },
    };
    let span = crate::observe::current_span();
    if !span.is_disabled() {
        // A short hash identifies the key in traces; never the key itself.
        span.record("key", key.short_hash());
    }
    // 4. The fingerprint, with the route's fingerprint headers.
    let headers: Vec<(&str, Vec<&[u8]>)> =
        options.fingerprint_headers.iter().map(|&name| (name, req.header_values(name).collect())).collect();
    let content_type = req.header_values("content-type").next().and_then(as_text);
    let parts = RequestParts {
        method: req.method(),
        path: req.path(),
        query: req.query(),
        headers: &headers,
        host: config.fingerprint_host.then(|| req.host()),
        content_type,
        body: &body,
    };
    let hashed = Hashed::of(&parts, options.fingerprint_exclude);
    // 5. The handler's own extractors, over the buffered body. The runtime's
    // own extractors (execution context, transaction) learn from the mark
    // that they run under #[idempotent].
    let args = match req.extract(body, Annotated::Keyed).await {
        Ok(args) => args,
        Err(response) => return Err((response, Counted::Now(Outcome::Rejected))),
    };
    Ok(Read::Keyed { key, subject, hashed, args })
}

/// What a request whose record does not open is told.
fn sealed_problem() -> Problem {
    let detail = "this request's stored record could not be opened with this server's records keys; nothing ran \
                  and nothing will until it opens: retry later, and tell the operator";
    Problem::new(ProblemKind::RecordSealed, detail)
}

/// The answer to a claim this request did not win; a replay is opened
/// with `keyring` first.
fn answer<F: Framework>(
    claim: Result<engine::Claimed, StoreError>,
    keyring: Option<&Keyring>,
    key: &StorageKey,
) -> Answer<F> {
    let retry = Duration::from_secs(1);
    match claim {
        Ok(engine::Claimed::Other(Claim::Replay(stored))) => match sealing::open_response(keyring, key, stored) {
            Ok(opened) => (F::replay(opened), Counted::Now(Outcome::Replayed)),
            Err(unopened) => {
                tracing::error!(record = %key.record_id(), error = %unopened, "a stored response does not open; nothing ran");
                reject::<F>(sealed_problem())
            }
        },
        Ok(engine::Claimed::Other(Claim::Mismatch)) => {
            let detail = "this idempotency key was already used for a different request \
                          (method, host, path, query or body differ); use a new key for a new request";
            refuse::<F>(Outcome::Mismatch, Problem::new(ProblemKind::KeyReused, detail))
        }
        Ok(engine::Claimed::Other(Claim::InFlight { retry_after })) => {
            let detail = "a request with this idempotency key is still being processed; retry later";
            refuse::<F>(Outcome::InFlight, Problem::new(ProblemKind::InFlight, detail).retry_after(retry_after))
        }
        Ok(engine::Claimed::Other(Claim::Held { .. })) => {
            refuse::<F>(Outcome::Held, Problem::new(ProblemKind::ExecutionHeld, HELD))
        }
        Ok(engine::Claimed::Draining) => {
            let detail = "the server is shutting down; the request was not processed, retry";
            refuse::<F>(Outcome::Rejected, Problem::new(ProblemKind::ShuttingDown, detail).retry_after(retry))
        }
        Ok(engine::Claimed::Overloaded) => {
            let detail = "too many requests are running in this server; the request was not processed, retry";
            refuse::<F>(Outcome::Overloaded, Problem::new(ProblemKind::Overloaded, detail).retry_after(retry))
        }
        Ok(engine::Claimed::KeeperStopped) => {
            let detail = "the server cannot keep idempotency leases right now; the request was not processed, \
                          retry (on another server, if you can)";
            refuse::<F>(Outcome::Rejected, Problem::new(ProblemKind::KeeperStopped, detail).retry_after(retry))
        }
        Err(error) => {
            // The error (already logged by store_call) names hosts and
            // tables: it stays in the logs, not in the client's answer.
            tracing::error!(%error, "refusing the request: the idempotency store is unavailable");
            unavailable::<F>()
        }
        Ok(engine::Claimed::Acquired(_) | engine::Claimed::Other(_)) => {
            tracing::error!("the store answered a claim in a way this version does not know");
            unavailable::<F>()
        }
    }
}

/// 503: the store is unavailable, nothing ran.
fn unavailable<F: Framework>() -> Answer<F> {
    let detail = "the idempotency store is unavailable; the request was not processed, retry later";
    refuse::<F>(
        Outcome::StoreError,
        Problem::new(ProblemKind::StoreUnavailable, detail).retry_after(Duration::from_secs(1)),
    )
}
