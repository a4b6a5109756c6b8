// `required` written as a string instead of a bool.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(required = "false")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
