//! `#[idempotent]` with the Postgres store on a real actix-web server (four
//! workers, real sockets): 200 concurrent same-key requests run the handler
//! once, and a PostgreSQL outage is answered 503 problem+json without
//! running the handler, then recovers without restarting the app.

use actix_web::http::StatusCode;
use idem_runtime::Idem;
use idem_tests::backend::postgres_store;
use idem_tests::burst::{
    CLIENT_TIMEOUT, assert_burst_runs_once, assert_burst_waits, assert_outage_is_503, post, serve,
};
use idem_tests::http::{client, fresh_key};
use idem_tests::postgres_server::PostgresServer;

/// Pooled connections of the store under test.
const POOL_SIZE: u32 = 32;

#[actix_web::test]
async fn a_burst_of_same_key_requests_runs_the_handler_once() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix burst") else { return };
    let (server, hits) = serve(Idem::new(postgres_store(&url, POOL_SIZE).await));
    assert_burst_runs_once(&server.url, &hits).await;
    server.stop().await;
}

#[actix_web::test]
async fn a_burst_in_wait_mode_gets_one_response_for_all() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix wait") else { return };
    let (server, hits) = serve(Idem::new(postgres_store(&url, POOL_SIZE).await));
    assert_burst_waits(&server.url, &hits).await;
    server.stop().await;
}

#[actix_web::test]
async fn a_postgres_outage_is_503_without_running_the_handler_and_recovers() {
    let Some(postgres) = PostgresServer::start("postgres_actix outage", &[]) else { return };
    let (server, hits) = serve(Idem::new(postgres_store(&postgres.url("postgres"), POOL_SIZE).await));
    let (url, client) = (server.at("/orders"), client(CLIENT_TIMEOUT));
    let before = fresh_key();
    let created = post(&client, &url, &before, "before").await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");

    postgres.stop();
    assert_outage_is_503(&server.url, &hits).await;
    // A retry of the request completed before the outage cannot be
    // replayed either: 503, and the handler does not run again.
    let reply = post(&client, &url, &before, "before").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert_eq!(hits.get(), 1, "the handler ran without the store");

    // PostgreSQL comes back: the same app serves again, no restart, and the
    // record stored before the outage is still replayed.
    postgres.restart();
    let replay = post(&client, &url, &before, "before").await;
    assert!(replay.replayed && replay.body == created.body, "{replay:?}");
    let key = fresh_key();
    let after = post(&client, &url, &key, "after the outage").await;
    assert_eq!((after.status, after.replayed), (StatusCode::CREATED, false), "{after:?}");
    let replay = post(&client, &url, &key, "after the outage").await;
    assert!(replay.replayed && replay.body == after.body, "{replay:?}");
    assert_eq!(hits.get(), 2);
    server.stop().await;
}

#[actix_web::test]
async fn a_blocked_worker_keeps_every_lease_on_it() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix blocked worker") else { return };
    let (first, second) = (postgres_store(&url, POOL_SIZE).await, postgres_store(&url, POOL_SIZE).await);
    idem_tests::blocking::a_blocked_worker_keeps_every_lease_on_it(
        std::sync::Arc::new(first),
        std::sync::Arc::new(second),
    )
    .await;
}

#[actix_web::test]
async fn natural_keys_and_fingerprint_headers_on_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "natural keys on postgres") else { return };
    idem_tests::natural_keys::assert_natural_keys(Idem::new(postgres_store(&url, POOL_SIZE).await)).await;
}

#[actix_web::test]
async fn encrypted_records_on_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "encrypted records on postgres") else { return };
    let store = std::sync::Arc::new(postgres_store(&url, POOL_SIZE).await);
    let dump = |keys| idem_tests::sealed_checks::postgres_dump(&url, keys);
    idem_tests::sealed_checks::assert_sealed_records(store, Some(dump)).await;
}

#[actix_web::test]
async fn the_inbox_on_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "the inbox on postgres") else { return };
    idem_tests::inbox_checks::assert_inbox(std::sync::Arc::new(postgres_store(&url, POOL_SIZE).await)).await;
}

#[actix_web::test]
async fn operations_run_once_on_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "operations on postgres") else { return };
    idem_tests::once_checks::assert_once(std::sync::Arc::new(postgres_store(&url, POOL_SIZE).await)).await;
}

#[actix_web::test]
async fn the_inbox_holds_a_stopped_delivery_on_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "the inbox hold on postgres") else { return };
    let store = std::sync::Arc::new(postgres_store(&url, POOL_SIZE).await);
    idem_tests::inbox_checks::assert_a_stopped_delivery_is_held(store).await;
}

/// The inbox on a real Postgres whose lease renewals fail (injected in
/// front of it): the lapsed delivery is taken over, one completion in all.
#[actix_web::test]
async fn the_inbox_completes_once_when_a_lease_is_lost_on_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "the inbox lease loss on postgres") else { return };
    let store = std::sync::Arc::new(postgres_store(&url, POOL_SIZE).await);
    let faulty = idem_tests::faults::FaultyStore::over(store)
        .renewals_fail_between(std::time::Duration::ZERO, std::time::Duration::from_secs(3));
    idem_tests::inbox_checks::assert_lease_loss_completes_once(std::sync::Arc::new(faulty)).await;
}
