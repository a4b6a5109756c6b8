//! The retrying client (§11 of the behaviour contract), for Rust callers of
//! idempotent endpoints: a [`reqwest_middleware`] middleware that gives each
//! logical request one `Idempotency-Key`, made once and kept on every
//! retry, and retries what is safe to retry with that key.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_runtime::client::{IdempotencyMiddleware, Report, RetryPolicy};
//!
//! let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build()?;
//! let client = reqwest_middleware::ClientBuilder::new(http).with(IdempotencyMiddleware::new(RetryPolicy::default())).build();
//! let response = client.post("https://shop.example/orders").json(&serde_json::json!({"amount_cents": 1500})).send().await?;
//! let replayed = Report::of(&response).is_some_and(|report| report.replayed);
//! # Ok(()) }
//! ```
//!
//! | the server answers | the client |
//! |---|---|
//! | a connection error, a timeout, a response lost on the way | retries with the same key |
//! | 409 with `Retry-After` (the first attempt still runs) | waits as asked, retries |
//! | 429, 502, 503, 504 | retries, after `Retry-After` if given, else after its backoff |
//! | 422 `key-reused` | stops: [`KeyReused`] |
//! | 409 `execution-held` (an earlier attempt stopped half way on a route that holds such executions) | stops: [`ExecutionHeld`] |
//! | anything else (2xx, other 4xx, 500) | returns it |
//!
//! Backoff is exponential with full jitter; attempts stop at the policy's
//! maximum or its total deadline, whichever comes first, and the last
//! answer is returned as it is.

mod policy;

use std::time::SystemTime;

use async_trait::async_trait;
use http::Extensions;
use reqwest::header::{HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Request, Response, StatusCode};
use reqwest_middleware::{Middleware, Next};

use self::policy::Schedule;
pub use self::policy::{RetryPolicy, parse_retry_after};

/// The header the key travels in.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The header a server sets on a replayed response.
const REPLAYED: &str = "idempotent-replayed";

/// The problem type of a key reused for another request.
const KEY_REUSED: &str = "urn:idem:problem:key-reused";

/// The problem type of an execution held for an operator.
const EXECUTION_HELD: &str = "urn:idem:problem:execution-held";

/// Adds one `Idempotency-Key` per logical request and retries it (see the
/// [module](self)). A key the caller set on the request (a natural key,
/// such as an invoice number) is kept as it is.
///
/// Put it last on the client (`.with(..)` after any other middleware): it
/// must be the one that repeats the request, so that every attempt carries
/// its key. Give every attempt a timeout of its own (`reqwest`'s
/// `timeout`): an attempt still running at the deadline is abandoned then.
#[derive(Debug, Clone, Default)]
pub struct IdempotencyMiddleware {
    policy: RetryPolicy,
}

impl IdempotencyMiddleware {
    /// A middleware retrying under `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy }
    }
}

/// A fresh key, as the middleware makes one: a UUID v4. Make one yourself
/// (and set it as the `Idempotency-Key` header) when your own code may
/// send the same intent again after the middleware gave up.
pub fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// What became of a logical request, on its final response
/// ([`Report::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The key it was sent with.
    pub key: String,
    /// Attempts sent, the first included.
    pub attempts: u32,
    /// Whether the final answer is a replay of an earlier execution's
    /// (`Idempotent-Replayed: true`).
    pub replayed: bool,
}

impl Report {
    /// The outcome the middleware left on `response`, if it went through it.
    pub fn of(response: &Response) -> Option<&Report> {
        response.extensions().get::<Report>()
    }
}

/// The server refused the key: it was used before for a different request
/// (422 `key-reused`). Never retried. Find it with [`KeyReused::of`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("idempotency key {key} was already used for a different request: {detail}")]
pub struct KeyReused {
    /// The key.
    pub key: String,
    /// The server's explanation.
    pub detail: String,
}

/// The server holds the request's execution for an operator (409
/// `execution-held`): an earlier attempt stopped half way on a route that
/// never runs such an execution again by itself. Final: retrying does not
/// help until an operator releases or resolves it (then the same key gets
/// the operator's answer, or runs once more). Find it with
/// [`ExecutionHeld::of`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the execution of idempotency key {key} is held for an operator: {detail}")]
pub struct ExecutionHeld {
    /// The key.
    pub key: String,
    /// The server's explanation.
    pub detail: String,
}

impl ExecutionHeld {
    /// The held execution `error` reports, if that is what it is.
    pub fn of(error: &reqwest_middleware::Error) -> Option<&ExecutionHeld> {
        match error {
            reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<ExecutionHeld>(),
            _ => None,
        }
    }
}

/// The middleware gave up: every attempt failed without an answer to
/// return (connection errors, timeouts, lost responses), or the deadline
/// came while one ran. The request may or may not have been executed;
/// sending it again **with this key** is safe and finds out. Find it with
/// [`GaveUp::of`]; the last attempt's error is its source.
#[derive(Debug, thiserror::Error)]
#[error("gave up after {attempts} attempt(s) with idempotency key {key}: {reason}")]
pub struct GaveUp {
    /// The key every attempt carried: retry with it, never with a new one.
    pub key: String,
    /// Attempts sent, the first included.
    pub attempts: u32,
    /// Why it stopped.
    pub reason: &'static str,
    #[source]
    source: Option<reqwest_middleware::Error>,
}

impl GaveUp {
    /// The give-up `error` reports, if that is what it is.
    pub fn of(error: &reqwest_middleware::Error) -> Option<&GaveUp> {
        match error {
            reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<GaveUp>(),
            _ => None,
        }
    }

