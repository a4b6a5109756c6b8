//! `least`, the anchor of the memory store's first executions in §12 of the
//! contract: the least a *correct* in-process layer that keeps records must
//! do, written by hand around the same handler.
//!
//! Correct means what §12 asks and no more:
//! - one map shared by every worker, so that a retry reaching another
//!   worker is recognized: 64 shards under a mutex each, picked, and hashed
//!   within, by the storage key's own first bytes (a SHA-256 digest needs no
//!   other hash);
//! - the storage key and the fingerprint hashed with SHA-256 over raw bytes,
//!   each part prefixed with its length: the storage key over the method,
//!   the route's pattern and the key header's bytes as they are; the
//!   fingerprint over the method, host, path, query, content type and the
//!   body's bytes as they came (its one chunk, not a copy), so that a
//!   request to another tenant (host), another query or another media type
//!   is never answered with this one's response;
//! - the body read up to 1 MiB (413 beyond), as any layer facing clients
//!   must;
//! - a claim before the handler (a record in flight, so that a concurrent
//!   duplicate is refused and never runs) and a completion after it, which
//!   keeps the response's body by reference;
//! - a replay of the same body, a refusal of another body or of a duplicate
//!   in flight, and a handler whose extractor refuses the body keeps
//!   nothing.
//!
//! And nothing else: no key rules or length check, no canonical JSON
//! (the fingerprint is of the raw body), no lease, fencing, expiry, bound,
//! detached task, headers but the content type, `Idempotent-Replayed`, or
//! metrics. It still runs the handler's own extractor before the claim, on a
//! replay too, as the handler without the attribute does on every request.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{LazyLock, Mutex};

use actix_web::dev::Payload;
use actix_web::web::{Bytes, BytesMut};
use actix_web::{FromRequest, HttpRequest, HttpResponse, post, web};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::order::{NewOrder, create, created};

/// A storage key: SHA-256 of the key header's bytes.
type Key = [u8; 32];

/// A key's record: the fingerprint, and the response once completed.
type Record = ([u8; 32], Option<Bytes>);

/// Shards of the map (a power of two).
const SHARDS: usize = 64;

/// Hashes a [`Key`] by its own bytes: it is a digest already.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // A `[u8; 32]` hashes as its length, then its bytes: keep 8 of these.
        if let Some(word) = bytes.get(8..16) {
            self.0 = u64::from_le_bytes(word.try_into().unwrap_or_default());
        }
    }

    fn write_usize(&mut self, _: usize) {}
}

type Shard = Mutex<HashMap<Key, Record, BuildHasherDefault<DigestHasher>>>;

static RECORDS: LazyLock<Vec<Shard>> = LazyLock::new(|| (0..SHARDS).map(|_| Shard::default()).collect());

fn shard(key: &Key) -> std::sync::MutexGuard<'static, HashMap<Key, Record, BuildHasherDefault<DigestHasher>>> {
    RECORDS[usize::from(key[0]) % SHARDS].lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a claim found: `None` when it took the key.
enum Found {
    Replay(Bytes),
    Refused,
}

fn claim(key: Key, fingerprint: [u8; 32]) -> Option<Found> {
    match shard(&key).entry(key) {
        std::collections::hash_map::Entry::Vacant(free) => {
            free.insert((fingerprint, None));
            None
        }
        std::collections::hash_map::Entry::Occupied(held) => match held.get() {
            (kept, Some(body)) if *kept == fingerprint => Some(Found::Replay(body.clone())),
            // Another body (422), or a duplicate in flight (409): either way not run.
            _ => Some(Found::Refused),
        },
    }
}

/// Most bytes of a body.
const BODY_LIMIT: usize = 1 << 20;

/// The body: its one chunk as it is, or the chunks gathered; `None` past
/// [`BODY_LIMIT`].
async fn body(mut payload: web::Payload) -> Result<Option<Bytes>, actix_web::Error> {
    let Some(first) = payload.next().await.transpose()? else { return Ok(Some(Bytes::new())) };
    let Some(second) = payload.next().await.transpose()? else {
        return Ok((first.len() <= BODY_LIMIT).then_some(first));
    };
    let mut body = BytesMut::from(&first[..]);
    body.extend_from_slice(&second);
    while let Some(chunk) = payload.next().await.transpose()? {
        if body.len() + chunk.len() > BODY_LIMIT {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body.len() <= BODY_LIMIT).then(|| body.freeze()))
}

/// SHA-256 over `parts`, each prefixed with its length.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// The order handler under the least correct idempotency.
#[post("/orders")]
pub async fn least(req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let Some(key) = req.headers().get("idempotency-key") else {
        return HttpResponse::BadRequest().finish();
    };
    let method = req.method().as_str().as_bytes();
    let route = req.match_pattern().unwrap_or_default();
    let key: Key = digest(&[method, route.as_bytes(), key.as_bytes()]);
    let body = match body(payload).await {
        Ok(Some(body)) => body,
        Ok(None) => return HttpResponse::PayloadTooLarge().finish(),
        Err(error) => return error.error_response(),
    };
    let header = |name| req.headers().get(name).map_or(&b""[..], |value| value.as_bytes());
    let fingerprint = digest(&[
        method,
        header("host"),
        req.path().as_bytes(),
        req.query_string().as_bytes(),
        header("content-type"),
        &body,
    ]);
    let order = match web::Json::<NewOrder>::from_request(&req, &mut Payload::from(body)).await {
        Ok(order) => order,
        Err(error) => return error.error_response(),
    };
    match claim(key, fingerprint) {
        None => {}
        Some(Found::Replay(body)) => return created(body),
        Some(Found::Refused) => return HttpResponse::Conflict().finish(),
    }
    let body = Bytes::from(create(&order));
    if let Some(record) = shard(&key).get_mut(&key) {
        record.1 = Some(body.clone());
    }
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
        // The same order again, on another worker (an app of its own): the
        // first response (its order id), not a new one.
        let worker = test::init_service(App::new().service(web::scope("/least").service(super::least))).await;
        let again = test::call_service(&worker, send("least-test", ORDER)).await;
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
