//! Every row of §5 of the behaviour contract (`docs/contract.md`): the responses the runtime produces itself.

use std::time::Duration;

use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use bytes::Bytes;
use idem_runtime::{Idem, idempotent};
use idem_tests::counter::Counter;
use idem_tests::faults::FaultyStore;
use idem_tests::http::{fresh_key, post_with, send};
use idem_tests::orders::{Calls, TEST_STORE_TIMEOUT, memory_idem, routes, user_header};
use idem_tests::server::TestServer;
use serde_json::{Value, json};

type Request = actix_http::Request;

async fn app(
    idem: Option<Idem>,
    calls: &web::Data<Calls>,
) -> impl Service<Request, Response = ServiceResponse, Error = actix_web::Error> {
    let mut app = App::new().configure(routes(calls.clone()));
    if let Some(idem) = idem {
        app = app.app_data(idem);
    }
    test::init_service(app).await
}

fn order(key: Option<&str>, user: Option<&str>, body: Value) -> TestRequest {
    let mut req = TestRequest::post().uri("/orders").set_json(body);
    if let Some(key) = key {
        req = req.insert_header(("idempotency-key", key));
    }
    if let Some(user) = user {
        req = req.insert_header(("x-user-id", user));
    }
    req
}

/// Status, content type and parsed body of a problem response.
async fn problem(response: ServiceResponse) -> (StatusCode, Value) {
    let status = response.status();
    let content_type = response.headers().get("content-type").cloned();
    assert_eq!(content_type.as_ref().map(|v| v.to_str().unwrap()), Some("application/problem+json"));
    let body: Value = test::read_body_json(response).await;
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()), "{body}");
    assert!(body["detail"].as_str().is_some_and(|t| !t.is_empty()), "{body}");
    (status, body)
}

#[actix_web::test]
async fn missing_key_is_400() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let response = test::call_service(&app, order(None, Some("alice"), json!({})).to_request()).await;
    let (status, body) = problem(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["type"], "urn:idem:problem:missing-key");
    assert_eq!(calls.orders.get(), 0);
}

#[actix_web::test]
async fn malformed_repeated_or_long_keys_are_400() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let long = "k".repeat(256);
    for key in ["\"unterminated", "has space", "\"bad\\escape\"", "\"\"", long.as_str()] {
        let response = test::call_service(&app, order(Some(key), Some("alice"), json!({})).to_request()).await;
        let (status, body) = problem(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}");
        assert_eq!(body["type"], "urn:idem:problem:invalid-key", "{key}");
    }
    let repeated = order(Some("a"), Some("alice"), json!({})).append_header(("idempotency-key", "b"));
    let (status, _) = problem(test::call_service(&app, repeated.to_request()).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(calls.orders.get(), 0);
}

