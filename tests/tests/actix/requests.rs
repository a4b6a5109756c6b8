//! What counts as "the same request", and the scopes of keys.

use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, put, web};
use idem_runtime::{Idem, MemoryStore, idempotent};
use idem_tests::counter::Counter;
use idem_tests::http::{fresh_key, post_with, send};
use idem_tests::orders::{Calls, memory_idem, routes};
use idem_tests::server::TestServer;
use serde_json::json;

type Request = actix_http::Request;

#[idempotent(scope = "route")]
#[post("/route-a")]
async fn route_a(hits: web::Data<Counter>) -> HttpResponse {
    HttpResponse::Ok().body(format!("a{}", hits.next()))
}

#[idempotent(scope = "route")]
#[post("/route-b")]
async fn route_b(hits: web::Data<Counter>) -> HttpResponse {
    HttpResponse::Ok().body(format!("b{}", hits.next()))
}

/// No `scope` argument: whatever the default is.
#[idempotent]
#[post("/default-scope")]
async fn default_scope(hits: web::Data<Counter>, body: String) -> HttpResponse {
    HttpResponse::Created().body(format!("call {} with {body}", hits.next()))
}

#[idempotent(scope = "global")]
#[post("/global-a")]
async fn global_a(hits: web::Data<Counter>) -> HttpResponse {
    HttpResponse::Ok().body(format!("ga{}", hits.next()))
}

#[idempotent(scope = "global")]
#[put("/global-a")]
async fn global_a_put(hits: web::Data<Counter>) -> HttpResponse {
    HttpResponse::Ok().body(format!("gp{}", hits.next()))
}

async fn app(
    calls: &web::Data<Calls>,
    hits: &web::Data<Counter>,
) -> impl Service<Request, Response = ServiceResponse, Error = actix_web::Error> {
    let app = App::new()
        .app_data(memory_idem())
        .app_data(hits.clone())
        .configure(routes(calls.clone()))
        .service(route_a)
        .service(route_b)
        .service(global_a)
        .service(global_a_put);
    test::init_service(app).await
}

fn post_raw(uri: &str, key: &str, user: &str, body: &'static str) -> Request {
    TestRequest::post()
        .uri(uri)
        .insert_header(("idempotency-key", key))
        .insert_header(("x-user-id", user))
        .insert_header(("content-type", "application/json"))
        .set_payload(body)
        .to_request()
}

#[actix_web::test]
async fn reserialized_json_is_the_same_request() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let first = test::call_service(
        &app,
        post_raw("/orders", "k", "alice", r#"{"amount":500,"currency":"EUR","tags":["a","b"]}"#),
    )
    .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let body = test::read_body(first).await;
    let reordered = "{\n  \"tags\": [ \"a\", \"b\" ],\n  \"currency\": \"EUR\",\n  \"amount\": 500\n}";
    let retry = test::call_service(&app, post_raw("/orders", "k", "alice", reordered)).await;
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(retry).await, body);
    // Array order and number spelling are significant.
    for other in
        [r#"{"amount":500,"currency":"EUR","tags":["b","a"]}"#, r#"{"amount":500.0,"currency":"EUR","tags":["a","b"]}"#]
    {
        let response = test::call_service(&app, post_raw("/orders", "k", "alice", other)).await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{other}");
    }
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn query_string_is_part_of_the_request() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let first = test::call_service(&app, post_raw("/orders?delay_ms=0", "k", "alice", "{}")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let other = test::call_service(&app, post_raw("/orders?delay_ms=1", "k", "alice", "{}")).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[actix_web::test]
async fn same_key_on_another_path_parameter_is_refused_not_replayed() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let pay_a = test::call_service(&app, post_raw("/orders/A/payments", "pay-1", "alice", "{}")).await;
    assert_eq!(pay_a.status(), StatusCode::CREATED);
    let pay_b = test::call_service(&app, post_raw("/orders/B/payments", "pay-1", "alice", "{}")).await;
    assert_eq!(pay_b.status(), StatusCode::UNPROCESSABLE_ENTITY, "B must never get A's payment");
    assert_eq!(calls.payments.get(), 1);
}

#[actix_web::test]
async fn user_scope_separates_subjects() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    for user in ["alice", "bob", "alice:x", "alice"] {
        let response = test::call_service(&app, post_raw("/orders", "shared", user, "{}")).await;
        assert!(response.status().is_success(), "{user}");
    }
    assert_eq!(calls.orders.get(), 3, "alice, bob and alice:x each ran once; alice's retry replayed");
}

