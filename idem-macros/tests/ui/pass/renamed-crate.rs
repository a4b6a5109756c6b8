//! The runtime under another name, given with `crate = ".."`.
#![deny(warnings)]

extern crate idem_runtime as idem_renamed;

use actix_web::{App, HttpResponse, post};
use idem_renamed::idempotent;

#[idempotent(crate = "idem_renamed")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().finish()
}

mod nested {
    pub mod idem {
        pub use idem_renamed::__private;
    }
}

#[idempotent(crate = "crate::nested::idem")]
#[post("/refunds")]
async fn create_refund() -> HttpResponse {
    HttpResponse::Created().finish()
}

fn main() {
    let _ = App::new().service(create_order).service(create_refund);
}
