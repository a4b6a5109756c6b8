//! Names the expansion uses cannot meet the user's: a unit struct, a
//! function and a constant named like the generated ones, a `None` that
//! shadows the prelude's, and a handler named like them. Runs once, then
//! replays.
#![deny(warnings)]
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, post};
use idem_runtime::idempotent;

struct __idem_req;
struct __idem_payload;
const __IDEM_OPTIONS: u8 = 0;
fn handle() {}
enum Lapse {
    None,
}
use Lapse::None;

/// Places an order.
#[idempotent]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    handle();
    HttpResponse::Created().body("order 1")
}

mod named_like_them {
    use actix_web::{HttpResponse, post};
    use idem_runtime::idempotent;

    /// A handler named like a generated argument.
    #[idempotent]
    #[post("/other")]
    pub async fn __idem_req() -> HttpResponse {
        HttpResponse::Created().body("other 1")
    }
}

fn main() {
    let _ = (__idem_req, __idem_payload, __IDEM_OPTIONS, None);
    replay::execute_then_replay(|config| {
        config.service(create_order);
    }, "/orders", "{}");
    replay::execute_then_replay(|config| {
        config.service(named_like_them::__idem_req);
    }, "/other", "{}");
}
