//! Natural keys and fingerprint headers (`key = "path:.."`, `"json:/.."`,
//! `fingerprint_headers = [..]`), checked the same way on every store: an
//! app in process over the store given, its handlers counting executions.

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Idem, idempotent};

use crate::counter::Counter;
use crate::http::fresh_key;

#[idempotent(key = "path:order_id", scope = "route")]
#[post("/orders/{order_id}/capture")]
async fn capture(hits: web::Data<Counter>, order_id: web::Path<String>, body: String) -> HttpResponse {
    let n = hits.next();
    HttpResponse::Created().body(format!("capture {order_id} #{n}: {body}"))
}

#[idempotent(key = "json:/id", scope = "global")]
#[post("/events")]
async fn event(hits: web::Data<Counter>, body: web::Json<serde_json::Value>) -> HttpResponse {
    let n = hits.next();
    HttpResponse::Ok().body(format!("event #{n}: {}", body["type"]))
}

#[idempotent(key = "json:/data/object/id", scope = "global", required = false)]
#[post("/optional")]
async fn optional(hits: web::Data<Counter>) -> HttpResponse {
    let n = hits.next();
    HttpResponse::Ok().body(format!("optional #{n}"))
}

#[idempotent(scope = "route", fingerprint_headers = ["x-account-id"])]
#[post("/transfers")]
async fn transfer(hits: web::Data<Counter>) -> HttpResponse {
    let n = hits.next();
    HttpResponse::Created().body(format!("transfer #{n}"))
}

#[idempotent(key = "path:orderid", scope = "route")]
#[post("/misnamed/{order_id}")]
async fn misnamed(hits: web::Data<Counter>) -> HttpResponse {
    hits.next();
    HttpResponse::Ok().finish()
}

/// Status, whether replayed, and body.
async fn send<S, B>(app: &S, request: TestRequest) -> (StatusCode, bool, String)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let response = call_service(app, request.to_request()).await;
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = String::from_utf8_lossy(&read_body(response).await).into_owned();
    (status, replayed, body)
}

fn json(uri: &str, body: &str) -> TestRequest {
    TestRequest::post().uri(uri).insert_header(("content-type", "application/json")).set_payload(body.to_owned())
}

