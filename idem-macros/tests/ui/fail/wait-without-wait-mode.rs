// `wait` without `in_flight = "wait"` would be silently ignored.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(wait = "5s")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
