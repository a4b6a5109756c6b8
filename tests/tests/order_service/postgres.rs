//! The order service binary on Postgres: the contract, storms across two
//! processes, and a process killed in the middle of a payment.

use idem_tests::order_checks::{contract, kill_during_payment, storms};
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
}

#[actix_web::test]
async fn storms_across_two_processes_on_one_postgres_run_once() {
    let Some(pg) = server("storms_across_two_processes_on_one_postgres_run_once") else { return };
    let first = OrderService::start(&pg.url("postgres"), 200).await;
    let second = OrderService::start(&pg.url("postgres"), 200).await;
    storms(&[&first, &second]).await;
}

#[actix_web::test]
async fn kill_during_a_payment_on_postgres_charges_once() {
    let Some(pg) = server("kill_during_a_payment_on_postgres_charges_once") else { return };
    let mut service = OrderService::start(&pg.url("postgres"), 3000).await;
    kill_during_payment(&mut service).await;
}
