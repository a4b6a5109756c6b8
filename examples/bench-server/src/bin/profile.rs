//! Runs one path of the order handler in process (actix-web's test service,
//! the memory store, no network) a given number of times, for a profiler:
//!
//! ```text
//! valgrind --tool=callgrind target/release/profile first 5000
//! ```
//!
//! Paths: `bare`, `first` (a new key each time), `replay` (one key).

use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Idem, MemoryStore, idempotent};
use serde::Deserialize;

const ORDER: &str = r#"{"customer_id":"cus_8e03978e","amount_cents":1500,"currency":"EUR","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}"#;

/// The request body.
#[derive(Deserialize)]
struct NewOrder {
    customer_id: String,
    amount_cents: u64,
}

fn create(order: &NewOrder) -> HttpResponse {
    HttpResponse::Created().content_type("application/json").body(format!(
        r#"{{"id":"ord_1","customer_id":"{}","amount_cents":{}}}"#,
        order.customer_id, order.amount_cents
    ))
}

#[post("/bare")]
async fn bare(order: web::Json<NewOrder>) -> HttpResponse {
    create(&order)
}

#[idempotent(scope = "route")]
#[post("/orders")]
async fn annotated(order: web::Json<NewOrder>) -> HttpResponse {
    create(&order)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "first".into());
    let count: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(5000);
    let system = actix_rt::System::new();
    let app = system.block_on(test::init_service(
        App::new().app_data(Idem::new(MemoryStore::new())).service(bare).service(annotated),
    ));
    let next = AtomicU64::new(0);
    let request = |uri: &str, key: Option<String>| {
        let mut request =
            TestRequest::post().uri(uri).insert_header(("content-type", "application/json")).set_payload(ORDER);
        if let Some(key) = key {
            request = request.insert_header(("idempotency-key", key));
        }
        request.to_request()
    };
    for _ in 0..count {
        let req = match path.as_str() {
            "bare" => request("/bare", None),
            "replay" => request("/orders", Some("replayed".into())),
            _ => request("/orders", Some(format!("key-{}", next.fetch_add(1, Ordering::Relaxed)))),
        };
        let response = system.block_on(test::call_service(&app, req));
        assert!(response.status().is_success(), "{}", response.status());
    }
}
