//! A small annotated app shared by the actix integration tests: handlers
//! that count their executions.

use std::time::Duration;

use actix_web::{HttpResponse, post, web};
use idem_runtime::{Idem, MemoryStore, RequestHead, idempotent};
use serde_json::json;

use crate::counter::Counter;

/// How many times each handler body ran.
#[derive(Debug, Default)]
pub struct Calls {
    /// Executions of [`create_order`].
    pub orders: Counter,
    /// Executions of [`pay`].
    pub payments: Counter,
}

/// The subject resolver of these tests: the `X-User-ID` header.
pub fn user_header(req: &RequestHead<'_>) -> Option<String> {
    req.header("x-user-id").map(str::to_owned)
}

/// An [`Idem`] over a fresh memory store, subjects from `X-User-ID`.
pub fn memory_idem() -> Idem {
    Idem::new(MemoryStore::new()).subject(user_header).store_timeout(TEST_STORE_TIMEOUT)
}

/// A store timeout within a third of the shortest `lock_ttl` the tests use
/// (1 s): `Idem` refuses routes whose lease one slow call could outlast.
pub const TEST_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);

/// Creates an order; sleeps `?delay_ms=` first. Answers 201 with the call
/// number, a multi-valued header and a cookie.
#[idempotent(scope = "user", lock_ttl = "2s", ttl = "1h")]
#[post("/orders")]
pub async fn create_order(
    body: web::Json<serde_json::Value>,
    query: web::Query<Delay>,
    calls: web::Data<Calls>,
) -> HttpResponse {
    let call = calls.orders.next();
    if query.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(query.delay_ms)).await;
    }
    HttpResponse::Created()
        .insert_header(("location", format!("/orders/{call}")))
        .append_header(("x-multi", "one"))
        .append_header(("x-multi", "two"))
        .insert_header(("set-cookie", "session=abc"))
        .json(json!({ "call": call, "order": body.into_inner() }))
}

/// Pays an order: the path parameter is part of the fingerprint.
#[post("/orders/{id}/payments")]
#[idempotent(scope = "user")]
pub async fn pay(path: web::Path<String>, calls: web::Data<Calls>) -> HttpResponse {
    let call = calls.payments.next();
    HttpResponse::Created().json(json!({ "call": call, "order": path.into_inner() }))
}

/// The `?delay_ms=` query parameter of [`create_order`].
#[derive(Debug, serde::Deserialize)]
pub struct Delay {
    /// Milliseconds the handler sleeps.
    #[serde(default)]
    pub delay_ms: u64,
}

/// Registers [`create_order`] and [`pay`] with a fresh [`Calls`].
pub fn routes(calls: web::Data<Calls>) -> impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static {
    move |config: &mut web::ServiceConfig| {
        config.app_data(calls.clone()).service(create_order).service(pay);
    }
}
