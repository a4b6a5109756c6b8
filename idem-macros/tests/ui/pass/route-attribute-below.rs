//! `#[post]` below `#[idempotent]`: the attribute moves the route macro onto
//! the wrapper it generates, and actix-web registers the wrapper.
#![deny(warnings)]

use actix_web::{App, HttpResponse, Responder, post, web};
use idem_runtime::idempotent;
use serde::Deserialize;

#[derive(Deserialize)]
struct NewOrder {
    amount_cents: u64,
}

/// Places an order.
#[idempotent]
#[post("/orders")]
async fn create_order(body: web::Json<NewOrder>) -> impl Responder {
    HttpResponse::Created().body(body.amount_cents.to_string())
}

fn main() {
    let _ = App::new().service(create_order);
}
