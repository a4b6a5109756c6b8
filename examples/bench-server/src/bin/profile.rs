//! Runs one path of the benchmark's order handler in process (actix-web's
//! test service, the memory store, no network) a given number of times, for
//! a profiler:
//!
//! ```text
//! valgrind --tool=callgrind target/release/profile first 5000
//! perf record -g target/release/profile first 200000
//! ```
//!
//! Paths: `bare` (the handler without the attribute), `least` and
//! `least-replay` (the hand-written least correct layer, see `least.rs`),
//! `first` (under `#[idempotent]`, a new key each time) and `replay` (one
//! key).

#[path = "../least.rs"]
#[allow(dead_code)]
mod least;
#[path = "../order.rs"]
#[allow(dead_code)]
mod order;

use actix_web::test::{self, TestRequest};
use actix_web::{App, web};
use idem_runtime::{Idem, MemoryStore};

const ORDER: &str = r#"{"customer_id":"cus_8e03978e","amount_cents":1500,"currency":"EUR","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}"#;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "first".into());
    let count: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(5000);
    let system = actix_rt::System::new();
    let app = system.block_on(test::init_service(
        App::new()
            .app_data(Idem::new(MemoryStore::with_max_bytes(4 << 30)))
            .service(web::scope("/bare").service(order::bare))
            .service(web::scope("/least").service(least::least))
            .service(web::scope("/memory").service(order::annotated)),
    ));
    let request = |uri: &str, key: Option<String>| {
        let mut request =
            TestRequest::post().uri(uri).insert_header(("content-type", "application/json")).set_payload(ORDER);
        if let Some(key) = key {
            request = request.insert_header(("idempotency-key", key));
        }
        request.to_request()
    };
    for n in 0..count {
        let req = match path.as_str() {
            "bare" => request("/bare/orders", None),
            "least" => request("/least/orders", Some(format!("key-{n}"))),
            "least-replay" => request("/least/orders", Some("replayed".into())),
            "replay" => request("/memory/orders", Some("replayed".into())),
            _ => request("/memory/orders", Some(format!("key-{n}"))),
        };
        let response = system.block_on(test::call_service(&app, req));
        assert!(response.status().is_success(), "{}", response.status());
    }
}
