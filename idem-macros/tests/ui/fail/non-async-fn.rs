// A handler that is not `async`: actix-web handlers return futures.
use actix_web::HttpResponse;
use idem_runtime::idempotent;

#[idempotent]
fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = create_order();
}
