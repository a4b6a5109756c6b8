//! The order service binary on its embedded memory store.

use idem_tests::order_checks::{contract, failure_outcomes, storms};
use idem_tests::service::OrderService;

#[actix_web::test]
async fn contract_on_the_memory_store() {
    let service = OrderService::start("memory", 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

#[actix_web::test]
async fn storms_on_the_memory_store_run_once() {
    let service = OrderService::start("memory", 200).await;
    storms(&[&service]).await;
}
