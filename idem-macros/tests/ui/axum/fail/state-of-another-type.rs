// A handler whose `State` is not the router's: refused where it is
// registered, as axum refuses a plain handler.
use axum::extract::State;
use idem_runtime::axum::idempotent;

#[derive(Clone)]
struct Db;

#[idempotent]
async fn create_order(State(_db): State<Db>) -> &'static str {
    "created"
}

fn main() {
    let _ = axum::Router::new().route("/orders", axum::routing::post(create_order)).with_state(7_u32);
}
