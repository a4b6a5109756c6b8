// Every wrong argument and the function itself are reported at once, each on
// its own token; the function is still emitted, so the IDE keeps working.
use idem_runtime::axum::idempotent;

#[idempotent(ttl = "2w", scope = "tenant", header = "Idempotency Key")]
fn create_order() -> &'static str {
    "created"
}

fn main() {
    let _ = create_order();
}