#[actix_web::test]
async fn route_scope_separates_routes_but_not_users() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let a = test::call_service(&app, post_raw("/route-a", "k", "alice", "{}")).await;
    assert_eq!(test::read_body(a).await, "a1");
    let b = test::call_service(&app, post_raw("/route-b", "k", "alice", "{}")).await;
    assert_eq!(test::read_body(b).await, "b2", "another route, another key space");
    let a_bob = test::call_service(&app, post_raw("/route-a", "k", "bob", "{}")).await;
    assert_eq!(a_bob.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(a_bob).await, "a1", "route scope ignores the subject");
    assert_eq!(hits.get(), 2);
}

#[actix_web::test]
async fn global_scope_shares_the_key_across_routes() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let first = test::call_service(&app, post_raw("/global-a", "g", "alice", "{}")).await;
    assert_eq!(test::read_body(first).await, "ga1");
    // Same key, other method: a different request under the same global key.
    let put = TestRequest::put()
        .uri("/global-a")
        .insert_header(("idempotency-key", "g"))
        .insert_header(("content-type", "application/json"))
        .set_payload("{}")
        .to_request();
    assert_eq!(test::call_service(&app, put).await.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn extractor_failure_stores_nothing() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let bad = test::call_service(&app, post_raw("/orders", "k", "alice", "{not json")).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "actix's own Json error");
    let good = test::call_service(&app, post_raw("/orders", "k", "alice", r#"{"a":1}"#)).await;
    assert_eq!(good.status(), StatusCode::CREATED, "the key was never claimed");
    assert!(good.headers().get("idempotent-replayed").is_none());
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn set_cookie_can_be_replayed_when_configured() {
    let calls = web::Data::new(Calls::default());
    let idem = memory_idem().replay_header(actix_web::http::header::SET_COOKIE);
    let app = test::init_service(App::new().app_data(idem).configure(routes(calls.clone()))).await;
    let _ = test::call_service(&app, post_raw("/orders", "k", "alice", "{}")).await;
    let retry = test::call_service(&app, post_raw("/orders", "k", "alice", "{}")).await;
    assert_eq!(retry.headers().get("set-cookie").unwrap(), "session=abc");
    assert_eq!(json!(calls.orders.get()), json!(1));
}

/// A server with [`default_scope`] and `idem`.
fn default_scope_server(idem: Idem, hits: &web::Data<Counter>) -> TestServer {
    let hits = hits.clone();
    TestServer::start(idem, move |config| {
        config.app_data(hits.clone()).service(default_scope);
    })
}

#[actix_web::test]
async fn the_default_scope_never_gives_one_user_another_users_response() {
    let hits = web::Data::new(Counter::default());
    let server = default_scope_server(memory_idem(), &hits);
    let url = server.at("/default-scope");
    let (key, body) = (fresh_key(), r#"{"amount":500}"#);
    let alice = send(&url, Some("alice"), Some(&key), Some(body)).await;
    assert_eq!((alice.status, alice.replayed.as_deref()), (StatusCode::CREATED, None));
    // Bob sends alice's key and body: his own request runs.
    let bob = send(&url, Some("bob"), Some(&key), Some(body)).await;
    assert_eq!((bob.status, bob.replayed.as_deref()), (StatusCode::CREATED, None), "{bob:?}");
    assert_ne!(bob.body, alice.body, "bob must never receive alice's response");
    assert_eq!(hits.get(), 2, "each user's handler ran");
    // Each user's retry still replays that user's own response.
    for (user, first) in [("alice", &alice), ("bob", &bob)] {
        let retry = send(&url, Some(user), Some(&key), Some(body)).await;
        assert_eq!((retry.replayed.as_deref(), &retry.body), (Some("true"), &first.body), "{user}");
    }
    // The key belongs to a user: a request without one is refused.
    send(&url, None, Some(&key), Some(body)).await.assert_problem(401);
    assert_eq!(hits.get(), 2);
}

#[actix_web::test]
async fn the_default_scope_without_a_subject_resolver_is_500_naming_the_fix() {
    let hits = web::Data::new(Counter::default());
    let server = default_scope_server(Idem::new(MemoryStore::new()), &hits);
    let reply = send(&server.at("/default-scope"), Some("alice"), Some(&fresh_key()), Some("{}")).await;
    let problem = reply.assert_problem(500);
    assert_eq!(problem["type"], "urn:idem:problem:not-configured");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("Idem::subject"), "the detail names the fix: {detail}");
    assert!(detail.contains("/default-scope"), "and the route: {detail}");
    assert_eq!(hits.get(), 0);
}

#[actix_web::test]
async fn the_media_type_of_a_json_body_is_part_of_the_request() {
    let hits = web::Data::new(Counter::default());
    let server = default_scope_server(memory_idem(), &hits);
    let url = server.at("/default-scope");
    let key = fresh_key();
    let as_type =
        |content_type| [("x-user-id", "alice"), ("idempotency-key", key.as_str()), ("content-type", content_type)];
    let first = post_with(&url, &as_type("application/json"), r#"{"op":"add","amount":5}"#).await;
    assert_eq!(first.status, StatusCode::CREATED);
    // Parameters and case do not count; the JSON is canonicalized.
    let retry = post_with(&url, &as_type("Application/JSON; charset=utf-8"), r#"{ "amount": 5, "op": "add" }"#).await;
    assert_eq!((retry.replayed.as_deref(), &retry.body), (Some("true"), &first.body));
    // The same document as a merge patch is another request.
    let patch = post_with(&url, &as_type("application/merge-patch+json"), r#"{"op":"add","amount":5}"#).await;
    assert_eq!(patch.assert_problem(422)["type"], "urn:idem:problem:key-reused");
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn natural_keys_and_fingerprint_headers_on_memory() {
    idem_tests::natural_keys::assert_natural_keys(Idem::new(MemoryStore::new())).await;
}

#[actix_web::test]
async fn encrypted_records_on_memory() {
    let store = std::sync::Arc::new(MemoryStore::new());
    idem_tests::sealed_checks::assert_sealed_records(
        store,
        None::<fn(Vec<idem_runtime::store::StorageKey>) -> std::future::Ready<Vec<u8>>>,
    )
    .await;
}

#[actix_web::test]
async fn the_inbox_on_memory() {
    idem_tests::inbox_checks::assert_inbox(std::sync::Arc::new(MemoryStore::new())).await;
}

#[actix_web::test]
async fn operations_run_once_on_the_memory_store() {
    idem_tests::once_checks::assert_once(std::sync::Arc::new(MemoryStore::new())).await;
}

#[actix_web::test]
async fn the_inbox_holds_a_stopped_delivery_on_memory() {
    idem_tests::inbox_checks::assert_a_stopped_delivery_is_held(std::sync::Arc::new(MemoryStore::new())).await;
}

#[actix_web::test]
async fn the_inbox_completes_once_when_a_lease_is_lost() {
    let store = idem_tests::faults::FaultyStore::default()
        .renewals_fail_between(std::time::Duration::ZERO, std::time::Duration::from_secs(3));
    idem_tests::inbox_checks::assert_lease_loss_completes_once(std::sync::Arc::new(store)).await;
}

#[actix_web::test]
async fn the_memory_outbox_delivers_at_least_once() {
    use idem_runtime::outbox::MemoryOutbox;
    let outbox = MemoryOutbox::new().visibility(idem_tests::outbox_checks::VISIBILITY);
    let other = outbox.clone();
    idem_tests::outbox_checks::assert_transport(&outbox, &other, |event| {
        outbox.publish(event);
        std::future::ready(())
    })
    .await;
}

fn post_to_host(uri: &str, host: &str, key: &str) -> Request {
    TestRequest::post()
        .uri(uri)
        .insert_header(("host", host))
        .insert_header(("idempotency-key", key))
        .insert_header(("content-type", "application/json"))
        .set_payload("{}")
        .to_request()
}

#[actix_web::test]
async fn two_hosts_never_receive_each_others_response() {
    // Tenants told apart by host name, on a route-scoped key: the same key
    // and body sent to the second host is another request (422), never a
    // replay of the first tenant's response.
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let first = test::call_service(&app, post_to_host("/route-a", "acme.shop.example", "k")).await;
    assert_eq!(test::read_body(first).await, "a1");
    let other = test::call_service(&app, post_to_host("/route-a", "globex.shop.example", "k")).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY, "another tenant's key is refused, not replayed");
    // The host name counts without its case or port.
    let again = test::call_service(&app, post_to_host("/route-a", "ACME.shop.example:8443", "k")).await;
    assert_eq!(again.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(again).await, "a1");
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn the_host_can_be_left_out_for_a_service_reached_under_several_names() {
    let hits = web::Data::new(Counter::default());
    let idem = Idem::new(MemoryStore::new()).fingerprint_host(false);
    let app = test::init_service(App::new().app_data(idem).app_data(hits.clone()).service(route_a)).await;
    let first = test::call_service(&app, post_to_host("/route-a", "api.example", "k")).await;
    assert_eq!(test::read_body(first).await, "a1");
    let other = test::call_service(&app, post_to_host("/route-a", "api-eu.example", "k")).await;
    assert_eq!(other.headers().get("idempotent-replayed").unwrap(), "true", "the same request by another name");
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn a_record_kept_without_the_host_still_answers_its_request() {
    // Records kept by an earlier version (or with the host left out) have
    // no host in their fingerprint: a retry through a process that hashes
    // the host gets their replay, not 422; another request still gets 422.
    let hits = web::Data::new(Counter::default());
    let store: std::sync::Arc<dyn idem_runtime::store::Store> = std::sync::Arc::new(MemoryStore::new());
    let before = Idem::from_arc(std::sync::Arc::clone(&store)).fingerprint_host(false);
    let old = test::init_service(App::new().app_data(before).app_data(hits.clone()).service(route_a)).await;
    let first = test::call_service(&old, post_to_host("/route-a", "shop.example", "k")).await;
    assert_eq!(test::read_body(first).await, "a1");
    let after = Idem::from_arc(store);
    let new = test::init_service(App::new().app_data(after).app_data(hits.clone()).service(route_a)).await;
    let retry = test::call_service(&new, post_to_host("/route-a", "shop.example", "k")).await;
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(retry).await, "a1");
    let other = TestRequest::post()
        .uri("/route-a")
        .insert_header(("host", "shop.example"))
        .insert_header(("idempotency-key", "k"))
        .insert_header(("content-type", "application/json"))
        .set_payload(r#"{"other":true}"#)
        .to_request();
    assert_eq!(test::call_service(&new, other).await.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(hits.get(), 1);
}

#[actix_web::test]
async fn a_request_without_a_host_and_the_target_authority_never_pick_another_tenant() {
    let (calls, hits) = (web::Data::new(Calls::default()), web::Data::new(Counter::default()));
    let app = app(&calls, &hits).await;
    let first = test::call_service(&app, post_to_host("/route-a", "acme.shop.example", "k")).await;
    assert_eq!(test::read_body(first).await, "a1");
    // A request that names no host (HTTP/1.0 without `Host`) is a host of
    // its own: neither acme's replay nor a record any host could reach.
    let hostless = TestRequest::post()
        .uri("/route-a")
        .insert_header(("idempotency-key", "k"))
        .insert_header(("content-type", "application/json"))
        .set_payload("{}")
        .to_request();
    assert_eq!(test::call_service(&app, hostless).await.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // An absolute-form target naming acme with `Host: globex`: the host is
    // the one the application sees (`Host`), never the target's.
    let smuggled = TestRequest::post()
        .uri("http://acme.shop.example/route-a")
        .insert_header(("host", "globex.shop.example"))
        .insert_header(("idempotency-key", "k"))
        .insert_header(("content-type", "application/json"))
        .set_payload("{}")
        .to_request();
    assert_eq!(test::call_service(&app, smuggled).await.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(hits.get(), 1);
}
