//! Target `handle`: the whole request path of `#[idempotent]` (§4 of the
//! contract), through `actix_web::test`, on a memory store emptied for
//! every input.
//!
//! Each input sends a request made by `arbitrary` (any route, method, path,
//! query, headers and body) twice, then once more changed in one way.
//! Properties:
//!
//! - never a panic, never a 5xx but the documented ones (§5: with a
//!   healthy memory store and handlers that do not panic, only a 503
//!   `store-unavailable` with `Retry-After`, should a store call time out);
//!   every problem the runtime answers is well-formed RFC 9457;
//! - a first answer is never marked replayed (the handler's own
//!   `Idempotent-Replayed` is removed); a replay is marked `true`, once;
//! - a handler runs at most once per request: a keyed request that ran
//!   and kept its response is replayed (same status, same body, no second
//!   run); a retryable or keyless one runs again; a refused one is refused
//!   again the same way;
//! - the same key sent with another request (query, path, a fingerprint
//!   header, the body changed) gets 422 and runs nothing; the same request
//!   written otherwise (JSON re-serialized, media type spelled otherwise)
//!   is replayed.

mod app;
mod input;
mod store;

use std::cell::OnceCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_http::Request;
use actix_web::body::to_bytes;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use actix_web::{test, web};
use arbitrary::{Arbitrary, Unstructured};
use idem_runtime::REPLAYED_HEADER;
use idem_runtime::problem::TYPE_PREFIX;

use self::app::{BODY_LIMIT, Harness, OUTCOME};
use self::input::{Input, Meaning, Sent};

/// The actix system and the app of one thread, built at its first input.
/// Never dropped: dropping them as the thread ends, in whatever order
/// thread locals go, touches thread locals already gone.
struct Thread {
    system: actix_rt::SystemRunner,
    harness: Harness,
}

thread_local! {
    static THREAD: OnceCell<&'static Thread> = const { OnceCell::new() };
}

/// How many inputs (in this process) reached each of the properties that
/// need the handler to run: a replay checked, a key reused for another
/// request refused, the same request written otherwise replayed. The
/// corpus replay test requires each, so that a corpus that no longer makes
/// such requests (after a change to [`Input`]'s layout, say) fails instead
/// of passing without checking them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exercised {
    /// A keyed request ran, kept its response, and its retry was a replay.
    pub replayed: usize,
    /// The same key came with another request and got 422.
    pub reused: usize,
    /// The same request, written otherwise, was replayed.
    pub rewritten: usize,
}

static EXERCISED: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// What the inputs checked so far have exercised.
pub fn exercised() -> Exercised {
    let [replayed, reused, rewritten] = EXERCISED.each_ref().map(|count| count.load(Ordering::Relaxed));
    Exercised { replayed, reused, rewritten }
}

fn count(property: usize) {
    EXERCISED[property].fetch_add(1, Ordering::Relaxed);
}

/// Checks one input.
pub fn check(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let Some(sent) = input.sent() else { return };
    let changed = input.changed(&sent);
    THREAD.with(|thread| {
        let Thread { system, harness } = thread.get_or_init(|| {
            let system = actix_rt::System::new();
            let harness = system.block_on(Harness::new());
            Box::leak(Box::new(Thread { system, harness }))
        });
        harness.reset();
        system.block_on(exchange(harness, sent, changed));
    });
}

/// What came back.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    retry_after: bool,
    /// Every `Idempotent-Replayed` value.
    replayed: Vec<String>,
    /// The handler's `x-outcome`.
    outcome: Option<String>,
    body: web::Bytes,
}

impl Answer {
    fn is_replay(&self) -> bool {
        !self.replayed.is_empty()
    }
}

