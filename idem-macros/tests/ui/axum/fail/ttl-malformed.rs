// A duration whose last number has no unit.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "1h30")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
