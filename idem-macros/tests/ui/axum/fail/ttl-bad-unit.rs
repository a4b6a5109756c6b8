// A duration unit other than s, m, h, d.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "2w")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
