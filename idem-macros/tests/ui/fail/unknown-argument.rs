// An argument name that does not exist; the error lists the allowed ones.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(tll = "24h")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
