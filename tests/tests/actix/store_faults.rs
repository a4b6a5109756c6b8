//! Store faults while a handler runs: a blip in renewals must not let the
//! lease lapse, and a failed completion is retried.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Idem, idempotent};
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;
use idem_tests::orders::TEST_STORE_TIMEOUT;

/// Takes 5 s under a 3 s lease (renewed every second).
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h")]
#[post("/slow")]
async fn slow(started: web::Data<Counter>) -> HttpResponse {
    let call = started.next();
    tokio::time::sleep(Duration::from_secs(5)).await;
    HttpResponse::Created().body(format!("call {call}"))
}

fn request() -> actix_http::Request {
    TestRequest::post().uri("/slow").insert_header(("idempotency-key", "k")).to_request()
}

#[actix_web::test]
async fn a_renewal_outage_shorter_than_the_lease_does_not_lose_it() {
    // Renewals fail from 1.1 s to 3.4 s: the regular beats at 2 s and 3 s
    // both fail, and the lease (renewed at 1 s) would end at 4 s. Quick
    // retries after a failure renew it at about 3.5 s.
    let store = FaultyStore::default()
        .renewals_fail_between(Duration::from_millis(1_100), Duration::from_millis(3_400))
        .first_completions_fail(1);
    let started = web::Data::new(Counter::default());
    let app = test::init_service(
        App::new().app_data(Idem::new(store).store_timeout(TEST_STORE_TIMEOUT)).app_data(started.clone()).service(slow),
    )
    .await;
    let first = test::call_service(&app, request());
    let duplicate = async {
        tokio::time::sleep(Duration::from_millis(4_500)).await;
        test::call_service(&app, request()).await
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    assert_eq!(duplicate.status(), StatusCode::CONFLICT, "the lease outlived the renewal outage");
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(started.get(), 1, "one execution");
    // The first completion failed and was retried: the retry replays.
    let replay = test::call_service(&app, request()).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(replay).await, "call 1");
}

/// Waits for the first response, up to 1 s.
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h", in_flight = "wait", wait = "1s")]
#[post("/waiting")]
async fn waiting(started: web::Data<Counter>) -> HttpResponse {
    let call = started.next();
    tokio::time::sleep(Duration::from_secs(3)).await;
    HttpResponse::Created().body(format!("call {call}"))
}

#[actix_web::test]
async fn a_wait_that_runs_into_its_deadline_is_409_not_503() {
    // Every claim after the first takes 400 ms, so the duplicate's last
    // claim is cut short by its 1 s wait, not by the store timeout.
    let store = FaultyStore::default().later_claims_take(Duration::from_millis(400));
    let started = web::Data::new(Counter::default());
    let idem = Idem::new(store).store_timeout(Duration::from_millis(900));
    let app = test::init_service(App::new().app_data(idem).app_data(started.clone()).service(waiting)).await;
    let wait = || TestRequest::post().uri("/waiting").insert_header(("idempotency-key", "w")).to_request();
    let first = test::call_service(&app, wait());
    let duplicate = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        (test::call_service(&app, wait()).await, started.elapsed())
    };
    let (first, (duplicate, waited)) = tokio::join!(first, duplicate);
    assert_eq!(duplicate.status(), StatusCode::CONFLICT, "the wait ended at its deadline: still in flight");
    assert!(duplicate.headers().contains_key("retry-after"));
    assert!(waited < Duration::from_millis(1_300), "the wait kept to its deadline: {waited:?}");
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(started.get(), 1);
}

#[actix_web::test]
async fn a_completion_is_retried_for_as_long_as_the_lease_holds() {
    // Completions fail for 6 s after the claim (the handler takes 5 s): the
    // response goes out, and the completion keeps trying under the kept lease.
    let store = FaultyStore::default().completions_fail_for(Duration::from_secs(6));
    let started = web::Data::new(Counter::default());
    let idem = Idem::new(store).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(App::new().app_data(idem).app_data(started.clone()).service(slow)).await;
    let first = test::call_service(&app, request()).await;
    assert_eq!(first.status(), StatusCode::CREATED, "the client gets its response while the store is down");
    // Past three lock_ttl's worth of failed attempts, the key is still held.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let retry = test::call_service(&app, request()).await;
        assert_eq!(retry.status(), StatusCode::CONFLICT, "still completing, never run again");
    }
    // Past the end of a lease abandoned at the first failures (about 8 s
    // after the claim): a completion that gave up would let this run again.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let retry = test::call_service(&app, request()).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(retry).await, "call 1");
    assert_eq!(started.get(), 1);
}

/// Answers more than the memory store below will take.
#[idempotent(scope = "route", lock_ttl = "3s", ttl = "1h")]
#[post("/large")]
async fn large(started: web::Data<Counter>) -> HttpResponse {
    started.next();
    HttpResponse::Created().body(vec![b'x'; 4096])
}

#[actix_web::test]
async fn a_response_the_store_refuses_for_good_becomes_a_processed_problem() {
    // The response fits the runtime's limit (1 MiB) but not the store (2 KiB).
    let store = idem_runtime::MemoryStore::with_limits(100, 2048);
    let started = web::Data::new(Counter::default());
    let idem = Idem::new(store).store_timeout(TEST_STORE_TIMEOUT);
    let app = test::init_service(App::new().app_data(idem).app_data(started.clone()).service(large)).await;
    let req = || TestRequest::post().uri("/large").insert_header(("idempotency-key", "big")).to_request();
    let first = test::call_service(&app, req()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(test::read_body(first).await.len(), 4096, "the first client gets the response whole");
    let retry = test::call_service(&app, req()).await;
    assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    let body: serde_json::Value = test::read_body_json(retry).await;
    assert_eq!(body["type"], "urn:idem:problem:response-not-stored");
    assert!(body["detail"].as_str().unwrap().contains("was processed"), "{body}");
    assert_eq!(started.get(), 1, "never run again");
}
