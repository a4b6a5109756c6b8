//! Store faults while a handler runs: a blip in renewals must not let the
//! lease lapse, and a failed completion is retried.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::store::Store;
use idem_runtime::{Idem, idempotent};
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;
use idem_tests::http::{fresh_key, send};
use idem_tests::orders::TEST_STORE_TIMEOUT;
use idem_tests::server::TestServer;

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
    // The first completion failed and is retried in the background, while
    // the key stays in flight (409): a retry soon replays.
    let mut replay = test::call_service(&app, request()).await;
    for _ in 0..20 {
        if replay.status() != StatusCode::CONFLICT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        replay = test::call_service(&app, request()).await;
    }
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

/// Charges at once; answers about 200 bytes.
#[idempotent(scope = "global", lock_ttl = "1s", ttl = "1h")]
#[post("/charge")]
async fn charge(hits: web::Data<Counter>) -> HttpResponse {
    let n = hits.next();
    HttpResponse::Created().body(format!("charge #{n} {}", ".".repeat(190)))
}

/// Charges after 2.5 s, under a 1 s lease.
#[idempotent(scope = "global", lock_ttl = "1s", ttl = "1h")]
#[post("/slow-charge")]
async fn slow_charge(hits: web::Data<Counter>) -> HttpResponse {
    let n = hits.next();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    HttpResponse::Created().body(format!("charge #{n}"))
}

/// Blocks its worker thread for 1.6 s.
#[post("/block")]
async fn block() -> HttpResponse {
    std::thread::sleep(Duration::from_millis(1600));
    HttpResponse::Ok().finish()
}

/// Two one-worker servers (two processes, as the store sees them) on `store`.
fn two_servers(store: &Arc<dyn Store>, hits: &web::Data<Counter>) -> (TestServer, TestServer) {
    let serve = || {
        let idem = Idem::from_arc(Arc::clone(store)).store_timeout(Duration::from_millis(250));
        let hits = hits.clone();
        TestServer::with_workers(1, idem, move |c| {
            c.app_data(hits.clone()).service(charge).service(slow_charge).service(block);
        })
    };
    (serve(), serve())
}

#[actix_web::test]
async fn a_claim_answered_after_its_lease_ended_never_starts_the_handler() {
    // The claim is applied, its answer is on the way back, and the worker
    // blocks (another handler) past lock_ttl: by the time the answer is
    // read, the lease has lapsed and another server has found it so.
    // The answer's delay leaves the blocker time to reach the worker on a
    // loaded machine, and stays under the store timeout (250 ms).
    let faulty = Arc::new(FaultyStore::default().claim_answers_take(Duration::from_millis(200)));
    let store: Arc<dyn Store> = faulty.clone();
    let hits = web::Data::new(Counter::default());
    let (a, b) = two_servers(&store, &hits);
    let key = fresh_key();
    let first = actix_web::rt::spawn({
        let (url, key) = (a.at("/charge"), key.clone());
        async move { send(&url, None, Some(&key), Some("{}")).await }
    });
    // The claim is applied (its answer is on the way) before the worker blocks.
    while faulty.claims_sent() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let blocker = actix_web::rt::spawn({
        let url = a.at("/block");
        async move { send(&url, None, None, Some("{}")).await }
    });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Another server finds the lease lapsed and gives it its grace.
    let graced = send(&b.at("/charge"), None, Some(&key), Some("{}")).await;
    graced.assert_problem(409);
    let (first, _) = (first.await.unwrap(), blocker.await);
    first.assert_problem(503);
    // The late claim released what it took: the same request runs, once.
    let duplicate = send(&b.at("/charge"), None, Some(&key), Some("{}")).await;
    assert_eq!(duplicate.status.as_u16(), 201, "the key is free to run: {duplicate:?}");
    assert_eq!(hits.get(), 1, "the late claim ran the handler on a lease that had ended");
}

#[actix_web::test]
async fn a_renewal_batch_that_panics_is_retried_not_abandoned() {
    let store: Arc<dyn Store> = Arc::new(FaultyStore::default().first_renewals_panic(1));
    let hits = web::Data::new(Counter::default());
    let (a, b) = two_servers(&store, &hits);
    let key = fresh_key();
    let first = actix_web::rt::spawn({
        let (url, key) = (a.at("/slow-charge"), key.clone());
        async move { send(&url, None, Some(&key), Some("{}")).await }
    });
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let duplicate = send(&b.at("/slow-charge"), None, Some(&key), Some("{}")).await;
    let first = first.await.unwrap();
    assert_eq!(duplicate.status.as_u16(), 409, "the lease was kept after one failed batch: {duplicate:?}");
    assert_eq!(first.status.as_u16(), 201);
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn a_nearly_full_memory_store_refuses_claims_rather_than_strand_a_charge() {
    // Room for about one in-flight record at a time: every request either
    // runs and is kept, or is refused before running (503); none is left
    // in flight with nowhere to keep its response.
    let store: Arc<dyn Store> = Arc::new(idem_runtime::MemoryStore::with_limits(1000, 1500));
    let hits = web::Data::new(Counter::default());
    let (a, _b) = two_servers(&store, &hits);
    let mut kept = Vec::new();
    for _ in 0..8 {
        let key = fresh_key();
        let reply = send(&a.at("/charge"), None, Some(&key), Some("{}")).await;
        match reply.status.as_u16() {
            201 => kept.push(key),
            503 => {}
            other => panic!("neither kept nor refused: {other} {reply:?}"),
        }
    }
    assert!(!kept.is_empty() && kept.len() < 8, "{} of 8 kept", kept.len());
    for key in &kept {
        let replay = send(&a.at("/charge"), None, Some(key), Some("{}")).await;
        assert_eq!(replay.replayed.as_deref(), Some("true"), "{replay:?}");
    }
    assert_eq!(hits.get(), kept.len());
}
