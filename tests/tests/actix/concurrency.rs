//! Races, waits, disconnects and slow handlers, over real HTTP.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, post, web};
use bytes::Bytes;
use idem_runtime::store::Store;
use idem_runtime::{MemoryStore, idempotent};
use idem_tests::counter::Counter;
use idem_tests::http::{client, fresh_key, send};
use idem_tests::orders::{Calls, memory_idem, routes};
use idem_tests::server::TestServer;

/// Counts handler starts and finishes.
#[derive(Default)]
struct Progress {
    started: Counter,
    finished: Counter,
}

/// Waits (rather than refusing) for a concurrent duplicate to finish.
#[idempotent(in_flight = "wait", wait = "10s")]
#[post("/waiting")]
async fn waiting(progress: web::Data<Progress>) -> HttpResponse {
    let call = progress.started.next();
    tokio::time::sleep(Duration::from_millis(300)).await;
    progress.finished.next();
    HttpResponse::Created().body(format!("call {call}"))
}

/// Waits longer than an `Instant` can count (review helper-30: the sum
/// panicked every request).
#[idempotent(scope = "route", in_flight = "wait", wait = "106751991167301d")]
#[post("/endless-wait")]
async fn endless_wait() -> HttpResponse {
    HttpResponse::Created().finish()
}

/// Takes `?ms=` milliseconds, with a 1 s lease.
#[idempotent(lock_ttl = "1s", ttl = "1h")]
#[post("/slow")]
async fn slow(progress: web::Data<Progress>, query: web::Query<Millis>) -> HttpResponse {
    let call = progress.started.next();
    tokio::time::sleep(Duration::from_millis(query.ms)).await;
    progress.finished.next();
    HttpResponse::Created().body(format!("call {call}"))
}

#[derive(serde::Deserialize)]
struct Millis {
    ms: u64,
}

fn start(progress: &web::Data<Progress>, calls: &web::Data<Calls>) -> TestServer {
    let (progress, calls) = (progress.clone(), calls.clone());
    TestServer::start(memory_idem(), move |config| {
        routes(calls.clone())(config);
        config.app_data(progress.clone()).service(waiting).service(slow);
    })
}

/// POSTs `body` as JSON with idempotency key `key`, as user alice: the
/// status, `Idempotent-Replayed`, `Retry-After` and the body.
async fn post(url: &str, key: &str, body: &str) -> (StatusCode, Option<String>, Option<String>, Bytes) {
    let reply = send(url, Some("alice"), Some(key), Some(body)).await;
    (reply.status, reply.replayed, reply.retry_after, reply.body)
}

