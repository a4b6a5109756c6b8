// A scope other than "user", "route" or "global".
use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[idempotent(scope = "tenant")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = actix_web::App::new().service(create_order);
}
