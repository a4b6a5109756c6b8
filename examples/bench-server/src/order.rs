//! The handler every mode serves: a small JSON order in, the created order
//! out.

use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::body::MessageBody;
use actix_web::{HttpResponse, post, web};
use idem_runtime::idempotent;
use serde::{Deserialize, Serialize};

/// The request body.
#[derive(Deserialize)]
pub struct NewOrder {
    customer_id: String,
    amount_cents: u64,
    currency: String,
    lines: Vec<Line>,
}

/// One line of an order.
#[derive(Deserialize, Serialize)]
struct Line {
    sku: String,
    qty: u32,
}

/// The response body.
#[derive(Serialize)]
struct Order<'a> {
    id: String,
    status: &'static str,
    customer_id: &'a str,
    amount_cents: u64,
    currency: &'a str,
    lines: &'a [Line],
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The business code, shared by every mode: the created order, as its JSON.
pub fn create(order: &NewOrder) -> Vec<u8> {
    let id = format!("ord_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let created = Order {
        id,
        status: "created",
        customer_id: &order.customer_id,
        amount_cents: order.amount_cents,
        currency: &order.currency,
        lines: &order.lines,
    };
    serde_json::to_vec(&created).unwrap_or_default()
}

/// A 201 with a JSON body.
pub fn created(body: impl MessageBody + 'static) -> HttpResponse {
    HttpResponse::Created().content_type("application/json").body(body)
}

/// The handler without the attribute.
#[post("/orders")]
pub async fn bare(order: web::Json<NewOrder>) -> HttpResponse {
    created(create(&order))
}

/// The same handler under `#[idempotent]`; the store is the scope's.
#[idempotent(scope = "route")]
#[post("/orders")]
pub async fn annotated(order: web::Json<NewOrder>) -> HttpResponse {
    created(create(&order))
}

/// What the informational modes' tests send.
#[cfg(test)]
pub mod testing {
    use actix_web::test::TestRequest;

    /// An order as the benchmark sends it, smaller.
    pub const ORDER: &str = r#"{"customer_id":"c","amount_cents":1,"currency":"EUR","lines":[]}"#;

    /// A JSON `POST` of `body` to `uri` under the idempotency key `key`.
    pub fn post(uri: &str, key: &str, body: &'static str) -> TestRequest {
        TestRequest::post()
            .uri(uri)
            .insert_header(("content-type", "application/json"))
            .insert_header(("idempotency-key", key))
            .set_payload(body)
    }
}
