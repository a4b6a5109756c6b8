// A key function of another signature, on an axum handler: reported on
// its path, in the attribute.
use idem_runtime::axum::idempotent;

fn from_text(_: &str) -> Option<String> {
    None
}

#[idempotent(key = "fn:from_text")]
async fn wrong_argument() -> &'static str {
    "created"
}

fn main() {}
