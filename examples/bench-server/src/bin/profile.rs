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
//! `floor` and `floor-replay` (section 4's work and no more, see `floor.rs`),
//! `first` (under `#[idempotent]`, a new key each time) and `replay` (one
//! key), and `sealed-first` and `sealed-replay` (the same with encrypted
//! records).
//!
//! With `PROFILE_COLD_MB=N` it touches N MiB between two requests, as the
//! network stack between two requests over HTTP evicts the caches, and
//! prints the time per request, the touching left out. Under callgrind's
//! cache simulation that gives each request's cache misses, the same in
//! every run:
//!
//! ```text
//! PROFILE_COLD_MB=4 valgrind --tool=callgrind --cache-sim=yes target/release/profile replay 1000
//! ```

#[path = "../floor.rs"]
#[allow(dead_code)]
mod floor;
#[path = "../least.rs"]
#[allow(dead_code)]
mod least;
#[path = "../order.rs"]
#[allow(dead_code)]
mod order;

use actix_web::test::{self, TestRequest};
use actix_web::{App, web};
use idem_runtime::sealing::{Keyring, RecordsKey};
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
            .service(web::scope("/floor").service(floor::floor))
            .service(web::scope("/memory").service(order::annotated))
            .service(
                web::scope("/sealed")
                    .app_data(
                        Idem::new(MemoryStore::with_max_bytes(4 << 30))
                            .encrypt_records(Keyring::new(RecordsKey::new([0x5e; 32]))),
                    )
                    .service(order::annotated),
            ),
    ));
    let request = |uri: &str, key: Option<String>| {
        let mut request =
            TestRequest::post().uri(uri).insert_header(("content-type", "application/json")).set_payload(ORDER);
        if let Some(key) = key {
            request = request.insert_header(("idempotency-key", key));
        }
        request.to_request()
    };
    // `PROFILE_COLD_MB`: touch that many MiB between two requests (timed
    // apart), as a network stack between requests evicts the caches.
    let cold: usize = std::env::var("PROFILE_COLD_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut junk = vec![1u8; cold << 20];
    let mut timed = std::time::Duration::ZERO;
    for n in 0..count {
        for at in (0..junk.len()).step_by(64) {
            junk[at] = junk[at].wrapping_add(1);
        }
        let started = std::time::Instant::now();
        let req = match path.as_str() {
            "bare" => request("/bare/orders", None),
            "least" => request("/least/orders", Some(format!("key-{n}"))),
            "least-replay" => request("/least/orders", Some("replayed".into())),
            "replay" => request("/memory/orders", Some("replayed".into())),
            "floor" => request("/floor/orders", Some(format!("key-{n}"))),
            "floor-replay" => request("/floor/orders", Some("replayed".into())),
            "sealed-first" => request("/sealed/orders", Some(format!("key-{n}"))),
            "sealed-replay" => request("/sealed/orders", Some("replayed".into())),
            _ => request("/memory/orders", Some(format!("key-{n}"))),
        };
        let response = system.block_on(test::call_service(&app, req));
        timed += started.elapsed();
        assert!(response.status().is_success(), "{}", response.status());
    }
    if cold > 0 {
        println!(
            "{path}: {:.2} us per request, {cold} MiB touched between requests",
            timed.as_secs_f64() * 1e6 / count as f64
        );
    }
}
