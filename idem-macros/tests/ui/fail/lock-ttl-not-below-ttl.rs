// A lease that outlives the stored response.
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(ttl = "1m", lock_ttl = "5m")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