#[actix_web::test]
async fn quoted_and_bare_keys_are_the_same_key() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let first = test::call_service(&app, order(Some("\"k-1\""), Some("alice"), json!({"a": 1})).to_request()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let retry = test::call_service(&app, order(Some("k-1"), Some("alice"), json!({"a": 1})).to_request()).await;
    assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn parameters_after_a_quoted_key_are_ignored_over_http() {
    let calls = web::Data::new(Calls::default());
    let server = TestServer::start(memory_idem(), routes(calls.clone()));
    let (url, body) = (server.at("/orders"), Some(r#"{"a":1}"#));
    let first = send(&url, Some("alice"), Some(r#""k-1";v=1"#), body).await;
    assert_eq!((first.status, first.replayed.as_deref()), (StatusCode::CREATED, None), "{first:?}");
    for same in ["k-1", r#""k-1""#, r#""k-1"; a; b=?0"#] {
        let retry = send(&url, Some("alice"), Some(same), body).await;
        assert_eq!((retry.replayed.as_deref(), &retry.body), (Some("true"), &first.body), "{same}");
    }
    for malformed in [r#""k-1";A=1"#, r#""k-1";"#, r#""k-1" ;a"#, "k-1;v=1"] {
        let reply = send(&url, Some("alice"), Some(malformed), body).await;
        assert_eq!(reply.assert_problem(400)["type"], "urn:idem:problem:invalid-key", "{malformed}");
    }
    let bare = send(&url, Some("alice"), Some("k-1;v=1"), body).await.assert_problem(400);
    assert!(bare["detail"].as_str().unwrap_or_default().contains("quote the key"), "{bare}");
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn missing_subject_is_401() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let response = test::call_service(&app, order(Some("k"), None, json!({})).to_request()).await;
    let (status, body) = problem(response).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["type"], "urn:idem:problem:missing-subject");
    assert_eq!(calls.orders.get(), 0);
}

#[actix_web::test]
async fn body_over_the_limit_is_413_and_nothing_is_kept() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem().body_limit(64)), &calls).await;
    let big = json!({ "note": "x".repeat(100) });
    let response = test::call_service(&app, order(Some("k"), Some("alice"), big).to_request()).await;
    let (status, body) = problem(response).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["detail"].as_str().unwrap().contains("64 bytes"), "{body}");
    // The key is still free: a request within the limit runs.
    let small = test::call_service(&app, order(Some("k"), Some("alice"), json!({"a": 1})).to_request()).await;
    assert_eq!(small.status(), StatusCode::CREATED);
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn key_reused_for_another_request_is_422() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let first = test::call_service(&app, order(Some("k"), Some("alice"), json!({"amount": 1})).to_request()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let other = test::call_service(&app, order(Some("k"), Some("alice"), json!({"amount": 2})).to_request()).await;
    let (status, body) = problem(other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["type"], "urn:idem:problem:key-reused");
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn same_request_in_flight_is_409_with_retry_after() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let slow = |key| {
        TestRequest::post()
            .uri("/orders?delay_ms=400")
            .insert_header(("idempotency-key", key))
            .insert_header(("x-user-id", "alice"))
            .set_json(json!({"a": 1}))
            .to_request()
    };
    let first = test::call_service(&app, slow("k"));
    let second = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        test::call_service(&app, slow("k")).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.status(), StatusCode::CREATED);
    let retry_after = second.headers().get("retry-after").cloned().expect("Retry-After");
    let seconds: u64 = retry_after.to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&seconds), "lock_ttl is 2s: {seconds}");
    let (status, body) = problem(second).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["type"], "urn:idem:problem:in-flight");
    assert_eq!(calls.orders.get(), 1);
}

#[actix_web::test]
async fn store_failure_before_execution_is_503_and_the_handler_does_not_run() {
    let calls = web::Data::new(Calls::default());
    for idem in [
        Idem::new(FaultyStore::down()).subject(user_header).store_timeout(TEST_STORE_TIMEOUT),
        Idem::new(FaultyStore::hanging()).subject(user_header).store_timeout(Duration::from_millis(200)),
    ] {
        let app = app(Some(idem), &calls).await;
        let response = test::call_service(&app, order(Some("k"), Some("alice"), json!({})).to_request()).await;
        assert!(response.headers().contains_key("retry-after"));
        let (status, body) = problem(response).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["type"], "urn:idem:problem:store-unavailable");
        let detail = body["detail"].as_str().unwrap();
        assert!(!detail.contains("refused") && !detail.contains("down"), "store internals stay in the logs: {detail}");
    }
    assert_eq!(calls.orders.get(), 0);
}

#[actix_web::test]
async fn missing_configuration_is_500_naming_the_setup() {
    let calls = web::Data::new(Calls::default());
    let app = app(None, &calls).await;
    let response = test::call_service(&app, order(Some("k"), Some("alice"), json!({})).to_request()).await;
    let (status, body) = problem(response).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["type"], "urn:idem:problem:not-configured");
    assert!(body["detail"].as_str().unwrap().contains("Idem"), "{body}");
    assert_eq!(calls.orders.get(), 0);
}

