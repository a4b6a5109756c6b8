//! Arguments passed through `macro_rules!` fragments (`$s:literal`,
//! `$t:expr`) arrive wrapped in invisible groups: they are read all the same.
//! Runs once, then replays.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

macro_rules! order_route {
    ($scope:literal, $ttl:expr, $required:literal) => {
        /// Places an order.
        #[idempotent(scope = $scope, ttl = $ttl, required = $required)]
        #[post("/orders")]
        async fn create_order() -> HttpResponse {
            HttpResponse::Created().body("order 1")
        }
    };
}

order_route!("route", "1h", true);

fn main() {
    replay::execute_then_replay(|config| {
        config.service(create_order);
    }, "/orders", "{}");
}
