//! `#[idempotent]` twice on one handler: every request would claim its key
//! twice and get 409 from itself.

use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(ttl = "1h")]
#[idempotent]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {}
