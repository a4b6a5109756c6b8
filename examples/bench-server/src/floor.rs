//! The floor (informational, not an anchor of SPEC 12): the least an
//! in-process idempotency layer can do per request and still do what SPEC
//! 4 asks of every request, written by hand around the same handler.
//!
//! It reads the key header as it is, fingerprints the request with the
//! runtime's own [`Fingerprint::of`] (SPEC 4: canonical JSON and SHA-256),
//! claims the key in one map shared by the workers (one lock), runs the
//! handler and keeps its body. A replay with the same fingerprint gets the
//! body, another request 422, a duplicate in flight 409. Nothing else:
//! no key rules, no storage key, no lease, no fencing token, no expiry, no
//! bound, no task that outlives the client, no headers kept, no metrics.
//! As SPEC 4 orders (step 5 before step 6), the handler's extractor (the
//! JSON body) runs before the claim, on a replay too. What `/memory` costs
//! beyond this is what the runtime's other promises cost; what this costs
//! against `/bare` is out of reach of any implementation of SPEC 4.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, post, web};
use idem_runtime::store::{Fingerprint, RequestParts};

use crate::order::{NewOrder, create, created};

/// A key's record: the request's fingerprint, and its response body once
/// the handler is done.
struct Record {
    fingerprint: Fingerprint,
    body: Option<web::Bytes>,
}

static RECORDS: LazyLock<Mutex<HashMap<String, Record>>> = LazyLock::new(Mutex::default);

/// What a claim found.
enum Claimed {
    New,
    Replay(web::Bytes),
    InFlight,
    Mismatch,
}

fn claim(key: &str, fingerprint: Fingerprint) -> Claimed {
    let mut records = RECORDS.lock().unwrap_or_else(PoisonError::into_inner);
    match records.get(key) {
        None => {
            records.insert(key.to_owned(), Record { fingerprint, body: None });
            Claimed::New
        }
        Some(record) if record.fingerprint != fingerprint => Claimed::Mismatch,
        Some(Record { body: Some(body), .. }) => Claimed::Replay(body.clone()),
        Some(Record { body: None, .. }) => Claimed::InFlight,
    }
}

fn complete(key: &str, body: web::Bytes) {
    if let Some(record) = RECORDS.lock().unwrap_or_else(PoisonError::into_inner).get_mut(key) {
        record.body = Some(body);
    }
}

/// The order handler under the floor's idempotency.
#[post("/orders")]
pub async fn floor(req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let Some(key) = req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return HttpResponse::BadRequest().finish();
    };
    let fingerprint = Fingerprint::of(&RequestParts {
        method: req.method().as_str(),
        path: req.path(),
        query: req.query_string(),
        headers: &[],
        content_type: req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
        body: &body,
    });
    // SPEC 4 step 5: the handler's extractor, before the claim.
    let Ok(order) = serde_json::from_slice::<NewOrder>(&body) else {
        return HttpResponse::BadRequest().finish();
    };
    match claim(key, fingerprint) {
        Claimed::New => {}
        Claimed::Replay(stored) => {
            let mut response = created(stored);
            response
                .headers_mut()
                .insert(HeaderName::from_static("idempotent-replayed"), HeaderValue::from_static("true"));
            return response;
        }
        Claimed::InFlight => return HttpResponse::Conflict().finish(),
        Claimed::Mismatch => return HttpResponse::UnprocessableEntity().finish(),
    }
    let response = web::Bytes::from(create(&order));
    complete(key, response.clone());
    created(response)
}

#[cfg(test)]
mod tests {
    use actix_web::http::StatusCode;
    use actix_web::test::{self, TestRequest};
    use actix_web::{App, web};

    const ORDER: &str = r#"{"customer_id":"c","amount_cents":1,"currency":"EUR","lines":[]}"#;

    #[actix_web::test]
    async fn the_floor_replays_the_same_request_and_refuses_another() {
        let app = test::init_service(App::new().service(web::scope("/floor").service(super::floor))).await;
        let send = |body: &'static str| {
            TestRequest::post()
                .uri("/floor/orders")
                .insert_header(("content-type", "application/json"))
                .insert_header(("idempotency-key", "floor-test"))
                .set_payload(body)
                .to_request()
        };
        let first = test::call_service(&app, send(ORDER)).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get("idempotent-replayed").is_none());
        let created = test::read_body(first).await;
        // Re-serialized with other whitespace: the same request (SPEC 4).
        let again = test::call_service(
            &app,
            send(r#"{ "lines": [], "currency": "EUR", "amount_cents": 1, "customer_id": "c" }"#),
        )
        .await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(again.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
        assert_eq!(test::read_body(again).await, created);
        let other =
            test::call_service(&app, send(r#"{"customer_id":"d","amount_cents":1,"currency":"EUR","lines":[]}"#)).await;
        assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    }
}
