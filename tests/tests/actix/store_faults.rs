//! Store faults while a handler runs: a blip in renewals must not let the
//! lease lapse, and a failed completion is retried.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Idem, idempotent};
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;

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
    let app = test::init_service(App::new().app_data(Idem::new(store)).app_data(started.clone()).service(slow)).await;
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
