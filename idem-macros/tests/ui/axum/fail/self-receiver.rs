// A method: axum handlers cannot take `self`.
use idem_runtime::axum::idempotent;

struct Orders;

impl Orders {
    #[idempotent]
    async fn create(&self) -> &'static str {
        "created"
    }
}

fn main() {
    let _ = Orders.create();
}
