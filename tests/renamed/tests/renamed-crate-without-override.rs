//! `idem-runtime` depended on as `my_idem`, and `#[idempotent]` written
//! without `crate = ".."`: the attribute reads this crate's manifest and
//! generates paths through `::my_idem`. Compiling is most of the test; it
//! also runs once and replays.
#![deny(warnings)]

use actix_web::{App, HttpResponse, post, test};
use my_idem::{Idem, MemoryStore, idempotent};

/// Places an order.
#[idempotent(scope = "route")]
#[post("/orders")]
async fn create_order() -> HttpResponse {
    HttpResponse::Created().body("order 1")
}

#[actix_rt::test]
async fn renamed_crate_without_override_runs_once_then_replays() {
    let app = test::init_service(App::new().app_data(Idem::new(MemoryStore::new())).service(create_order)).await;
    let request = || test::TestRequest::post().uri("/orders").insert_header(("idempotency-key", "k")).to_request();
    let first = test::call_service(&app, request()).await;
    assert_eq!(first.status(), 201);
    let first = test::read_body(first).await;
    let replay = test::call_service(&app, request()).await;
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(test::read_body(replay).await, first);
}