async fn exchange(harness: &Harness, sent: Sent, changed: Option<(Sent, Meaning)>) {
    let (app, runs) = (&harness.app, &harness.runs);
    let first = send(app, &sent).await;
    let after_first = runs.get();
    let second = send(app, &sent).await;
    let after_second = runs.get();
    let context = format!("{sent:#?}\nfirst: {first:?}\nsecond: {second:?}");
    assert!(!first.is_replay(), "{context}\nthe first answer is marked replayed");
    assert!(after_first <= 1, "{context}\none request ran the handler {after_first} times");
    let ran = after_first == 1;
    let keyed = ran && first.outcome.as_deref() != Some("keyless");
    let kept = keyed && first.outcome.as_deref() == Some("keyed");
    if kept {
        assert!(second.is_replay(), "{context}\nthe same keyed request is not replayed");
        count(0);
    }
    if second.is_replay() {
        assert_eq!((second.status, &second.body), (first.status, &first.body), "{context}\nthe replay differs");
        assert_eq!(after_second, after_first, "{context}\na replay ran the handler");
    } else if ran {
        assert!(!kept, "{context}");
        assert_eq!(after_second, 2, "{context}\na retryable or keyless request did not run again");
        assert_eq!(second.status, first.status, "{context}\nthe second run answered otherwise");
    } else {
        assert_eq!((second.status, &second.body), (first.status, &first.body), "{context}\nrefused otherwise");
        assert_eq!(after_second, 0, "{context}\na refused request ran the next time");
    }
    let Some((changed, meaning)) = changed else { return };
    let third = send(app, &changed).await;
    let context = format!("{context}\nchanged: {changed:#?}\nthird: {third:?}");
    match meaning {
        Meaning::Other if keyed && changed.body_len() > BODY_LIMIT => {
            assert_eq!(third.status, StatusCode::PAYLOAD_TOO_LARGE, "{context}\nthe body over the limit");
        }
        Meaning::Other if keyed => {
            assert_eq!(third.status, StatusCode::UNPROCESSABLE_ENTITY, "{context}\nthe key reused for another request");
            assert_eq!(runs.get(), after_second, "{context}\nthe key reused ran the handler");
            count(1);
        }
        Meaning::Same if kept => {
            assert!(third.is_replay(), "{context}\nthe same request, written otherwise, is not replayed");
            assert_eq!((third.status, &third.body), (first.status, &first.body), "{context}\nthe replay differs");
            count(2);
        }
        _ => {}
    }
}

async fn send<S>(app: &S, sent: &Sent) -> Answer
where
    S: Service<Request, Response = ServiceResponse, Error = actix_web::Error>,
{
    let response = match test::try_call_service(app, sent.request().to_request()).await {
        Ok(response) => response.into_parts().1,
        Err(error) => error.error_response(),
    };
    let status = response.status();
    let headers = response.headers();
    let text = |value: &HeaderValue| String::from_utf8_lossy(value.as_bytes()).into_owned();
    let content_type = headers.get(CONTENT_TYPE).map(text);
    let retry_after = headers.contains_key(RETRY_AFTER);
    let replayed = headers.get_all(REPLAYED_HEADER).map(text).collect();
    let outcome = headers.get(OUTCOME).map(text);
    let body = match to_bytes(response.into_body()).await {
        Ok(body) => body,
        Err(error) => panic!("{sent:#?}\n{status}: the body failed: {error}"),
    };
    let answer = Answer { status, content_type, retry_after, replayed, outcome, body };
    sane(sent, &answer);
    answer
}

/// What holds for every answer.
fn sane(sent: &Sent, answer: &Answer) {
    let context = format!("{sent:#?}\n{answer:?}");
    assert!(
        answer.replayed.is_empty() || answer.replayed == ["true"],
        "{context}\nIdempotent-Replayed is the runtime's, `true` once"
    );
    let problem = match answer.content_type.as_deref() {
        Some("application/problem+json") => Some(problem_type(&context, answer)),
        _ => None,
    };
    if answer.status.is_server_error() {
        let store_unavailable = format!("{TYPE_PREFIX}store-unavailable");
        let documented = answer.status == StatusCode::SERVICE_UNAVAILABLE
            && answer.retry_after
            && problem.as_deref() == Some(store_unavailable.as_str());
        assert!(documented, "{context}\nan undocumented {}", answer.status);
    }
}

/// The `type` of a problem answer, once its shape is checked (RFC 9457:
/// `type`, `title`, `status` and `detail`).
fn problem_type(context: &str, answer: &Answer) -> String {
    let body: serde_json::Value = match serde_json::from_slice(&answer.body) {
        Ok(body) => body,
        Err(error) => panic!("{context}\na problem body that is not JSON: {error}"),
    };
    let field = |name: &str| body.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
    assert!(field("title").is_some() && field("detail").is_some(), "{context}\nproblem title and detail");
    let status = body.get("status").and_then(serde_json::Value::as_u64);
    assert_eq!(status, Some(u64::from(answer.status.as_u16())), "{context}\nproblem status");
    match field("type") {
        Some(kind) if kind.starts_with(TYPE_PREFIX) => kind,
        other => panic!("{context}\nproblem type {other:?}"),
    }
}
