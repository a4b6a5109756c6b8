//! `POST /payments` made safe to retry on axum, with the in-process
//! [`MemoryStore`].
//!
//! ```sh
//! cargo run -p idem-runtime --features axum --example axum_memory   # ADDR=127.0.0.1:9000 to listen elsewhere
//!
//! # Run this twice: the first charges (the server prints "charged"), the
//! # second gets the same 201 body back with `Idempotent-Replayed: true`.
//! curl -i -X POST localhost:8080/payments -H 'X-User-ID: alice' -H 'Idempotency-Key: pay-1' \
//!      -H 'Content-Type: application/json' -d '{"amount_cents":1500}'
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use idem_runtime::axum::idempotent;
use idem_runtime::{Idem, MemoryStore};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct NewPayment {
    amount_cents: u64,
}

#[derive(Serialize)]
struct Payment {
    id: String,
    amount_cents: u64,
    status: &'static str,
}

/// Runs once per `Idempotency-Key` and user; retries get its response back.
#[idempotent(ttl = "24h", scope = "user")]
async fn create_payment(Json(body): Json<NewPayment>) -> (StatusCode, Json<Payment>) {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let payment = Payment { id: format!("pay_{nanos:x}"), amount_cents: body.amount_cents, status: "captured" };
    println!("charged {} cents: {}", payment.amount_cents, payment.id);
    (StatusCode::CREATED, Json(payment))
}

/// The app (apart from `main` so that `tests/examples.rs` can serve it on a
/// free port).
pub fn app() -> Router {
    // `subject` says who the caller is, for `scope = "user"`. A header keeps the
    // example short: in a real service return your authenticated user's id
    // (from the session or token your auth middleware checked), never a value
    // the client may set freely.
    let idem = Idem::new(MemoryStore::new()).subject(|req| req.header("x-user-id").map(str::to_owned));
    Router::new().route("/payments", post(create_payment)).layer(idem.layer())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{addr}");
    axum::serve(listener, app()).await
}