/// Runs every check on `idem`'s store.
pub async fn assert_natural_keys(idem: Idem) {
    let hits = web::Data::new(Counter::default());
    let app = init_service(
        App::new()
            .app_data(idem)
            .app_data(hits.clone())
            .service(capture)
            .service(event)
            .service(optional)
            .service(transfer)
            .service(misnamed),
    )
    .await;
    // Ids of this run only: the Redis and Postgres stores outlive it.
    let run = fresh_key();

    // The key from the path: the same order captured twice runs once.
    let order = format!("/orders/o-{run}/capture");
    let first = send(&app, TestRequest::post().uri(&order).set_payload("full")).await;
    assert_eq!((first.0, first.1), (StatusCode::CREATED, false), "{first:?}");
    let again = send(&app, TestRequest::post().uri(&order).set_payload("full")).await;
    assert_eq!(again, (StatusCode::CREATED, true, first.2.clone()), "a retry replays");
    let other = send(&app, TestRequest::post().uri(&order).set_payload("partial")).await;
    assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY, "another body for the same order: {other:?}");
    let next = send(&app, TestRequest::post().uri(&format!("/orders/p-{run}/capture")).set_payload("full")).await;
    assert_eq!((next.0, next.1), (StatusCode::CREATED, false), "another order runs: {next:?}");
    assert_eq!(hits.get(), 2);
    // One id however it is percent-encoded (as `web::Path` decodes it):
    // never a second capture; another spelling of the path is 422.
    let plain = format!("/orders/a+b{run}/capture");
    let first = send(&app, TestRequest::post().uri(&plain).set_payload("full")).await;
    assert_eq!((first.0, first.1), (StatusCode::CREATED, false), "{first:?}");
    for spelling in [format!("/orders/a%2Bb{run}/capture"), format!("/orders/a%2bb{run}/capture")] {
        let other = send(&app, TestRequest::post().uri(&spelling).set_payload("full")).await;
        assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY, "{spelling}: {other:?}");
    }
    assert_eq!(hits.get(), 3);

    // The key from the body: an event delivered again runs once.
    let delivery = format!(r#"{{"id":"evt_{run}","type":"charge.refunded"}}"#);
    let first = send(&app, json("/events", &delivery)).await;
    assert_eq!((first.0, first.1), (StatusCode::OK, false), "{first:?}");
    // Re-serialized with other whitespace and member order: the same event.
    let reordered = format!(r#"{{ "type": "charge.refunded", "id": "evt_{run}" }}"#);
    let again = send(&app, json("/events", &reordered)).await;
    assert_eq!(again, (StatusCode::OK, true, first.2.clone()), "a redelivery replays");
    let forged = format!(r#"{{"id":"evt_{run}","type":"charge.succeeded"}}"#);
    let other = send(&app, json("/events", &forged)).await;
    assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY, "the same id, another event: {other:?}");
    assert_eq!(hits.get(), 4);
    let numeric = format!(r#"{{"id":{},"type":"x"}}"#, u64::from_str_radix(&run[..12], 16).unwrap_or(7));
    let first = send(&app, json("/events", &numeric)).await;
    let again = send(&app, json("/events", &numeric)).await;
    assert_eq!((first.0, first.1, again.1), (StatusCode::OK, false, true), "an integer id is a key");
    assert_eq!(hits.get(), 5);
    for (body, status, what) in [
        (r#"{"type":"x"}"#, StatusCode::BAD_REQUEST, "no id"),
        (r#"{"id":null}"#, StatusCode::BAD_REQUEST, "a null id"),
        (r#"{"id":{"nested":1}}"#, StatusCode::BAD_REQUEST, "an object"),
        (r#"{"id":[1,2]}"#, StatusCode::BAD_REQUEST, "an array"),
        (r#"{"id":1.5}"#, StatusCode::BAD_REQUEST, "a fraction"),
        (r#"{"id":true}"#, StatusCode::BAD_REQUEST, "a bool"),
        (r#"{"id":"evt_a","id":"evt_b"}"#, StatusCode::BAD_REQUEST, "the id twice"),
        (r#"{"id":"two words"}"#, StatusCode::BAD_REQUEST, "a space"),
        ("not json", StatusCode::BAD_REQUEST, "not JSON"),
    ] {
        let (got, _, detail) = send(&app, json("/events", body)).await;
        assert_eq!(got, status, "{what}: {detail}");
        assert!(detail.contains("/id"), "the problem names the pointer ({what}): {detail}");
    }
    assert_eq!(hits.get(), 5, "a refused key runs nothing");

    // Not required: no id runs without idempotency, an id deduplicates.
    let keyless = send(&app, json("/optional", r#"{"data":{}}"#)).await;
    assert_eq!((keyless.0, keyless.1), (StatusCode::OK, false), "{keyless:?}");
    let empty = send(&app, TestRequest::post().uri("/optional")).await;
    assert_eq!((empty.0, empty.1), (StatusCode::OK, false), "an empty body has no key: {empty:?}");
    let with_id = format!(r#"{{"data":{{"object":{{"id":"ch_{run}"}}}}}}"#);
    let first = send(&app, json("/optional", &with_id)).await;
    let again = send(&app, json("/optional", &with_id)).await;
    assert_eq!((first.1, again.1), (false, true), "{first:?} {again:?}");
    assert_eq!(hits.get(), 8);

    // Fingerprint headers: the same key and body for another account is
    // another request.
    let key = fresh_key();
    let transfer_for = |account: Option<&str>| {
        let request = TestRequest::post().uri("/transfers").insert_header(("idempotency-key", key.clone()));
        match account {
            Some(account) => request.insert_header(("x-account-id", account.to_owned())).set_payload("100"),
            None => request.set_payload("100"),
        }
    };
    let first = send(&app, transfer_for(Some("acct_a"))).await;
    assert_eq!((first.0, first.1), (StatusCode::CREATED, false), "{first:?}");
    for (account, what) in [(Some("acct_b"), "another account"), (None, "no account"), (Some(""), "an empty account")] {
        let other = send(&app, transfer_for(account)).await;
        assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {other:?}");
    }
    let again = send(&app, transfer_for(Some("acct_a"))).await;
    assert_eq!(again, (StatusCode::CREATED, true, first.2), "the same account replays");
    assert_eq!(hits.get(), 9);

    // A path key the pattern does not have is the route's fault: 500.
    let (status, _, detail) = send(&app, TestRequest::post().uri("/misnamed/o-1")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{detail}");
    assert!(detail.contains("/misnamed/{order_id}") && detail.contains("`orderid`"), "{detail}");
    assert_eq!(hits.get(), 9);
}
