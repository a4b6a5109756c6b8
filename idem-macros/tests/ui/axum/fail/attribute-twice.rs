//! `#[idempotent]` twice on one handler: every request would claim its key
//! twice and get 409 from itself.

use idem_runtime::axum::idempotent;

#[idempotent(ttl = "1h")]
#[idempotent]
async fn create_order() -> &'static str {
    "created"
}

fn main() {}
