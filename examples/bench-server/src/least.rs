//! The least (informational, not an anchor of §12 of the contract): less than any
//! idempotency layer that keeps records can do per request, written by hand
//! around the same handler, to show how far from the bare handler the
//! cheapest conceivable layer lands on this machine.
//!
//! It does less than §4 of the contract asks, in every step:
//! - the key is the header's bytes as they are (no sf-string or token
//!   rules, no length check, no scope);
//! - the body is the request's one chunk, not a copy (as the runtime's own
//!   buffering does);
//! - the fingerprint is SHA-256 over the raw body alone (no canonical
//!   JSON, no method, path, query or media type);
//! - the records live in a map of the worker thread's own, with a cheap
//!   hash: no lock, and a retry that reaches another worker is not
//!   recognized (a real store is shared by every worker); the key is copied
//!   once, into a box of its own, when its record is made (the memory store
//!   keeps a 32-byte digest inline instead, and pays a SHA-256 for it);
//! - the response's bytes are kept by reference, not copied; no headers
//!   but the content type, no `Idempotent-Replayed`, no storage key,
//!   lease, fencing token, expiry, bound, task or metrics.
//!
//! It still runs the handler's own extractor before the claim, on a
//! replay too, as the handler without the attribute does on every request.

use std::cell::RefCell;
use std::collections::HashMap;

use actix_web::dev::Payload;
use actix_web::web::{Bytes, BytesMut};
use actix_web::{FromRequest, HttpRequest, HttpResponse, post, web};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::order::{NewOrder, create, created};

/// A key's record: the body's hash, and its response once done.
type Record = ([u8; 32], Option<Bytes>);

thread_local! {
    static RECORDS: RefCell<HashMap<Box<[u8]>, Record, foldhash::fast::RandomState>> = RefCell::default();
}

/// What a claim found: `None` for a new key.
enum Found {
    Replay(Bytes),
    Refused,
}

fn claim(key: &[u8], hash: [u8; 32]) -> Option<Found> {
    RECORDS.with_borrow_mut(|records| match records.get(key) {
        None => {
            records.insert(key.into(), (hash, None));
            None
        }
        Some((kept, Some(body))) if *kept == hash => Some(Found::Replay(body.clone())),
        // Another body (422), or a duplicate in flight (409): either way not run.
        Some(_) => Some(Found::Refused),
    })
}

/// The body: its one chunk as it is, or the chunks gathered.
async fn body(mut payload: web::Payload) -> Result<Bytes, actix_web::Error> {
    let Some(first) = payload.next().await.transpose()? else { return Ok(Bytes::new()) };
    let Some(second) = payload.next().await.transpose()? else { return Ok(first) };
    let mut body = BytesMut::from(&first[..]);
    body.extend_from_slice(&second);
    while let Some(chunk) = payload.next().await.transpose()? {
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The order handler under the least idempotency.
#[post("/orders")]
pub async fn least(req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let Some(key) = req.headers().get("idempotency-key").map(|value| value.as_bytes()) else {
        return HttpResponse::BadRequest().finish();
    };
    let body = match body(payload).await {
        Ok(body) => body,
        Err(error) => return error.error_response(),
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
    let body = Bytes::from(create(&order));
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

    use crate::order::testing::{ORDER, post};

    #[actix_web::test]
    async fn the_least_replays_the_same_body_and_refuses_another() {
        let app = test::init_service(App::new().service(web::scope("/least").service(super::least))).await;
        let send = |key, body| post("/least/orders", key, body).to_request();
        let first = test::call_service(&app, send("least-test", ORDER)).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let created = test::read_body(first).await;
        // The same order again: the first response (its order id), not a new one.
        let again = test::call_service(&app, send("least-test", ORDER)).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(test::read_body(again).await, created);
        let other = r#"{"customer_id":"d","amount_cents":1,"currency":"EUR","lines":[]}"#;
        assert_eq!(test::call_service(&app, send("least-test", other)).await.status(), StatusCode::CONFLICT);
        // A body its extractor refuses keeps nothing: the key stays free.
        let bad = test::call_service(&app, send("least-bad", "{")).await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        let good = test::call_service(&app, send("least-bad", ORDER)).await;
        assert_eq!(good.status(), StatusCode::CREATED);
        assert_ne!(test::read_body(good).await, created);
        let keyless = TestRequest::post().uri("/least/orders").set_payload(ORDER).to_request();
        assert_eq!(test::call_service(&app, keyless).await.status(), StatusCode::BAD_REQUEST);
    }
}
