// `required` written as a string instead of a bool.
use idem_runtime::axum::idempotent;

#[idempotent(required = "false")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
