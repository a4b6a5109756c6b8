// A duration written as a number instead of a string.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(ttl = 86400)]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
