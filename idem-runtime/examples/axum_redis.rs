//! `POST /payments` made safe to retry on axum, with the [`RedisStore`]:
//! every process pointed at the same Redis shares the records.
//!
//! ```sh
//! redis-server --port 6379 --maxmemory-policy noeviction &   # or any Redis / Valkey
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p idem-runtime --features axum,redis --example axum_redis
//!
//! # Run this twice: the first charges (the server prints "charged"), the
//! # second gets the same 201 body back with `Idempotent-Replayed: true`.
//! curl -i -X POST localhost:8080/payments -H 'X-User-ID: alice' -H 'Idempotency-Key: pay-1' \
//!      -H 'Content-Type: application/json' -d '{"amount_cents":1500}'
//! ```
//!
//! `REDIS_URL` defaults to `redis://127.0.0.1:6379/`, `ADDR` to `127.0.0.1:8080`.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use idem_runtime::axum::idempotent;
use idem_runtime::{Idem, RedisStore};
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    // Reconnects by itself; refuses a server that may evict records
    // (`maxmemory-policy`). Errors never show the URL's password.
    let store = RedisStore::connect(&url).await?;
    // `subject` says who the caller is, for `scope = "user"`: in a real
    // service, your authenticated user's id, never a value the client sets.
    let idem = Idem::new(store).subject(|req| req.header("x-user-id").map(str::to_owned));
    let app = Router::new().route("/payments", post(create_payment)).layer(idem.layer());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}
