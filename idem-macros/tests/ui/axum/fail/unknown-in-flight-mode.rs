// An in_flight mode other than "reject" or "wait".
use idem_runtime::axum::idempotent;

#[idempotent(in_flight = "queue")]
async fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
