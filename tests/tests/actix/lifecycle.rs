//! Server errors, panics, optional keys and the registration forms.

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, Responder, post, web};
use idem_runtime::{Idem, MarkRetryable, MemoryStore, Retryable, ServerErrorPolicy, idempotent};
use idem_tests::counter::Counter;
use idem_tests::orders::TEST_STORE_TIMEOUT;

/// Fails with 503 on its first call, then succeeds.
#[idempotent(scope = "route")]
#[post("/flaky")]
async fn flaky(hits: web::Data<Counter>) -> HttpResponse {
    match hits.next() {
        1 => HttpResponse::ServiceUnavailable().body("try again"),
        n => HttpResponse::Created().body(format!("created on call {n}")),
    }
}

/// Says "nothing happened" with a retryable 503 on its first call, then
/// succeeds; the error form marks it through `MarkRetryable`.
#[idempotent(scope = "route")]
#[post("/retryable")]
async fn retryable(hits: web::Data<Counter>) -> Result<HttpResponse, ProviderDown> {
    match hits.next() {
        1 => Err(ProviderDown),
        n => Ok(HttpResponse::Created().body(format!("created on call {n}"))),
    }
}

/// The same through the `Retryable` responder.
#[idempotent(scope = "route")]
#[post("/retryable-responder")]
async fn retryable_responder(hits: web::Data<Counter>) -> impl Responder {
    match hits.next() {
        1 => actix_web::Either::Left(Retryable(HttpResponse::ServiceUnavailable().body("provider down"))),
        n => actix_web::Either::Right(HttpResponse::Created().body(format!("created on call {n}"))),
    }
}

/// An error type that knows nothing happened.
#[derive(Debug)]
struct ProviderDown;

impl std::fmt::Display for ProviderDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("payment provider unavailable, nothing was charged")
    }
}

impl actix_web::ResponseError for ProviderDown {
    fn error_response(&self) -> HttpResponse {
        HttpResponse::ServiceUnavailable().body(self.to_string()).retryable()
    }
}

/// Panics on its first call, then succeeds.
#[idempotent(scope = "route")]
#[post("/panicky")]
async fn panicky(hits: web::Data<Counter>) -> &'static str {
    if hits.next() == 1 {
        panic!("the first call fails");
    }
    "fine"
}

/// Runs without idempotency when the key is absent.
#[idempotent(scope = "route", required = false)]
#[post("/optional")]
async fn optional(hits: web::Data<Counter>, body: String) -> impl Responder {
    format!("{}:{body}", hits.next())
}

/// Registered with `.to()`, no route attribute; a custom header.
#[idempotent(scope = "route", header = "X-Request-Key")]
async fn by_resource(hits: web::Data<Counter>) -> Result<HttpResponse, actix_web::Error> {
    Ok(HttpResponse::Ok().body(format!("call {}", hits.next())))
}

fn req(uri: &str, key: Option<&str>) -> actix_http::Request {
    let mut req = TestRequest::post().uri(uri).set_payload("payload");
    if let Some(key) = key {
        req = req.insert_header(("idempotency-key", key));
    }
    req.to_request()
}

macro_rules! app {
    ($idem:expr, $hits:expr) => {
        test::init_service(
            App::new()
                .app_data($idem)
                .app_data($hits.clone())
                .service(flaky)
                .service(retryable)
                .service(retryable_responder)
                .service(panicky)
                .service(optional)
                .service(web::resource("/resource").route(web::post().to(by_resource)))
                .service(web::resource(["/multi", "/multi/{id}"]).route(web::post().to(by_resource))),
        )
        .await
    };
}

#[actix_web::test]
async fn server_errors_are_stored_and_replayed_by_default() {
    let hits = web::Data::new(Counter::default());
    let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT), hits);
    let first = test::call_service(&app, req("/flaky", Some("k"))).await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry = test::call_service(&app, req("/flaky", Some("k"))).await;
    assert_eq!(retry.status(), StatusCode::SERVICE_UNAVAILABLE, "a handler that failed half way may have charged");
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(retry).await, "try again");
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn every_server_error_is_released_under_the_release_policy() {
    let hits = web::Data::new(Counter::default());
    let idem =
        Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT).server_errors(ServerErrorPolicy::Release);
    let app = app!(idem, hits);
    let first = test::call_service(&app, req("/flaky", Some("k"))).await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry = test::call_service(&app, req("/flaky", Some("k"))).await;
    assert_eq!(retry.status(), StatusCode::CREATED, "the retry ran the handler again");
    assert_eq!(test::read_body(retry).await, "created on call 2");
    let replay = test::call_service(&app, req("/flaky", Some("k"))).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(hits.get(), 2);
}

#[actix_web::test]
async fn a_retryable_response_releases_the_key_for_the_same_request_only() {
    for route in ["/retryable", "/retryable-responder"] {
        let hits = web::Data::new(Counter::default());
        let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT), hits);
        let first = test::call_service(&app, req(route, Some("k"))).await;
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE, "{route}");
        assert!(first.headers().get("idempotent-replayed").is_none());
        // Another request with the released key is still refused.
        let other = TestRequest::post().uri(route).insert_header(("idempotency-key", "k")).set_payload("other");
        let other = test::call_service(&app, other.to_request()).await;
        assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY, "{route}: the tombstone keeps the fingerprint");
        let retry = test::call_service(&app, req(route, Some("k"))).await;
        assert_eq!(retry.status(), StatusCode::CREATED, "{route}: the same request runs again");
        assert_eq!(test::read_body(retry).await, "created on call 2");
        let replay = test::call_service(&app, req(route, Some("k"))).await;
        assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
        assert_eq!(hits.get(), 2, "{route}");
    }
}

