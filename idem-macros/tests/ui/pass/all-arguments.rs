//! Every argument at once, with non-default values.
#![deny(warnings)]

use actix_web::{App, HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(
    ttl = "1d12h",
    scope = "user",
    lock_ttl = "1m30s",
    header = "X-Idempotency-Key",
    required = false,
    in_flight = "wait",
    wait = "20s",
    on_lapse = "hold",
    crate = "::idem_runtime"
)]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = App::new().service(create_order);
}
