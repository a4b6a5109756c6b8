//! Lint levels around annotated handlers, checked by `cargo clippy -D
//! warnings` in `scripts/test`: `clippy::future_not_send` (nursery), denied
//! here, does not fire on the wrapper of a handler whose own future is
//! `Send` (actix-web's request, which the wrapper holds, is not `Send`, and
//! need not be), and a level written on a handler reaches its wrapper.
#![deny(clippy::future_not_send)]

use actix_web::{HttpRequest, HttpResponse, post};
use idem_runtime::idempotent;

/// Its own future is `Send`.
#[idempotent(scope = "route")]
#[post("/send")]
pub async fn send_handler(body: String) -> HttpResponse {
    HttpResponse::Ok().body(body)
}

/// Holds the request across an await: not `Send`, silenced on the handler.
#[allow(clippy::future_not_send)]
#[idempotent(scope = "route")]
#[post("/not-send")]
pub async fn not_send_handler(req: HttpRequest) -> HttpResponse {
    tokio::task::yield_now().await;
    HttpResponse::Ok().body(req.path().to_owned())
}
