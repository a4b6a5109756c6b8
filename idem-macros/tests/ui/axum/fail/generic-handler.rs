// A generic axum handler: the attribute makes the handler a type of its own,
// which has no turbofish to be registered with.
use axum::extract::State;
use idem_runtime::axum::idempotent;

trait Repo: Clone + Send + Sync + 'static {}

#[idempotent]
async fn create_order<R: Repo>(State(_repo): State<R>) -> &'static str {
    "created"
}

fn main() {}
