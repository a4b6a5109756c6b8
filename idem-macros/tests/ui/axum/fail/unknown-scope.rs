// A scope other than "user", "route" or "global".
use idem_runtime::axum::idempotent;

#[idempotent(scope = "tenant")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
