//! The order service binary on Postgres: the contract, storms across two
//! processes, a process killed in the middle of a payment, and processes
//! that abort inside a transactional handler (after the charge, after the
//! order insert), with the tables read directly.

use std::time::Duration;

use idem_tests::crash_checks::{
    ORDER_OWNER, crash_after_charge, crash_after_order_insert, crash_after_step, create_after_the_lease,
    pay_after_the_lease,
};
use idem_tests::hold_checks::held_until_an_operator_settles;
use idem_tests::order_checks::{
    contract, failure_outcomes, kill_during_payment, sigterm_drains_a_payment_whose_client_left, stats, storms,
};
use idem_tests::postgres_server::PostgresServer;
use idem_tests::service::OrderService;
use sqlx::PgPool;

fn server(test: &str) -> Option<PostgresServer> {
    PostgresServer::start(test, &[("max_connections", "200")])
}

async fn contract_on_postgres() {
    let Some(pg) = server("contract_on_postgres") else { return };
    let service = OrderService::start(&pg.url("postgres"), 400).await;
    contract(&service).await;
    failure_outcomes(&service).await;
}

async fn storms_across_two_processes_on_one_postgres_run_once() {
    let Some(pg) = server("storms_across_two_processes_on_one_postgres_run_once") else { return };
    let first = OrderService::start(&pg.url("postgres"), 200).await;
    let second = OrderService::start(&pg.url("postgres"), 200).await;
    storms(&[&first, &second]).await;
    idem_tests::webhook_checks::webhooks(&[&first, &second]).await;
}

/// The crash scenarios side by side, each on its own Postgres: each waits
/// out a dead owner's lease, so together they wait once.
async fn crashes_on_postgres_never_charge_or_order_twice() {
    futures_util::future::join5(
        kill_during_a_payment_on_postgres_charges_once_and_sigterm_drains(),
        a_crash_after_the_charge_on_postgres_leaves_one_charge_and_one_payment_row(),
        a_crash_after_the_step_on_postgres_charges_once_without_provider_dedup(),
        a_crash_after_the_order_insert_on_postgres_leaves_one_order(),
        held_payments_on_postgres_wait_for_an_operator(),
    )
    .await;
}

async fn kill_during_a_payment_on_postgres_charges_once_and_sigterm_drains() {
    let Some(pg) = server("kill_during_a_payment_on_postgres_charges_once_and_sigterm_drains") else { return };
    let mut service = OrderService::start(&pg.url("postgres"), 3000).await;
    kill_during_payment(&mut service).await;
    sigterm_drains_a_payment_whose_client_left(&mut service, Duration::from_millis(3000)).await;
}

/// Rows of `order_service_payments` for `order_id`.
async fn payment_rows(db: &PgPool, order_id: &str) -> i64 {
    let sql = "SELECT count(*) FROM order_service_payments WHERE order_id = $1";
    sqlx::query_scalar(sql).bind(order_id).fetch_one(db).await.expect("counting payment rows")
}

/// Events in the outbox table (no notifier runs here to take them).
async fn events(db: &PgPool) -> u64 {
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM idem_outbox").fetch_one(db).await.expect("counting events");
    count as u64
}

/// Rows of `order_service_orders` owned by `owner`.
async fn order_rows(db: &PgPool, owner: &str) -> i64 {
    let sql = "SELECT count(*) FROM order_service_orders WHERE owner = $1";
    sqlx::query_scalar(sql).bind(owner).fetch_one(db).await.expect("counting order rows")
}

async fn a_crash_after_the_charge_on_postgres_leaves_one_charge_and_one_payment_row() {
    let Some(pg) = server("a_crash_after_the_charge_on_postgres_leaves_one_charge_and_one_payment_row") else { return };
    let mut service = OrderService::start_with(&pg.url("postgres"), 0, &["--crash-after-charge"], &[]).await;
    let db = PgPool::connect(&pg.url("postgres")).await.expect("connecting to PostgreSQL");
    let crashed = crash_after_charge(&mut service).await;
    // The payment row was written in the handler's transaction, which the
    // abort left uncommitted; the provider's charge is its own.
    assert_eq!(payment_rows(&db, &crashed.order_id).await, 0, "the crash left no payment row");
    pay_after_the_lease(&service, &crashed).await;
    assert_eq!(payment_rows(&db, &crashed.order_id).await, 1, "one payment row, committed with the response");
}

/// The provider charges every call: only the recorded step keeps the
/// takeover from charging again. The step's record is written outside the
/// handler's transaction, which the abort left without a payment row.
async fn a_crash_after_the_step_on_postgres_charges_once_without_provider_dedup() {
    let Some(pg) = server("a_crash_after_the_step_on_postgres_charges_once_without_provider_dedup") else { return };
    let knobs = ["--provider-dedup", "off", "--crash-after-step", "charge"];
    let mut service = OrderService::start_with(&pg.url("postgres"), 0, &knobs, &[]).await;
    let db = PgPool::connect(&pg.url("postgres")).await.expect("connecting to PostgreSQL");
    let crashed = crash_after_step(&mut service).await;
    assert_eq!(payment_rows(&db, &crashed.order_id).await, 0, "the crash left no payment row");
    pay_after_the_lease(&service, &crashed).await;
    assert_eq!(payment_rows(&db, &crashed.order_id).await, 1, "one payment row, committed with the response");
}

