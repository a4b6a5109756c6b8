//! The handler keeps its visibility, docs and other attributes; `#[cfg]`
//! removes it whole; `#[routes]` with several methods works.
#![deny(warnings)]

use actix_web::{App, HttpResponse, routes};
use idem_runtime::idempotent;

mod orders {
    use actix_web::{HttpResponse, post, web};
    use idem_runtime::idempotent;

    /// Places an order.
    #[idempotent]
    #[post("/orders")]
    #[allow(clippy::unused_async)]
    pub(crate) async fn create_order(body: String) -> HttpResponse {
        HttpResponse::Created().body(body)
    }

    /// Refunds an order; registered by hand.
    #[idempotent]
    pub async fn refund(order: web::Path<u64>) -> HttpResponse {
        HttpResponse::Ok().body(order.to_string())
    }
}

#[cfg(any())]
#[idempotent]
async fn compiled_out() -> HttpResponse {
    this_does_not_exist()
}

#[idempotent]
#[routes]
#[post("/carts")]
#[put("/carts")]
async fn save_cart() -> HttpResponse {
    HttpResponse::Ok().finish()
}

fn main() {
    let _ = App::new()
        .service(orders::create_order)
        .route("/orders/{id}/refund", actix_web::web::post().to(orders::refund))
        .service(save_cart);
}
