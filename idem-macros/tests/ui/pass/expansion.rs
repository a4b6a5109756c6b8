//! What `#[idempotent(ttl = "24h", scope = "user")]` on `create_order`
//! expands to, written by hand. It compiles and runs like the annotated
//! handler: the first request runs it, the same request again gets the
//! stored response back.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::{HttpResponse, post, web};
use serde::Deserialize;

#[derive(Deserialize)]
struct NewOrder {
    amount_cents: u64,
}

struct Db {
    orders: AtomicU64,
}

/// Places an order.
#[post("/orders")]
#[allow(clippy::future_not_send, reason = "actix-web handlers need not be Send")]
async fn create_order(
    // Generated names end in a hash of the handler (`__idem_req_3f2a...`),
    // so they never meet yours.
    __idem_req: ::idem_runtime::__private::HttpRequest,
    __idem_payload: ::idem_runtime::__private::Payload,
) -> ::idem_runtime::__private::HttpResponse {
    // Your handler, whole and untouched.
    async fn create_order(body: web::Json<NewOrder>, db: web::Data<Db>) -> HttpResponse {
        let id = db.orders.fetch_add(1, Ordering::SeqCst);
        HttpResponse::Created().body(format!("order {id}: {} cents", body.amount_cents))
    }
    // Every argument, as given or by its default.
    const __IDEM_OPTIONS: ::idem_runtime::__private::RouteOptions = ::idem_runtime::__private::RouteOptions {
        ttl: ::idem_runtime::__private::Duration::from_secs(86400),
        lock_ttl: ::idem_runtime::__private::Duration::from_secs(30),
        scope: ::idem_runtime::__private::Scope::User,
        // `key = "path:id"` is `KeySource::Path("id")`, `key = "json:/id"` is `KeySource::Json("/id")`,
        // `key = ["path:id", "json:/line"]` is `KeySource::Composite(&[KeyPart::Path("id"), KeyPart::Json("/line")])`,
        // `key = "fn:keys::f"` is `KeySource::Computed(ComputedKey { name: "keys::f", compute: &keys::f })`.
        key: ::idem_runtime::__private::KeySource::Header,
        // `fingerprint_headers = ["X-Account-Id"]` is `&["x-account-id"]`.
        fingerprint_headers: &[],
        // `fingerprint_exclude = ["/attempt"]` is `&["/attempt"]`.
        fingerprint_exclude: &[],
        header: "Idempotency-Key",
        required: true,
        // `in_flight = "wait", wait = "10s"` is `InFlight::Wait(Duration::from_secs(10))`.
        in_flight: ::idem_runtime::__private::InFlight::Reject,
        // `on_lapse = "hold"` is `Some(OnLapse::Hold)`; `None` leaves it to the `Idem` default.
        on_lapse: ::core::option::Option::None,
    };
    ::idem_runtime::__private::handle(&__IDEM_OPTIONS, __idem_req, __idem_payload, create_order).await
}

fn main() {
    replay::execute_then_replay(
        |config| {
            config.app_data(web::Data::new(Db { orders: AtomicU64::new(0) })).service(create_order);
        },
        "/orders",
        r#"{"amount_cents": 1500}"#,
    );
}
