// An on_lapse policy other than "takeover" or "hold".
use idem_runtime::axum::idempotent;

#[idempotent(on_lapse = "retry")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
