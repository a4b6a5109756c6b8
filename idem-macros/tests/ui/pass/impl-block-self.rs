//! A handler in an `impl` block that names `Self`: the attribute keeps it
//! beside the wrapper as a hidden associated function, so `Self` works.
//! Runs once, then replays.
#![deny(warnings)]

#[path = "../support/replay.rs"]
mod replay;

use actix_web::{HttpResponse, web};
use idem_runtime::idempotent;

/// The order routes.
struct Orders {
    prefix: &'static str,
}

impl Orders {
    /// Places an order.
    #[idempotent(scope = "route")]
    async fn create(state: web::Data<Self>) -> HttpResponse {
        HttpResponse::Created().body(Self::label(&state))
    }

    fn label(state: &Self) -> String {
        format!("{}-1", state.prefix)
    }
}

fn main() {
    replay::execute_then_replay(
        |config| {
            config.app_data(web::Data::new(Orders { prefix: "order" })).route("/orders", web::post().to(Orders::create));
        },
        "/orders",
        "{}",
    );
}
