//! Tracing attributes below `#[idempotent]` instrument the user's handler,
//! not the wrapper: `#[fastrace::trace]` (a last segment shared with
//! actix-web's `#[trace("/path")]`, which is not a route macro for that) with
//! properties read from the handler's own arguments, and
//! `#[tracing::instrument]`. Runs once, then replays.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, post, web};
use idem_runtime::idempotent;

/// Reads an order, traced with its id.
#[idempotent(scope = "route")]
#[fastrace::trace(properties = { "order_id": "{id}" })]
#[post("/orders/{id}")]
async fn traced(id: web::Path<String>) -> HttpResponse {
    HttpResponse::Ok().body(id.into_inner())
}

/// The same with `tracing`.
#[idempotent(scope = "route")]
#[tracing::instrument(skip(body))]
#[post("/instrumented")]
async fn instrumented(body: String) -> HttpResponse {
    HttpResponse::Ok().body(body)
}

fn main() {
    replay::execute_then_replay(|config| {
        config.service(traced);
    }, "/orders/o-7", "{}");
    replay::execute_then_replay(|config| {
        config.service(instrumented);
    }, "/instrumented", "{}");
}
