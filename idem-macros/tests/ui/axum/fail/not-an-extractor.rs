// An argument that is not an extractor: reported on the handler's argument
// types, where the attribute writes what the router needs of them.
use idem_runtime::axum::idempotent;

struct NotAnExtractor;

#[idempotent]
async fn create_order(_: NotAnExtractor, body: String) -> String {
    body
}

fn main() {
    let _ = axum::Router::<()>::new().route("/orders", axum::routing::post(create_order));
}
