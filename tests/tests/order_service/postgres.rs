//! The order service binary on Postgres: the contract, storms across two
//! processes, and a process killed in the middle of a payment.

use std::time::Duration;

use idem_tests::order_checks::{
    contract, failure_outcomes, kill_during_payment, sigterm_drains_a_payment_whose_client_left, storms,
};
use idem_tests::postgres_server::PostgresServer;
use idem_tests::service::OrderService;

fn server(test: &str) -> Option<PostgresServer> {
    PostgresServer::start(test, &[("max_connections", "200")])
}

#[actix_web::test]
async fn contract_on_postgres() {
    let Some(pg) = server("contract_on_postgres") else { return };
    let service = OrderService::start(&pg.url("postgres"), 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

#[actix_web::test]
async fn storms_across_two_processes_on_one_postgres_run_once() {
    let Some(pg) = server("storms_across_two_processes_on_one_postgres_run_once") else { return };
    let first = OrderService::start(&pg.url("postgres"), 200).await;
    let second = OrderService::start(&pg.url("postgres"), 200).await;
    storms(&[&first, &second]).await;
}

#[actix_web::test]
async fn kill_during_a_payment_on_postgres_charges_once_and_sigterm_drains() {
    let Some(pg) = server("kill_during_a_payment_on_postgres_charges_once_and_sigterm_drains") else { return };
    let mut service = OrderService::start(&pg.url("postgres"), 3000).await;
    kill_during_payment(&mut service).await;
    sigterm_drains_a_payment_whose_client_left(&mut service, Duration::from_millis(3000)).await;
}
