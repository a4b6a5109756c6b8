// The same argument twice; the error points at the second one.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "24h", scope = "user", ttl = "1h")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
