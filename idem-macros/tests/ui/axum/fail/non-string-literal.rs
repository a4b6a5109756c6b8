// A duration written as a number instead of a string.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = 86400)]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
