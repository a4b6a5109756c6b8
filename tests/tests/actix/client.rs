//! The retrying client (§11) against a real HTTP server on loopback that
//! answers from a script: which answers it retries, how long it waits, that
//! every attempt carries the same key, and where it stops.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, web};
use idem_runtime::client::{ExecutionHeld, GaveUp, IdempotencyMiddleware, KeyReused, Report, RetryPolicy};
use idem_runtime::{Idem, MemoryStore};
use idem_tests::server::TestServer;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// One scripted answer: status, `Retry-After`, body.
type Answer = (u16, Option<&'static str>, &'static str);

/// The script, and the keys the requests carried.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    keys: Mutex<Vec<Option<String>>>,
}

async fn scripted(req: HttpRequest, script: web::Data<Script>) -> HttpResponse {
    let key = req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    script.keys.lock().unwrap().push(key);
    let (status, retry_after, body) = script.answers.lock().unwrap().pop_front().unwrap_or((200, None, "done"));
    let mut response = HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap());
    if let Some(wait) = retry_after {
        response.insert_header(("retry-after", wait));
    }
    if body.starts_with('{') {
        response.content_type("application/problem+json");
    }
    if body == "replayed" {
        response.insert_header(("idempotent-replayed", "true"));
    }
    response.body(body)
}

fn scripted_server(answers: &[Answer]) -> (TestServer, Arc<Script>) {
    let script = Arc::new(Script::default());
    script.answers.lock().unwrap().extend(answers.iter().copied());
    let data = web::Data::from(Arc::clone(&script));
    let server = TestServer::start(Idem::new(MemoryStore::new()), move |routes| {
        routes.app_data(data.clone()).route("/pay", web::post().to(scripted));
    });
    (server, script)
}

fn client(policy: RetryPolicy) -> ClientWithMiddleware {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    ClientBuilder::new(http).with(IdempotencyMiddleware::new(policy)).build()
}

fn fast() -> RetryPolicy {
    RetryPolicy::default().initial_backoff(Duration::from_millis(20)).max_attempts(4)
}

fn keys(script: &Script) -> Vec<Option<String>> {
    script.keys.lock().unwrap().clone()
}

#[actix_web::test]
async fn transient_answers_are_retried_with_one_key() {
    let (server, script) = scripted_server(&[
        (503, None, "busy"),
        (502, None, "gateway"),
        (429, Some("0"), "slow down"),
        (201, None, "replayed"),
    ]);
    let response = client(fast()).post(server.at("/pay")).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 201);
    let report = Report::of(&response).cloned().expect("the report");
    assert_eq!((report.attempts, report.replayed), (4, true));
    let keys = keys(&script);
    assert_eq!(keys.len(), 4);
    assert!(keys.iter().all(|key| key.as_deref() == Some(report.key.as_str())), "one key for every attempt: {keys:?}");
    assert_eq!(report.key.len(), 36, "a UUID: {}", report.key);
    // The next logical request gets a key of its own.
    let again = client(fast()).post(server.at("/pay")).body("{}").send().await.unwrap();
    assert_ne!(Report::of(&again).unwrap().key, report.key);
}

#[actix_web::test]
async fn a_conflict_with_retry_after_is_waited_for_and_one_without_is_final() {
    let (server, script) =
        scripted_server(&[(409, Some("1"), "in flight"), (201, None, "replayed"), (409, None, "conflict")]);
    let started = Instant::now();
    let response = client(fast()).post(server.at("/pay")).send().await.unwrap();
    assert_eq!(response.status(), 201);
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After honoured: {:?}", started.elapsed());
    let response = client(fast()).post(server.at("/pay")).send().await.unwrap();
    assert_eq!((response.status().as_u16(), Report::of(&response).unwrap().attempts), (409, 1));
    assert_eq!(keys(&script).len(), 3);
}

#[actix_web::test]
async fn a_reused_key_is_a_typed_error_and_other_4xx_are_returned() {
    let reused = r#"{"type":"urn:idem:problem:key-reused","title":"Key reused","status":422,"detail":"another body"}"#;
    let invalid = r#"{"type":"about:blank","title":"Invalid","status":422,"detail":"amount"}"#;
    let (server, script) =
        scripted_server(&[(422, None, reused), (422, None, invalid), (400, None, "bad"), (404, None, "none")]);
    let natural = "invoice-42";
    let error = client(fast()).post(server.at("/pay")).header("Idempotency-Key", natural).send().await.unwrap_err();
    let refused = KeyReused::of(&error).expect("a KeyReused error");
    assert_eq!((refused.key.as_str(), refused.detail.as_str()), (natural, "another body"));
    let response = client(fast()).post(server.at("/pay")).send().await.unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(response.text().await.unwrap(), invalid, "another 422 comes back whole");
    for status in [400, 404] {
        let response = client(fast()).post(server.at("/pay")).send().await.unwrap();
        assert_eq!(response.status(), status);
    }
    let keys = keys(&script);
    assert_eq!(keys.len(), 4, "none of them retried");
    assert_eq!(keys[0].as_deref(), Some(natural), "the caller's natural key is kept");
}

