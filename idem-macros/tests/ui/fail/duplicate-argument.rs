// The same argument twice; the error points at the second one.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(ttl = "24h", scope = "user", ttl = "1h")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
