// The attribute on something other than a function.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "1h")]
struct Orders;

fn main() {
    let _ = Orders;
}
