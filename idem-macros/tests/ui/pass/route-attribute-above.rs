//! `#[post]` above `#[idempotent]`: actix-web's macro runs first and the
//! attribute expands inside the `register` method it generates.
#![deny(warnings)]

use actix_web::{App, HttpResponse, Responder, post, web};
use idem_runtime::idempotent;
use serde::Deserialize;

#[derive(Deserialize)]
struct NewOrder {
    amount_cents: u64,
}

/// Places an order.
#[post("/orders")]
#[idempotent]
async fn create_order(body: web::Json<NewOrder>) -> impl Responder {
    HttpResponse::Created().body(body.amount_cents.to_string())
}

fn main() {
    let _ = App::new().service(create_order);
}
