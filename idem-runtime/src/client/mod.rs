//! The retrying client (§11 of the behaviour contract), for Rust callers of
//! idempotent endpoints: a [`reqwest_middleware`] middleware that gives each
//! logical request one `Idempotency-Key`, made once and kept on every
//! retry, and retries what is safe to retry with that key.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_runtime::client::{IdempotencyMiddleware, Outcome, RetryPolicy};
//!
//! let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build()?;
//! let client = reqwest_middleware::ClientBuilder::new(http).with(IdempotencyMiddleware::new(RetryPolicy::default())).build();
//! let response = client.post("https://shop.example/orders").json(&serde_json::json!({"amount_cents": 1500})).send().await?;
//! let replayed = Outcome::of(&response).is_some_and(|outcome| outcome.replayed);
//! # Ok(()) }
//! ```
//!
//! | the server answers | the client |
//! |---|---|
//! | a connection error, a timeout, a response lost on the way | retries with the same key |
//! | 409 with `Retry-After` (the first attempt still runs) | waits as asked, retries |
//! | 429, 502, 503, 504 | retries, after `Retry-After` if given, else after its backoff |
//! | 422 `key-reused` | stops: [`KeyReused`] |
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

/// Adds one `Idempotency-Key` per logical request and retries it (see the
/// [module](self)). A key the caller set on the request (a natural key,
/// such as an invoice number) is kept as it is.
#[derive(Debug, Clone, Default)]
pub struct IdempotencyMiddleware {
    policy: RetryPolicy,
    new_key_per_attempt: bool,
}

impl IdempotencyMiddleware {
    /// A middleware retrying under `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy, new_key_per_attempt: false }
    }

    /// Breaks the client on purpose, for tests only: a new key on every
    /// attempt, so that a retry is a new request (what the idempotency
    /// key exists to prevent).
    #[doc(hidden)]
    pub fn new_key_per_attempt_for_tests(mut self) -> Self {
        self.new_key_per_attempt = true;
        self
    }
}

/// What became of a logical request, on its final response
/// ([`Outcome::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The key it was sent with.
    pub key: String,
    /// Attempts sent, the first included.
    pub attempts: u32,
    /// Whether the final answer is a replay of an earlier execution's
    /// (`Idempotent-Replayed: true`).
    pub replayed: bool,
}

impl Outcome {
    /// The outcome the middleware left on `response`, if it went through it.
    pub fn of(response: &Response) -> Option<&Outcome> {
        response.extensions().get::<Outcome>()
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
        Ok(response) => match response.status() {
            StatusCode::CONFLICT => match retry_after(response) {
                // The first attempt still runs: its answer comes later.
                Some(wait) => Verdict::Retry(Some(wait)),
                None => Verdict::Final,
            },
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

fn fresh_key() -> HeaderValue {
    HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()).expect("a UUID is a header value")
}

/// A 422 `key-reused` as the typed error; any other response as it is.
async fn refused(response: Response, key: &str) -> reqwest_middleware::Result<Response> {
    if response.status() != StatusCode::UNPROCESSABLE_ENTITY {
        return Ok(response);
    }
    let status = response.status();
    let headers = response.headers().clone();
    let extensions = response.extensions().clone();
    let body = response.bytes().await?;
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if problem["type"] == KEY_REUSED {
        let detail = problem["detail"].as_str().unwrap_or("key reused").to_owned();
        return Err(reqwest_middleware::Error::middleware(KeyReused { key: key.to_owned(), detail }));
    }
    // Another 422 (a validation error, say): handed back unchanged.
    let mut rebuilt = http::Response::new(body);
    *rebuilt.status_mut() = status;
    *rebuilt.headers_mut() = headers;
    *rebuilt.extensions_mut() = extensions;
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
                let key = fresh_key();
                req.headers_mut().insert(IDEMPOTENCY_KEY, key.clone());
                key
            }
        };
        let shown = key.to_str().unwrap_or_default().to_owned();
        let mut schedule = Schedule::start(self.policy.clone());
        let result = loop {
            // A body that cannot be cloned (a stream) is sent once.
            let Some(mut attempt) = req.try_clone() else {
                schedule.attempt();
                break next.clone().run(req, extensions).await;
            };
            if self.new_key_per_attempt {
                attempt.headers_mut().insert(IDEMPOTENCY_KEY, fresh_key());
            }
            schedule.attempt();
            let result = next.clone().run(attempt, extensions).await;
            let Verdict::Retry(asked) = verdict(&result) else { break result };
            let Some(wait) = schedule.next(asked, fastrand::f64()) else { break result };
            tracing::debug!(key = %shown, attempt = schedule.attempts(), ?wait, "retrying with the same key");
            tokio::time::sleep(wait).await;
        };
        let mut response = refused(result?, &shown).await?;
        let replayed = response.headers().get(REPLAYED).is_some_and(|value| value.as_bytes() == b"true");
        response.extensions_mut().insert(Outcome { key: shown, attempts: schedule.attempts(), replayed });
        Ok(response)
    }
}
