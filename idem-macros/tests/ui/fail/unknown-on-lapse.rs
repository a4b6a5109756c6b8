// An on_lapse policy other than "takeover" or "hold".
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(on_lapse = "retry")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
