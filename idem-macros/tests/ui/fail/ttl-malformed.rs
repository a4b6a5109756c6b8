// A duration whose last number has no unit.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(ttl = "1h30")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
