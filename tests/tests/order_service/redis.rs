//! The order service binary on Redis: the contract, storms across two
//! processes, a process killed in the middle of a payment, and processes
//! that abort after the charge or the order insert (no transaction here:
//! the derived keys keep the retry from doing it twice).

use std::time::Duration;

use idem_tests::crash_checks::{
    crash_after_charge, crash_after_order_insert, create_after_the_lease, pay_after_the_lease,
};
use idem_tests::order_checks::{
    contract, failure_outcomes, kill_during_payment, sigterm_drains_a_payment_whose_client_left, stats, storms,
};
use idem_tests::redis_server::RedisServer;
use idem_tests::service::OrderService;

#[actix_web::test]
async fn contract_on_redis() {
    let Some(redis) = RedisServer::start("contract_on_redis") else { return };
    let service = OrderService::start(&redis.url(), 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

#[actix_web::test]
async fn storms_across_two_processes_on_one_redis_run_once() {
    let Some(redis) = RedisServer::start("storms_across_two_processes_on_one_redis_run_once") else { return };
    let first = OrderService::start(&redis.url(), 200).await;
    let second = OrderService::start(&redis.url(), 200).await;
    storms(&[&first, &second]).await;
}

#[actix_web::test]
async fn kill_during_a_payment_on_redis_charges_once_and_sigterm_drains() {
    let Some(redis) = RedisServer::start("kill_during_a_payment_on_redis_charges_once_and_sigterm_drains") else {
        return;
    };
    let mut service = OrderService::start(&redis.url(), 3000).await;
    kill_during_payment(&mut service).await;
    sigterm_drains_a_payment_whose_client_left(&mut service, Duration::from_millis(3000)).await;
}

#[actix_web::test]
async fn a_crash_after_the_charge_on_redis_leaves_one_charge() {
    let Some(redis) = RedisServer::start("a_crash_after_the_charge_on_redis_leaves_one_charge") else { return };
    let mut service = OrderService::start_with(&redis.url(), 0, &["--crash-after-charge"], &[]).await;
    let crashed = crash_after_charge(&mut service).await;
    // The retry takes the lapsed lease over and charges again with the same
    // derived key: the provider returns the first charge.
    pay_after_the_lease(&service, &crashed).await;
}

#[actix_web::test]
async fn a_crash_after_the_order_insert_on_redis_leaves_one_order() {
    let Some(redis) = RedisServer::start("a_crash_after_the_order_insert_on_redis_leaves_one_order") else { return };
    let knob = [("ORDER_SERVICE_CRASH_AFTER_ORDER_INSERT", "1")];
    let mut service = OrderService::start_with(&redis.url(), 0, &[], &knob).await;
    let crashed = crash_after_order_insert(&mut service).await;
    // No transaction on Redis: the order stayed. The retry builds the same
    // id from the derived key, and the repository keeps the first order.
    assert_eq!(stats(&service).await.0, crashed.orders_before + 1, "the order was written before the crash");
    create_after_the_lease(&service, &crashed).await;
}
