//! The order service binary on its embedded memory store.

use std::time::Duration;

use awc::http::StatusCode;
use idem_tests::http::{fresh_key, try_send};
use idem_tests::order_checks::{contract, create_order, failure_outcomes, storms};
use idem_tests::service::OrderService;

async fn contract_on_the_memory_store() {
    let service = OrderService::start("memory", 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

async fn storms_on_the_memory_store_run_once() {
    let service = OrderService::start("memory", 200).await;
    storms(&[&service]).await;
    idem_tests::webhook_checks::webhooks(&[&service]).await;
    // The memory store's events are delivered in-process: one notification
    // per order, no notifier process needed.
    idem_tests::notifier_checks::settled(&service, None, Duration::from_secs(20)).await;
}

/// The memory backend loses everything in a crash (idempotency records,
/// orders and the simulated provider's charges alike), so the crash
/// scenarios cannot be checked across a restart here: Redis and Postgres
/// check them. This checks only that each knob, given through its
/// environment variable, really aborts the process, and that `0` leaves it
/// off.
async fn crash_knobs_abort_the_process_on_the_memory_store() {
    let pay = |service: &OrderService, order: &serde_json::Value| {
        let url = service.at(&format!("/orders/{}/payments", order["id"].as_str().unwrap()));
        async move { try_send(&url, Some("gus"), Some(&fresh_key()), Some(r#"{"amount_cents":300}"#)).await }
    };
    let off = OrderService::start_with("memory", 0, &[], &[("ORDER_SERVICE_CRASH_AFTER_CHARGE", "0")]).await;
    let order = create_order(&off, "gus").await;
    assert_eq!(pay(&off, &order).await.expect("answered").status, StatusCode::CREATED);

    let knob = [("ORDER_SERVICE_CRASH_AFTER_CHARGE", "1")];
    let mut service = OrderService::start_with("memory", 0, &[], &knob).await;
    let order = create_order(&service, "gus").await;
    let reply = pay(&service, &order).await;
    assert!(reply.is_err(), "the process aborted before it answered: {reply:?}");
    service.assert_aborts(Duration::from_secs(10)).await;

    let knob = [("ORDER_SERVICE_CRASH_AFTER_STEP", "charge")];
    let mut service = OrderService::start_with("memory", 0, &[], &knob).await;
    let order = create_order(&service, "gus").await;
    let reply = pay(&service, &order).await;
    assert!(reply.is_err(), "the process aborted before it answered: {reply:?}");
    service.assert_aborts(Duration::from_secs(10)).await;

    let knob = [("ORDER_SERVICE_CRASH_AFTER_ORDER_INSERT", "true")];
    let mut service = OrderService::start_with("memory", 0, &[], &knob).await;
    let body = r#"{"customer_id":"cus_1","amount_cents":100,"currency":"EUR"}"#;
    let reply = try_send(&service.at("/orders"), Some("gus"), Some(&fresh_key()), Some(body)).await;
    assert!(reply.is_err(), "the process aborted before it answered: {reply:?}");
    service.assert_aborts(Duration::from_secs(10)).await;
}

/// §11 of the contract: `order-client` through a proxy that loses 30 % of the
/// responses: one order and one charge per intent; a client with a key per
/// attempt duplicates.
async fn the_retrying_client_through_a_lossy_network_on_memory() {
    let service = OrderService::start("memory", 0).await;
    idem_tests::client_checks::at_most_once_through_a_lossy_network(&service, 11).await;
    idem_tests::client_checks::a_failed_intent_exits_non_zero();
}

idem_tests::both_builds!(
    contract_on_the_memory_store,
    storms_on_the_memory_store_run_once,
    crash_knobs_abort_the_process_on_the_memory_store,
    the_retrying_client_through_a_lossy_network_on_memory,
);