async fn held_payments_on_postgres_wait_for_an_operator() {
    let Some(pg) = server("held_payments_on_postgres_wait_for_an_operator") else { return };
    let mut service = OrderService::start_with(&pg.url("postgres"), 60_000, &["--on-lapse", "hold"], &[]).await;
    held_until_an_operator_settles(&mut service).await;
}

async fn a_crash_after_the_order_insert_on_postgres_leaves_one_order() {
    let Some(pg) = server("a_crash_after_the_order_insert_on_postgres_leaves_one_order") else { return };
    let mut service = OrderService::start_with(&pg.url("postgres"), 0, &["--crash-after-order-insert"], &[]).await;
    let db = PgPool::connect(&pg.url("postgres")).await.expect("connecting to PostgreSQL");
    let crashed = crash_after_order_insert(&mut service).await;
    // The order row was inserted in the handler's transaction, which the
    // abort left uncommitted.
    assert_eq!(order_rows(&db, ORDER_OWNER).await, 0, "the crash left no order row");
    assert_eq!(stats(&service).await.0, crashed.orders_before);
    assert_eq!(events(&db).await, crashed.orders_before, "the rolled-back order emitted no event");
    create_after_the_lease(&service, &crashed).await;
    assert_eq!(order_rows(&db, ORDER_OWNER).await, 1, "one order row, committed with the response");
    assert_eq!(events(&db).await, crashed.orders_before + 1, "one event, committed with the order");
}

/// The event path on Postgres: the order's `order.created` written to the
/// outbox table in the order's transaction, two notifiers that redeliver on
/// purpose (one killed and restarted), then one that crashes before its
/// acknowledgement and one right after sending: exactly one notification
/// per order.
async fn every_order_on_postgres_is_notified_exactly_once() {
    let Some(pg) = server("every_order_on_postgres_is_notified_exactly_once") else { return };
    let service = OrderService::start(&pg.url("postgres"), 0).await;
    let db = PgPool::connect(&pg.url("postgres")).await.expect("connecting to PostgreSQL");
    let transport = idem_runtime::outbox::PostgresOutbox::new(db.clone()).topic("order.created");
    idem_tests::notifier_checks::two_notifiers_and_a_kill(&service, &pg.url("postgres"), &transport).await;
    idem_tests::notifier_checks::a_crash_before_the_ack(&service, &pg.url("postgres"), &transport).await;
    idem_tests::notifier_checks::a_crash_after_the_send(&service, &pg.url("postgres"), &transport).await;
    let (rows, orders): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT order_id) FROM order_notifier_notifications")
            .fetch_one(&db)
            .await
            .expect("counting notifications");
    assert_eq!(rows, orders, "no order notified twice");
    assert_eq!(rows as u64, stats(&service).await.0);
}

/// §11 of the contract: `order-client` through a proxy that loses 30 % of the
/// responses, on Postgres: one order and one charge per intent.
async fn the_retrying_client_through_a_lossy_network_on_postgres() {
    let Some(pg) = server("the_retrying_client_through_a_lossy_network_on_postgres") else { return };
    let service = OrderService::start(&pg.url("postgres"), 0).await;
    idem_tests::client_checks::at_most_once_through_a_lossy_network(&service, 13).await;
}

/// The refunds table renamed away for a while: the refund's insert fails
/// (undefined table) and nothing is written.
async fn a_refund_during_a_backend_error_on_postgres_counts_once() {
    let Some(pg) = server("a_refund_during_a_backend_error_on_postgres_counts_once") else { return };
    let service = OrderService::start(&pg.url("postgres"), 0).await;
    let pool = PgPool::connect(&pg.url("postgres")).await.expect("connecting");
    let (breaking, repairing) = (pool.clone(), pool);
    idem_tests::webhook_checks::a_refund_during_a_backend_error_counts_once(
        &service,
        async move || {
            sqlx::query("ALTER TABLE order_service_refunds RENAME TO order_service_refunds_away")
                .execute(&breaking)
                .await
                .unwrap();
        },
        async move || {
            sqlx::query("ALTER TABLE order_service_refunds_away RENAME TO order_service_refunds")
                .execute(&repairing)
                .await
                .unwrap();
        },
    )
    .await;
}

idem_tests::both_builds!(
    contract_on_postgres,
    storms_across_two_processes_on_one_postgres_run_once,
    a_refund_during_a_backend_error_on_postgres_counts_once,
    every_order_on_postgres_is_notified_exactly_once,
    the_retrying_client_through_a_lossy_network_on_postgres;
    crashes_on_postgres_never_charge_or_order_twice,
);