#[actix_web::test]
async fn replay_returns_the_stored_response_marked_replayed() {
    let calls = web::Data::new(Calls::default());
    let app = app(Some(memory_idem()), &calls).await;
    let first = test::call_service(&app, order(Some("k"), Some("alice"), json!({"a": 1})).to_request()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    assert!(first.headers().contains_key("set-cookie"), "the first client gets every header");
    let first_location = first.headers().get("location").cloned();
    let first_body = test::read_body(first).await;
    for _ in 0..2 {
        let retry = test::call_service(&app, order(Some("k"), Some("alice"), json!({"a": 1})).to_request()).await;
        assert_eq!(retry.status(), StatusCode::CREATED);
        assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
        assert_eq!(retry.headers().get("location").cloned(), first_location);
        let multi: Vec<_> = retry.headers().get_all("x-multi").map(|v| v.to_str().unwrap().to_owned()).collect();
        assert_eq!(multi, ["one", "two"], "multi-valued headers keep every value in order");
        assert!(!retry.headers().contains_key("set-cookie"), "Set-Cookie is not replayed by default");
        assert_eq!(test::read_body(retry).await, first_body);
    }
    assert_eq!(calls.orders.get(), 1);
}

/// Takes the body as bytes, whatever they are: only the runtime refuses.
#[idempotent]
#[post("/notes")]
async fn note(hits: web::Data<Counter>, body: Bytes) -> HttpResponse {
    HttpResponse::Created().body(format!("note {}: {} bytes", hits.next(), body.len()))
}

/// CRC-32 (IEEE), as gzip's trailer needs it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0_u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// `data` gzip-encoded, as one stored deflate block: a body any gzip
/// decoder reads back (`gzip -d` does).
fn gzip(data: &[u8]) -> Vec<u8> {
    let len = u16::try_from(data.len()).expect("one stored block holds 64 KiB");
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1];
    out.extend(len.to_le_bytes());
    out.extend((!len).to_le_bytes());
    out.extend(data);
    out.extend(crc32(data).to_le_bytes());
    out.extend(u32::from(len).to_le_bytes());
    out
}

#[actix_web::test]
async fn a_compressed_body_is_415_before_any_claim() {
    assert_eq!(crc32(b"123456789"), 0xcbf4_3926, "the CRC-32 check value");
    let hits = web::Data::new(Counter::default());
    let shared = hits.clone();
    let server = TestServer::start(memory_idem(), move |config| {
        config.app_data(shared.clone()).service(note);
    });
    let (url, key, body) = (server.at("/notes"), fresh_key(), br#"{"text":"hello"}"#);
    let plain = [("x-user-id", "alice"), ("idempotency-key", key.as_str()), ("content-type", "application/json")];
    let encoded = |coding| {
        let mut headers = plain.to_vec();
        headers.push(("content-encoding", coding));
        headers
    };
    for coding in ["gzip", "GZip", "identity, gzip", "br"] {
        let reply = post_with(&url, &encoded(coding), gzip(body)).await;
        let problem = reply.assert_problem(415);
        assert_eq!(problem["type"], "urn:idem:problem:unsupported-content-encoding", "{coding}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("Content-Encoding"), "{coding}: {detail}");
    }
    assert_eq!(hits.get(), 0, "nothing executed");
    // Nothing was claimed or stored: the same key without an encoding runs.
    let first = post_with(&url, &plain, &body[..]).await;
    assert_eq!((first.status, first.replayed.as_deref()), (StatusCode::CREATED, None), "{first:?}");
    assert_eq!(hits.get(), 1);
    // `identity` is no encoding at all: the same request, replayed.
    let identity = post_with(&url, &encoded("identity"), &body[..]).await;
    assert_eq!((identity.replayed.as_deref(), &identity.body), (Some("true"), &first.body));
    assert_eq!(hits.get(), 1);
}