    /// The last attempt's error, if it had one (none when the deadline cut
    /// it short).
    pub fn last_error(&self) -> Option<&reqwest_middleware::Error> {
        self.source.as_ref()
    }
}

impl KeyReused {
    /// The key-reuse refusal `error` reports, if that is what it is.
    pub fn of(error: &reqwest_middleware::Error) -> Option<&KeyReused> {
        match error {
            reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<KeyReused>(),
            _ => None,
        }
    }
}

/// What one attempt's answer calls for.
enum Verdict {
    /// Return it.
    Final,
    /// Try again, after the server's `Retry-After` if it gave one.
    Retry(Option<std::time::Duration>),
}

fn retry_after(response: &Response) -> Option<std::time::Duration> {
    let value = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

fn verdict(result: &reqwest_middleware::Result<Response>) -> Verdict {
    match result {
        // A stored answer does not change: retrying a replay is pointless.
        Ok(response) if is_replay(response) => Verdict::Final,
        Ok(response) => match response.status() {
            // The first attempt still runs: its answer comes later. (Any
            // Retry-After, readable or not: the backoff stands in.)
            StatusCode::CONFLICT if response.headers().contains_key(RETRY_AFTER) => {
                Verdict::Retry(retry_after(response))
            }
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Verdict::Retry(retry_after(response)),
            _ => Verdict::Final,
        },
        // Sent or not, answered or not: the key makes trying again safe.
        Err(reqwest_middleware::Error::Reqwest(error))
            if error.is_connect() || error.is_timeout() || error.is_request() =>
        {
            Verdict::Retry(None)
        }
        Err(_) => Verdict::Final,
    }
}

fn is_replay(response: &Response) -> bool {
    response.headers().get(REPLAYED).is_some_and(|value| value.as_bytes() == b"true")
}

/// The largest problem document read to find a key reuse.
const PROBLEM_LIMIT: u64 = 64 << 10;

/// A 422 `key-reused` or a 409 `execution-held` as the typed error; any
/// other response as it is.
/// Only a small `application/problem+json` body is read; the response is
/// then rebuilt whole (status, version, URL, headers, body).
async fn refused(response: Response, key: &str) -> reqwest_middleware::Result<Response> {
    let problem = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
    let small = response.content_length().is_some_and(|length| length <= PROBLEM_LIMIT);
    let refusal = matches!(response.status(), StatusCode::UNPROCESSABLE_ENTITY | StatusCode::CONFLICT);
    if !refusal || !problem || !small {
        return Ok(response);
    }
    let (status, version, url) = (response.status(), response.version(), response.url().clone());
    let headers = response.headers().clone();
    let extensions = response.extensions().clone();
    let body = response.bytes().await?;
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if problem["type"] == KEY_REUSED {
        let detail = problem["detail"].as_str().unwrap_or("key reused").to_owned();
        return Err(reqwest_middleware::Error::middleware(KeyReused { key: key.to_owned(), detail }));
    }
    if problem["type"] == EXECUTION_HELD {
        let detail = problem["detail"].as_str().unwrap_or("execution held").to_owned();
        return Err(reqwest_middleware::Error::middleware(ExecutionHeld { key: key.to_owned(), detail }));
    }
    // Another 422 (a validation error, say): handed back unchanged.
    let builder = http::Response::builder().status(status).version(version);
    let mut rebuilt =
        reqwest::ResponseBuilderExt::url(builder, url).body(body).map_err(reqwest_middleware::Error::middleware)?;
    *rebuilt.headers_mut() = headers;
    rebuilt.extensions_mut().extend(extensions);
    Ok(Response::from(rebuilt))
}

#[async_trait]
impl Middleware for IdempotencyMiddleware {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = match req.headers().get(IDEMPOTENCY_KEY) {
            Some(key) => key.clone(),
            None => {
                let key = HeaderValue::from_str(&new_key()).expect("a UUID is a header value");
                req.headers_mut().insert(IDEMPOTENCY_KEY, key.clone());
                key
            }
        };
        let shown = String::from_utf8_lossy(key.as_bytes()).into_owned();
        let mut schedule = Schedule::start(self.policy.clone());
        let gave_up = |schedule: &Schedule, reason, source| {
            let gave_up = GaveUp { key: shown.clone(), attempts: schedule.attempts(), reason, source };
            reqwest_middleware::Error::middleware(gave_up)
        };
        let result = loop {
            // A body that cannot be cloned (a stream) is sent once.
            let Some(attempt) = req.try_clone() else {
                schedule.attempt();
                break next.clone().run(req, extensions).await;
            };
            schedule.attempt();
            // The deadline bounds a running attempt too.
            let sent = next.clone().run(attempt, extensions);
            let Ok(result) = tokio::time::timeout(schedule.remaining(), sent).await else {
                return Err(gave_up(&schedule, "the deadline came while an attempt ran", None));
            };
            let Verdict::Retry(asked) = verdict(&result) else { break result };
            let Some(wait) = schedule.next(asked, fastrand::f64()) else {
                match result {
                    Ok(response) => break Ok(response),
                    Err(error) => return Err(gave_up(&schedule, "no attempt left before the deadline", Some(error))),
                }
            };
            tracing::debug!(key = %shown, attempt = schedule.attempts(), ?wait, "retrying with the same key");
            tokio::time::sleep(wait).await;
        };
        let mut response = refused(result?, &shown).await?;
        let replayed = is_replay(&response);
        response.extensions_mut().insert(Report { key: shown, attempts: schedule.attempts(), replayed });
        Ok(response)
    }
}
