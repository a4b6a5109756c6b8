//! Lint levels on a handler reach the code the attribute generates: an
//! `allow(missing_docs)` under `deny(missing_docs)` (on a handler registered
//! with `.to(..)`: actix-web's own route macros copy only doc comments onto
//! the struct they generate, with or without `#[idempotent]`), an
//! `expect(dead_code)` on a handler nobody registers (met: the unused handler
//! warns as usual), an `expect` of a lint that fires in the handler's body.
#![deny(warnings, missing_docs)]
//! The crate.

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

#[allow(missing_docs)]
#[idempotent]
pub async fn create_order() -> HttpResponse {
    HttpResponse::Created().body("order 1")
}

/// Registered by nobody.
#[expect(dead_code)]
#[idempotent]
async fn never_registered() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Its body has an unused variable, on purpose.
#[expect(unused_variables)]
#[idempotent]
#[post("/unused")]
pub async fn with_an_unused_variable() -> HttpResponse {
    let unused = 1;
    HttpResponse::Created().body("fine")
}

fn main() {
    replay::execute_then_replay(
        |config| {
            config.route("/orders", actix_web::web::post().to(create_order));
        },
        "/orders",
        "{}",
    );
    replay::execute_then_replay(|config| {
        config.service(with_an_unused_variable);
    }, "/unused", "{}");
}
