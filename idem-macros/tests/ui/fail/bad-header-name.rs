// A header name with a character that HTTP does not allow in one.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(header = "Idempotency Key")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