#[actix_web::test]
async fn a_hundred_concurrent_duplicates_run_the_handler_once() {
    let (progress, calls) = (web::Data::new(Progress::default()), web::Data::new(Calls::default()));
    let server = start(&progress, &calls);
    let url = Arc::new(server.at("/orders?delay_ms=300"));
    let key = fresh_key();
    let requests = (0..100).map(|_| {
        let (url, key) = (Arc::clone(&url), key.clone());
        actix_web::rt::spawn(async move { post(&url, &key, r#"{"amount":1}"#).await })
    });
    let responses: Vec<_> = futures_util::future::join_all(requests).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(calls.orders.get(), 1, "the handler body ran exactly once");
    let created: Vec<_> = responses.iter().filter(|r| r.0 == StatusCode::CREATED).collect();
    let conflicts = responses.iter().filter(|r| r.0 == StatusCode::CONFLICT && r.2.is_some()).count();
    assert_eq!(created.len() + conflicts, 100, "every response is a 201 or a 409 with Retry-After");
    assert!(created.iter().all(|r| r.3 == created[0].3), "every 201 has the identical body");
    // Once finished, every retry is the identical replay.
    let (status, replayed, _, body) = post(&url, &key, r#"{"amount":1}"#).await;
    assert_eq!((status, replayed.as_deref()), (StatusCode::CREATED, Some("true")));
    assert_eq!(body, created[0].3);
}

#[actix_web::test]
async fn waiting_duplicates_get_the_first_response() {
    let (progress, calls) = (web::Data::new(Progress::default()), web::Data::new(Calls::default()));
    let server = start(&progress, &calls);
    let url = Arc::new(server.at("/waiting"));
    let key = fresh_key();
    let requests = (0..20).map(|_| {
        let (url, key) = (Arc::clone(&url), key.clone());
        actix_web::rt::spawn(async move { post(&url, &key, "{}").await })
    });
    let responses: Vec<_> = futures_util::future::join_all(requests).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(progress.started.get(), 1);
    assert!(responses.iter().all(|r| r.0 == StatusCode::CREATED && r.3 == "call 1"), "{responses:?}");
    let replays = responses.iter().filter(|r| r.1.as_deref() == Some("true")).count();
    assert_eq!(replays, 19, "all but the first were replays");
}

#[actix_web::test]
async fn a_client_that_hangs_up_does_not_cancel_the_handler() {
    let (progress, calls) = (web::Data::new(Progress::default()), web::Data::new(Calls::default()));
    let server = start(&progress, &calls);
    let url = server.at("/slow?ms=600");
    let key = fresh_key();
    let impatient = client(Duration::from_millis(100));
    let hung_up = impatient
        .post(&url)
        .insert_header(("idempotency-key", key.as_str()))
        .insert_header(("x-user-id", "alice"))
        .insert_header(("content-type", "application/json"))
        .send()
        .await;
    assert!(hung_up.is_err(), "the client gave up before the handler finished");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(progress.finished.get(), 1, "the handler ran to its end");
    let (status, replayed, _, body) = post(&url, &key, "").await;
    assert_eq!((status, replayed.as_deref()), (StatusCode::CREATED, Some("true")), "{body:?}");
    assert_eq!(body, "call 1");
    assert_eq!(progress.started.get(), 1);
}

#[actix_web::test]
async fn a_handler_slower_than_its_lease_keeps_it() {
    let (progress, calls) = (web::Data::new(Progress::default()), web::Data::new(Calls::default()));
    let server = start(&progress, &calls);
    let url = Arc::new(server.at("/slow?ms=2600"));
    let key = fresh_key();
    let first = {
        let (url, key) = (Arc::clone(&url), key.clone());
        actix_web::rt::spawn(async move { post(&url, &key, "").await })
    };
    // Well past the 1 s lease: only the heartbeat keeps the key held.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        let (status, _, retry_after, _) = post(&url, &key, "").await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(retry_after.is_some());
    }
    let (status, _, _, body) = first.await.unwrap();
    assert_eq!((status, body.as_ref()), (StatusCode::CREATED, b"call 1".as_ref()));
    assert_eq!(progress.started.get(), 1, "no second execution");
    let (_, replayed, _, body) = post(&url, &key, "").await;
    assert_eq!((replayed.as_deref(), body.as_ref()), (Some("true"), b"call 1".as_ref()));
}

/// Whatever drops the request's future (a client disconnect, an HTTP/2
/// stream reset, a timeout middleware), the handler runs to its end and the
/// retry gets its stored result.
#[actix_web::test]
async fn a_dropped_request_future_does_not_cancel_the_handler() {
    use actix_web::test::{self, TestRequest};
    let progress = web::Data::new(Progress::default());
    let app =
        test::init_service(actix_web::App::new().app_data(memory_idem()).app_data(progress.clone()).service(slow))
            .await;
    let request = || {
        TestRequest::post()
            .uri("/slow?ms=400")
            .insert_header(("idempotency-key", "k"))
            .insert_header(("x-user-id", "alice"))
            .to_request()
    };
    let dropped = tokio::time::timeout(Duration::from_millis(100), test::call_service(&app, request())).await;
    assert!(dropped.is_err(), "the request future was dropped mid-handler");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(progress.finished.get(), 1, "the handler ran to its end");
    let retry = test::call_service(&app, request()).await;
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(retry).await, "call 1");
}

#[actix_web::test]
async fn a_blocked_worker_keeps_every_lease_on_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    idem_tests::blocking::a_blocked_worker_keeps_every_lease_on_it(Arc::clone(&store), store).await;
}

#[actix_web::test]
async fn a_wait_beyond_what_the_clock_counts_does_not_panic_the_request() {
    use actix_web::test::{self, TestRequest};
    let app = test::init_service(actix_web::App::new().app_data(memory_idem()).service(endless_wait)).await;
    for _ in 0..2 {
        let req = TestRequest::post().uri("/endless-wait").insert_header(("idempotency-key", "k")).to_request();
        let response = test::try_call_service(&app, req).await;
        assert_eq!(response.map(|r| r.status()).ok(), Some(StatusCode::CREATED));
    }
}
