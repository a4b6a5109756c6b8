//! Durations written as other tools write them get a hint with the fix.

use idem_runtime::axum::idempotent;

#[idempotent(ttl = "30min", lock_ttl = "500ms")]
async fn a() -> &'static str {
    "created"
}

#[idempotent(ttl = "24H", in_flight = "wait", wait = "1h 30m")]
async fn b() -> &'static str {
    "created"
}

fn main() {}
