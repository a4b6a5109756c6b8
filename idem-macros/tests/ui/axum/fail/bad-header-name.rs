// A header name with a character that HTTP does not allow in one.
use idem_runtime::axum::idempotent;

#[idempotent(header = "Idempotency Key")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
