//! What `#[idempotent]` costs a request, against the same handler without
//! it, measured in one run (the README reports the ratios).
//!
//! `cargo bench -p idem-runtime --bench overhead`

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use idem_runtime::store::{Fingerprint, IdempotencyKey, RequestParts, Scope, StorageKey};
use idem_runtime::{Idem, MemoryStore, idempotent};

const ORDER: &str = r#"{"customer_id":"cus_8e03978e","amount_cents":1500,"currency":"EUR","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"note":"leave at the door"}"#;

async fn create(body: web::Json<serde_json::Value>) -> HttpResponse {
    HttpResponse::Created().json(body.into_inner())
}

/// The baseline: the same handler, not annotated.
#[post("/plain")]
async fn plain(body: web::Json<serde_json::Value>) -> HttpResponse {
    create(body).await
}

/// The same handler under `#[idempotent]` with the memory store.
#[idempotent(scope = "route")]
#[post("/idempotent")]
async fn annotated(body: web::Json<serde_json::Value>) -> HttpResponse {
    create(body).await
}

/// The same with records that expire within the run: first executions on
/// a store of steady size (records freed as fast as they come), without
/// the growth of a store that keeps every record of the run.
#[idempotent(scope = "route", ttl = "3s", lock_ttl = "2s")]
#[post("/expiring")]
async fn expiring(body: web::Json<serde_json::Value>) -> HttpResponse {
    create(body).await
}

fn request(uri: &str, key: Option<String>) -> actix_http::Request {
    let mut request =
        TestRequest::post().uri(uri).insert_header(("content-type", "application/json")).set_payload(ORDER);
    if let Some(key) = key {
        request = request.insert_header(("idempotency-key", key));
    }
    request.to_request()
}

fn requests(c: &mut Criterion) {
    let system = actix_rt::System::new();
    // Room for every first execution of a run: with the default bound the
    // store fills within the measurement, and the rest measures its 503s.
    let store = MemoryStore::with_max_bytes(8 << 30);
    // Within a third of `expiring`'s lease (the memory store answers at once).
    let idem = Idem::new(store).store_timeout(Duration::from_millis(500));
    let app = system
        .block_on(test::init_service(App::new().app_data(idem).service(plain).service(annotated).service(expiring)));
    let counter = AtomicU64::new(0);
    let mut group = c.benchmark_group("request");
    group.bench_function("baseline (plain handler)", |b| {
        b.iter(|| system.block_on(test::call_service(&app, request("/plain", None))))
    });
    group.bench_function("idempotent, first execution", |b| {
        b.iter(|| {
            let key = format!("key-{}", counter.fetch_add(1, Ordering::Relaxed));
            system.block_on(test::call_service(&app, request("/idempotent", Some(key))))
        })
    });
    group.bench_function("idempotent, first execution, records expiring", |b| {
        b.iter(|| {
            let key = format!("key-{}", counter.fetch_add(1, Ordering::Relaxed));
            system.block_on(test::call_service(&app, request("/expiring", Some(key))))
        })
    });
    system.block_on(test::call_service(&app, request("/idempotent", Some("replayed".into()))));
    group.bench_function("idempotent, replay", |b| {
        b.iter(|| system.block_on(test::call_service(&app, request("/idempotent", Some("replayed".into())))))
    });
    group.finish();
}

fn pieces(c: &mut Criterion) {
    let mut group = c.benchmark_group("pieces");
    let body = ORDER.as_bytes().to_vec();
    for (name, content_type) in [("raw", None), ("json", Some("application/json"))] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("fingerprint", name), &content_type, |b, &content_type| {
            b.iter(|| {
                Fingerprint::of(&RequestParts {
                    method: "POST",
                    path: "/orders",
                    query: "",
                    headers: &[],
                    host: None,
                    content_type,
                    body: &body,
                })
            })
        });
    }
    group.bench_function("key and storage key", |b| {
        b.iter(|| {
            let key = IdempotencyKey::parse(b"\"8e03978e-40d5-43e8-bc93-6894a57f9324\"").unwrap();
            StorageKey::new(Scope::User, Some("alice"), "POST", "/orders", &key)
        })
    });
    group.finish();
}

criterion_group!(benches, requests, pieces);
criterion_main!(benches);
