// `wait` without `in_flight = "wait"` would be silently ignored.
use idem_runtime::axum::idempotent;

#[idempotent(wait = "5s")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
