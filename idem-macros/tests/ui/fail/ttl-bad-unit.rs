// A duration unit other than s, m, h, d.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(ttl = "2w")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
