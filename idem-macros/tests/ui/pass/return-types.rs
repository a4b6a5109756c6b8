//! Every kind of return type actix-web accepts from a handler.
#![deny(warnings)]

use std::fmt;

use actix_web::{App, HttpResponse, Responder, ResponseError, post, web};
use idem_runtime::idempotent;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct NewOrder {
    amount_cents: u64,
}

#[derive(Serialize)]
struct Order {
    id: u64,
    amount_cents: u64,
}

#[derive(Debug)]
struct EmptyOrder;

impl fmt::Display for EmptyOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an order needs an amount")
    }
}

impl ResponseError for EmptyOrder {}

#[idempotent]
#[post("/impl-responder")]
async fn impl_responder(body: web::Json<NewOrder>) -> impl Responder {
    body.amount_cents.to_string()
}

#[idempotent]
#[post("/http-response")]
async fn http_response(body: web::Json<NewOrder>) -> HttpResponse {
    HttpResponse::Created().body(body.amount_cents.to_string())
}

#[idempotent]
#[post("/result-response-error")]
async fn result_response_error(body: web::Json<NewOrder>) -> Result<HttpResponse, EmptyOrder> {
    if body.amount_cents == 0 {
        return Err(EmptyOrder);
    }
    Ok(HttpResponse::Created().finish())
}

#[idempotent]
#[post("/result-json")]
async fn result_json(body: web::Json<NewOrder>) -> Result<web::Json<Order>, actix_web::Error> {
    if body.amount_cents == 0 {
        return Err(actix_web::error::ErrorBadRequest("an order needs an amount"));
    }
    Ok(web::Json(Order { id: 1, amount_cents: body.amount_cents }))
}

fn main() {
    let _ =
        App::new().service(impl_responder).service(http_response).service(result_response_error).service(result_json);
}
