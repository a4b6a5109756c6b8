// A lease that outlives the stored response.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "1m", lock_ttl = "5m")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
