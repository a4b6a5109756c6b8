//! The order service binary on Redis: the contract, storms across two
//! processes, and a process killed in the middle of a payment.

use std::time::Duration;

use idem_tests::order_checks::{
    contract, failure_outcomes, kill_during_payment, sigterm_drains_a_payment_whose_client_left, storms,
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
