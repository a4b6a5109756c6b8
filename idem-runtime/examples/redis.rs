//! `POST /payments` made safe to retry, with the [`RedisStore`]: every
//! process pointed at the same Redis shares the records.
//!
//! ```sh
//! redis-server --port 6379 --maxmemory-policy noeviction &   # or any Redis / Valkey
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p idem-runtime --features redis --example redis
//!
//! # Run this twice: the first charges (the server prints "charged"), the
//! # second gets the same 201 body back with `Idempotent-Replayed: true`.
//! curl -i -X POST localhost:8080/payments -H 'X-User-ID: alice' -H 'Idempotency-Key: pay-1' \
//!      -H 'Content-Type: application/json' -d '{"amount_cents":1500}'
//! ```
//!
//! `REDIS_URL` defaults to `redis://127.0.0.1:6379/`, `ADDR` to `127.0.0.1:8080`.

use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::{App, HttpResponse, HttpServer, post, web};
use idem_runtime::{Idem, RedisStore, idempotent};
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
#[post("/payments")]
async fn create_payment(body: web::Json<NewPayment>) -> HttpResponse {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let payment = Payment { id: format!("pay_{nanos:x}"), amount_cents: body.amount_cents, status: "captured" };
    println!("charged {} cents: {}", payment.amount_cents, payment.id);
    HttpResponse::Created().json(payment)
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    // Connects and loads the scripts; errors never show the URL's password.
    let store = RedisStore::connect(&url).await?;
    // `subject` says who the caller is, for `scope = "user"`. A header keeps the
    // example short: in a real service return your authenticated user's id
    // (from the session or token your auth middleware checked), never a value
    // the client may set freely.
    let idem = Idem::new(store).subject(|req| req.header("x-user-id").map(str::to_owned));
    println!("listening on http://{addr}");
    HttpServer::new(move || App::new().app_data(idem.clone()).service(create_payment)).bind(addr)?.run().await?;
    Ok(())
}