#[actix_web::test]
async fn a_held_execution_is_final_and_reported_as_such() {
    let held = r#"{"type":"urn:idem:problem:execution-held","title":"Execution held","status":409,"detail":"held"}"#;
    let (server, script) = scripted_server(&[(409, None, held), (201, None, "never reached")]);
    let error = client(fast()).post(server.at("/pay")).header("Idempotency-Key", "pay-7").send().await.unwrap_err();
    let refused = ExecutionHeld::of(&error).expect("an ExecutionHeld error");
    assert_eq!((refused.key.as_str(), refused.detail.as_str()), ("pay-7", "held"));
    assert!(KeyReused::of(&error).is_none());
    assert_eq!(keys(&script).len(), 1, "never retried");
}

#[actix_web::test]
async fn attempts_and_the_deadline_bound_the_retries() {
    let busy: Vec<Answer> = vec![(503, None, "busy"); 10];
    let (server, script) = scripted_server(&busy);
    let response = client(fast().max_attempts(3)).post(server.at("/pay")).send().await.unwrap();
    assert_eq!((response.status().as_u16(), Report::of(&response).unwrap().attempts), (503, 3));
    assert_eq!(keys(&script).len(), 3);

    let slow: Vec<Answer> = vec![(503, Some("1"), "busy"); 10];
    let (server, script) = scripted_server(&slow);
    let started = Instant::now();
    let policy = fast().max_attempts(10).deadline(Duration::from_millis(1_500));
    let response = client(policy).post(server.at("/pay")).send().await.unwrap();
    assert_eq!(response.status(), 503, "the last answer, as it is");
    assert_eq!(keys(&script).len(), 2, "at 0 s and 1 s; 2 s is past the deadline");
    assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
}

#[actix_web::test]
async fn a_refused_connection_is_retried_then_reported_with_its_key() {
    let port = idem_tests::port::free_port();
    let started = Instant::now();
    let error = client(fast().max_attempts(3)).post(format!("http://127.0.0.1:{port}/pay")).send().await.unwrap_err();
    let gave_up = GaveUp::of(&error).expect("a GaveUp error");
    assert_eq!((gave_up.attempts, gave_up.key.len()), (3, 36), "{gave_up}");
    assert!(gave_up.last_error().is_some_and(reqwest_middleware::Error::is_connect), "{gave_up:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "three quick attempts: {:?}", started.elapsed());
}

/// An attempt that never gets an answer (no client timeout) is abandoned
/// at the deadline, with the key to try again with.
#[actix_web::test]
async fn the_deadline_bounds_an_attempt_that_hangs() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/pay", listener.local_addr().unwrap());
    let http = reqwest::Client::new();
    let client =
        ClientBuilder::new(http).with(IdempotencyMiddleware::new(fast().deadline(Duration::from_millis(800)))).build();
    let started = Instant::now();
    let error = client.post(url).send().await.unwrap_err();
    let gave_up = GaveUp::of(&error).expect("a GaveUp error");
    assert_eq!(gave_up.attempts, 1);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    drop(listener);
}

/// A replayed answer is final whatever its status (a stored answer does
/// not change); a 409 whose Retry-After is unreadable is retried after the
/// backoff.
#[actix_web::test]
async fn replays_are_final_and_an_unreadable_retry_after_still_retries() {
    let (server, script) =
        scripted_server(&[(409, Some("soon"), "in flight"), (201, None, "done"), (503, None, "replayed")]);
    let response = client(fast()).post(server.at("/pay")).send().await.unwrap();
    assert_eq!((response.status().as_u16(), Report::of(&response).unwrap().attempts), (201, 2));
    let response = client(fast()).post(server.at("/pay")).send().await.unwrap();
    let report = Report::of(&response).unwrap();
    assert_eq!((response.status().as_u16(), report.attempts, report.replayed), (503, 1, true));
    assert_eq!(keys(&script).len(), 3);
}
