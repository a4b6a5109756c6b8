//! `#[utoipa::path]` between `#[idempotent]` and the route macro (the order
//! a reader of the README arrives at): it is applied first, to the handler as
//! written, so the OpenAPI document knows its name, its path parameter and
//! its JSON body. Runs once, then replays.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, post, web};
use idem_runtime::idempotent;
use serde::Deserialize;
use utoipa::{OpenApi, ToSchema};

/// A payment.
#[derive(Deserialize, ToSchema)]
struct NewPayment {
    amount_cents: u64,
}

/// Pays an order.
#[idempotent(ttl = "24h")]
#[utoipa::path(responses((status = 201, description = "Captured")))]
#[post("/orders/{id}/payments")]
async fn create_payment(id: web::Path<String>, body: web::Json<NewPayment>) -> HttpResponse {
    HttpResponse::Created().body(format!("{} {}", id.into_inner(), body.amount_cents))
}

#[derive(OpenApi)]
#[openapi(paths(create_payment))]
struct Api;

fn main() {
    let document = Api::openapi().to_json().unwrap();
    let document: serde_json::Value = serde_json::from_str(&document).unwrap();
    let operation = &document["paths"]["/orders/{id}/payments"]["post"];
    assert_eq!(operation["operationId"], "create_payment", "{document}");
    assert_eq!(operation["parameters"][0]["name"], "id", "{document}");
    assert!(operation["requestBody"]["content"]["application/json"].is_object(), "{document}");
    replay::execute_then_replay(|config| {
        config.service(create_payment);
    }, "/orders/o-1/payments", r#"{"amount_cents":500}"#);
}
