// A handler that is not `async`: axum handlers return futures.
use idem_runtime::axum::idempotent;

#[idempotent]
fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = create_order();
}
