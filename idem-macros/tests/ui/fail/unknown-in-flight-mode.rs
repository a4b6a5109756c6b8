// An in_flight mode other than "reject" or "wait".
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(in_flight = "queue")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