#[actix_web::test]
async fn a_panic_is_stored_as_a_500_problem_and_replayed() {
    let hits = web::Data::new(Counter::default());
    let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT), hits);
    let first = test::call_service(&app, req("/panicky", Some("k"))).await;
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.headers().get("content-type").unwrap(), "application/problem+json");
    let first: serde_json::Value = test::read_body_json(first).await;
    assert_eq!(first["type"], "urn:idem:problem:handler-panicked");
    let retry = test::call_service(&app, req("/panicky", Some("k"))).await;
    assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    let retry: serde_json::Value = test::read_body_json(retry).await;
    assert_eq!(retry, first);
    assert_eq!(hits.get(), 1, "a panic half way may have had effects: never run again");
}

#[actix_web::test]
async fn optional_key_runs_plainly_without_one() {
    let hits = web::Data::new(Counter::default());
    let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT), hits);
    for expected in ["1:payload", "2:payload"] {
        let response = test::call_service(&app, req("/optional", None)).await;
        assert_eq!(test::read_body(response).await, expected);
    }
    let keyed = test::call_service(&app, req("/optional", Some("k"))).await;
    assert_eq!(test::read_body(keyed).await, "3:payload");
    let replay = test::call_service(&app, req("/optional", Some("k"))).await;
    assert_eq!(test::read_body(replay).await, "3:payload");
    assert_eq!(hits.get(), 3);
}

#[actix_web::test]
async fn resource_registration_and_custom_header_work() {
    let hits = web::Data::new(Counter::default());
    let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT), hits);
    let missing = test::call_service(&app, req("/resource", Some("k"))).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST, "the key must come in X-Request-Key");
    let keyed = || TestRequest::post().uri("/resource").insert_header(("x-request-key", "\"abc\"")).to_request();
    let first = test::call_service(&app, keyed()).await;
    assert_eq!(test::read_body(first).await, "call 1");
    let retry = test::call_service(&app, keyed()).await;
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(retry).await, "call 1");
    assert_eq!(hits.get(), 1);
}

/// actix-web names a resource's first pattern for every request it matches;
/// under `scope = "route"` each pattern must still be its own namespace, or
/// a key used on `/multi` is refused (another request's key) on `/multi/7`.
#[actix_web::test]
async fn each_pattern_of_a_resource_is_its_own_route() {
    let hits = web::Data::new(Counter::default());
    let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT), hits);
    let keyed = |uri: &str| TestRequest::post().uri(uri).insert_header(("x-request-key", "\"same\"")).to_request();
    let first = test::call_service(&app, keyed("/multi")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let other = test::call_service(&app, keyed("/multi/7")).await;
    assert_eq!(other.status(), StatusCode::OK, "the second pattern is another route");
    assert_eq!(test::read_body(other).await, "call 2");
    let replay = test::call_service(&app, keyed("/multi/7")).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(replay).await, "call 2");
    let other_value = test::call_service(&app, keyed("/multi/8")).await;
    assert_eq!(other_value.status(), StatusCode::UNPROCESSABLE_ENTITY, "same pattern, another request");
    assert_eq!(hits.get(), 2);
}

/// A default service behind a guarded resource: actix-web reports that
/// resource's pattern, but the route is `<unmatched>` for every path, so a
/// key reused on another path is refused, never run again.
#[actix_web::test]
async fn a_default_service_is_one_route_whatever_the_path() {
    let hits = web::Data::new(Counter::default());
    let app = test::init_service(
        App::new()
            .app_data(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT))
            .app_data(hits.clone())
            .service(web::resource("/items/{id}").guard(actix_web::guard::Get()).to(HttpResponse::Ok))
            .default_service(web::to(by_resource)),
    )
    .await;
    let keyed = |uri: &str| TestRequest::post().uri(uri).insert_header(("x-request-key", "\"k\"")).to_request();
    let first = test::call_service(&app, keyed("/items/1")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let other = test::call_service(&app, keyed("/items/2")).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY, "another path under the same key");
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn oversized_responses_are_not_replayed_nor_run_twice() {
    let hits = web::Data::new(Counter::default());
    let app = app!(Idem::new(MemoryStore::new()).store_timeout(TEST_STORE_TIMEOUT).response_limit(8), hits);
    let first = test::call_service(&app, req("/retryable", Some("k"))).await;
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE, "released, as retryable");
    let second = test::call_service(&app, req("/retryable", Some("k"))).await;
    assert_eq!(test::read_body(second).await, "created on call 2", "the client gets it whole");
    let retry = test::call_service(&app, req("/retryable", Some("k"))).await;
    assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: serde_json::Value = test::read_body_json(retry).await;
    assert_eq!(body["type"], "urn:idem:problem:response-not-stored");
    assert!(body["detail"].as_str().unwrap().contains("was processed"), "{body}");
    assert_eq!(hits.get(), 2);
}
