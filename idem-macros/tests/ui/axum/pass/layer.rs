//! A route made idempotent by the layer, without the attribute: on a
//! handler, and on a whole nested router.
#![deny(warnings)]

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use idem_runtime::axum::IdempotentLayer;
use idem_runtime::store::Scope;

#[path = "../../support/axum_replay.rs"]
mod axum_replay;

async fn create_order(body: String) -> String {
    format!("order of {body}")
}

fn main() {
    let layer = IdempotentLayer::builder().ttl(Duration::from_secs(3600)).scope(Scope::Route).build().expect("valid");
    let router = Router::new().route("/orders", post(create_order).layer(layer));
    axum_replay::execute_then_replay(router, "/orders", r#"{"n": 1}"#);
    let nested = Router::new().nest("/v1", Router::new().route("/orders", post(create_order)).layer(IdempotentLayer::new()));
    axum_replay::execute_then_replay(nested, "/v1/orders", r#"{"n": 2}"#);
    let outliving = IdempotentLayer::builder().ttl(Duration::from_secs(60)).lock_ttl(Duration::from_secs(120));
    assert!(outliving.build().is_err(), "a lease that outlives the record");
}
