//! The least (informational, not an anchor of SPEC 12): less than any
//! idempotency layer that keeps records can do per request, written by hand
//! around the same handler, to show how far from the bare handler the
//! cheapest conceivable layer lands on this machine.
//!
//! It does less than SPEC 4 asks, in every step, so no implementation of
//! the contract can be cheaper:
//! - the key is the header's bytes as they are (no sf-string or token
//!   rules, no length check);
//! - the fingerprint is SHA-256 over the raw body alone (no canonical
//!   JSON, no method, path, query or media type);
//! - the records live in a map of the worker thread's own: no lock, and a
//!   retry that reaches another worker is not recognized (a real store is
//!   shared by every worker);
//! - the response's bytes are kept by reference, not copied; no headers
//!   but the content type, no `Idempotent-Replayed`, no storage key,
//!   lease, fencing token, expiry, bound, task or metrics.
//!
//! It still runs the handler's own extractor before the claim, on a
//! replay too, as the handler without the attribute does on every request.

use std::cell::RefCell;
use std::collections::HashMap;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, HttpResponse, post, web};
use sha2::{Digest, Sha256};

use crate::order::{NewOrder, create, created};

/// A key's record: the body's hash, and its response once done.
type Record = ([u8; 32], Option<web::Bytes>);

thread_local! {
    static RECORDS: RefCell<HashMap<Vec<u8>, Record>> = RefCell::new(HashMap::new());
}

/// What a claim found: `None` for a new key.
enum Found {
    Replay(web::Bytes),
    Refused,
}

fn claim(key: &[u8], hash: [u8; 32]) -> Option<Found> {
    RECORDS.with_borrow_mut(|records| match records.get(key) {
        None => {
            records.insert(key.to_vec(), (hash, None));
            None
        }
        Some((kept, Some(body))) if *kept == hash => Some(Found::Replay(body.clone())),
        // Another body (422), or a duplicate in flight (409): either way not run.
        Some(_) => Some(Found::Refused),
    })
}

/// The order handler under the least idempotency.
#[post("/orders")]
pub async fn least(req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let Some(key) = req.headers().get("idempotency-key").map(|value| value.as_bytes()) else {
        return HttpResponse::BadRequest().finish();
    };
    let hash: [u8; 32] = Sha256::digest(&body).into();
    let order = match web::Json::<NewOrder>::from_request(&req, &mut Payload::from(body)).await {
        Ok(order) => order,
        Err(error) => return error.error_response(),
    };
    match claim(key, hash) {
        None => {}
        Some(Found::Replay(body)) => return created(body),
        Some(Found::Refused) => return HttpResponse::Conflict().finish(),
    }
    let body = web::Bytes::from(create(&order));
    RECORDS.with_borrow_mut(|records| {
        if let Some(record) = records.get_mut(key) {
            record.1 = Some(body.clone());
        }
    });
    created(body)
}

#[cfg(test)]
mod tests {
    use actix_web::http::StatusCode;
    use actix_web::test::{self, TestRequest};
    use actix_web::{App, web};

    const ORDER: &str = r#"{"customer_id":"c","amount_cents":1,"currency":"EUR","lines":[]}"#;

    #[actix_web::test]
    async fn the_least_replays_the_same_body_and_refuses_another() {
        let app = test::init_service(App::new().service(web::scope("/least").service(super::least))).await;
        let send = |body: &'static str| {
            TestRequest::post()
                .uri("/least/orders")
                .insert_header(("content-type", "application/json"))
                .insert_header(("idempotency-key", "least-test"))
                .set_payload(body)
                .to_request()
        };
        let first = test::call_service(&app, send(ORDER)).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let created = test::read_body(first).await;
        let again = test::call_service(&app, send(ORDER)).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(test::read_body(again).await, created);
        let other =
            test::call_service(&app, send(r#"{"customer_id":"d","amount_cents":1,"currency":"EUR","lines":[]}"#)).await;
        assert_eq!(other.status(), StatusCode::CONFLICT);
    }
}
