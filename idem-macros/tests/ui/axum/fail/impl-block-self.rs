// An axum handler that names `Self` lives in an `impl` block, which cannot
// hold the type the attribute makes of it.
use axum::extract::State;
use idem_runtime::axum::idempotent;

#[derive(Clone)]
struct Orders;

impl Orders {
    #[idempotent]
    async fn create(State(_orders): State<Self>) -> &'static str {
        "created"
    }
}

fn main() {}
