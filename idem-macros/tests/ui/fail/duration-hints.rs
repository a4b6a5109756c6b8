//! Durations written as other tools write them get a hint with the fix.

use actix_web::HttpResponse;
use idem_runtime::idempotent;

#[idempotent(ttl = "30min", lock_ttl = "500ms")]
async fn a() -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[idempotent(ttl = "24H", in_flight = "wait", wait = "1h 30m")]
async fn b() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {}
