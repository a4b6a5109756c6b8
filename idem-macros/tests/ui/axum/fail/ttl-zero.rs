// A duration of zero.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "0h")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
