//! The floor (informational, not an anchor of §12 of the contract): about the least an
//! in-process idempotency layer can do per request and still do what §4 of the
//! contract asks of every request, written by hand around the same handler.
//!
//! It reads the key with the runtime's own key rules
//! ([`IdempotencyKey::parse`]: an sf-string or a token, 1 to 255 visible
//! characters), buffers the body, fingerprints the request with the
//! runtime's own [`Fingerprint::of`] (canonical JSON and SHA-256), runs the
//! handler's own extractor (`Json<NewOrder>`) over the buffered body before
//! the claim, on a replay too (§4 of the contract orders step 5 before step 6), claims
//! the key under its storage key ([`StorageKey::new`], scope `route`) in
//! one map shared by the workers (64 shards under a mutex each, as
//! `least`'s), runs the handler and keeps its status, content type and
//! body. A replay with the same
//! fingerprint gets them, another request 422, a duplicate in flight 409.
//!
//! Nothing else, so it is a little below a true floor: no
//! lease, no fencing token, no expiry, no bound, no task that outlives the
//! client, no other headers, no `Content-Encoding` check, no metrics. What
//! `/memory` costs beyond it is what the runtime's other promises cost (and
//! any waste); what it costs against `/bare` no implementation of §4 of the contract
//! can avoid.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use actix_web::body::MessageBody;
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use actix_web::{FromRequest, HttpRequest, HttpResponse, post, web};
use idem_runtime::store::{Fingerprint, IdempotencyKey, RequestParts, Scope, StorageKey};

use crate::order::{NewOrder, create, created};

/// A response as kept: status, content type and body.
#[derive(Clone)]
struct Kept {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: web::Bytes,
}

/// A key's record: the request's fingerprint, and its response once the
/// handler is done.
struct Record {
    fingerprint: Fingerprint,
    response: Option<Kept>,
}

/// Shards of the map (a power of two).
const SHARDS: usize = 64;

type Records = HashMap<StorageKey, Record, foldhash::fast::FixedState>;

static RECORDS: LazyLock<Vec<Mutex<Records>>> = LazyLock::new(|| (0..SHARDS).map(|_| Mutex::default()).collect());

/// The shard of `key`, picked by the first two hex digits of its hash tag
/// (half of a SHA-256).
fn shard(key: &StorageKey) -> MutexGuard<'static, Records> {
    let digit = |b: u8| usize::from(if b.is_ascii_digit() { b - b'0' } else { b.wrapping_sub(b'a') + 10 });
    let tag = key.hash_tag().as_bytes();
    let index = tag.get(1..3).map_or(0, |two| digit(two[0]) * 16 + digit(two[1]));
    RECORDS[index % SHARDS].lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a claim found.
enum Claimed {
    New,
    Replay(Kept),
    InFlight,
    Mismatch,
}

fn claim(key: &StorageKey, fingerprint: Fingerprint) -> Claimed {
    let mut records = shard(key);
    match records.get(key) {
        None => {
            records.insert(key.clone(), Record { fingerprint, response: None });
            Claimed::New
        }
        Some(record) if record.fingerprint != fingerprint => Claimed::Mismatch,
        Some(Record { response: Some(kept), .. }) => Claimed::Replay(kept.clone()),
        Some(Record { response: None, .. }) => Claimed::InFlight,
    }
}

fn complete(key: &StorageKey, kept: Kept) {
    if let Some(record) = shard(key).get_mut(key) {
        record.response = Some(kept);
    }
}

fn respond(kept: Kept) -> HttpResponse {
    let mut response = HttpResponse::build(kept.status).body(kept.body);
    if let Some(content_type) = kept.content_type {
        response.headers_mut().insert(CONTENT_TYPE, content_type);
    }
    response
}

/// The order handler under the floor's idempotency.
#[post("/orders")]
pub async fn floor(req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let key = match req.headers().get("idempotency-key").map(|value| IdempotencyKey::parse(value.as_bytes())) {
        Some(Ok(key)) => key,
        _ => return HttpResponse::BadRequest().finish(),
    };
    let route = req.match_pattern().unwrap_or_default();
    let key = StorageKey::new(Scope::Route, None, req.method().as_str(), &route, &key);
    let fingerprint = Fingerprint::of(&RequestParts {
        method: req.method().as_str(),
        path: req.path(),
        query: req.query_string(),
        headers: &[],
        host: Some(req.headers().get(HOST).and_then(|v| v.to_str().ok()).unwrap_or("")),
        content_type: req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
        body: &body,
    });
    let order = match web::Json::<NewOrder>::from_request(&req, &mut Payload::from(body)).await {
        Ok(order) => order,
        Err(error) => return error.error_response(),
    };
    match claim(&key, fingerprint) {
        Claimed::New => {}
        Claimed::Replay(kept) => {
            let mut response = respond(kept);
            response
                .headers_mut()
                .insert(HeaderName::from_static("idempotent-replayed"), HeaderValue::from_static("true"));
            return response;
        }
        Claimed::InFlight => return HttpResponse::Conflict().finish(),
        Claimed::Mismatch => return HttpResponse::UnprocessableEntity().finish(),
    }
    let response = created(create(&order));
    let status = response.status();
    let content_type = response.headers().get(CONTENT_TYPE).cloned();
    let Ok(body) = response.into_body().try_into_bytes() else {
        return HttpResponse::InternalServerError().finish();
    };
    let kept = Kept { status, content_type, body };
    complete(&key, kept.clone());
    respond(kept)
}

#[cfg(test)]
mod tests {
    use actix_web::http::StatusCode;
    use actix_web::test;
    use actix_web::{App, web};

    use crate::order::testing::{ORDER, post};

    #[actix_web::test]
    async fn the_floor_replays_the_same_request_and_refuses_another() {
        let app = test::init_service(App::new().service(web::scope("/floor").service(super::floor))).await;
        let send = |body| post("/floor/orders", "floor-test", body).to_request();
        let first = test::call_service(&app, send(ORDER)).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get("idempotent-replayed").is_none());
        let created = test::read_body(first).await;
        // Re-serialized with other whitespace: the same request (§4 of the contract).
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
