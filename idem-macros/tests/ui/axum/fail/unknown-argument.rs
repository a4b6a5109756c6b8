// An argument name that does not exist; the error lists the allowed ones.
use idem_runtime::axum::idempotent;

#[idempotent(tll = "24h")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
