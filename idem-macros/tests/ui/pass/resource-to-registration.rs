//! No route attribute: the handler is registered with
//! `web::resource(..).route(web::post().to(..))`, and `App::route` too.
#![deny(warnings)]

use actix_web::{App, HttpResponse, web};
use idem_runtime::idempotent;
use serde::Deserialize;

#[derive(Deserialize)]
struct NewOrder {
    amount_cents: u64,
}

#[idempotent(scope = "global")]
async fn create_order(body: web::Json<NewOrder>) -> HttpResponse {
    HttpResponse::Created().body(body.amount_cents.to_string())
}

fn main() {
    let _ = App::new().service(web::resource("/orders").route(web::post().to(create_order)));
    let _ = App::new().route("/orders", web::put().to(create_order));
}
