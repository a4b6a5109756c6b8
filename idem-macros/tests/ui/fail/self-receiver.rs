// A method: actix-web handlers cannot take `self`.
use actix_web::HttpResponse;
use idem_runtime::idempotent;

struct Orders;

impl Orders {
    #[idempotent]
    async fn create(&self) -> HttpResponse {
        HttpResponse::Created().finish()
    }
}

fn main() {
    let _ = Orders.create();
}
