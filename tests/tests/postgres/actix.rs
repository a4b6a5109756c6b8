//! `#[idempotent]` with the Postgres store on a real actix-web server (four
//! workers, real sockets): 200 concurrent same-key requests run the handler
//! once, and a PostgreSQL outage is answered 503 problem+json without
//! running the handler, then recovers without restarting the app.

use actix_web::http::StatusCode;
use idem_runtime::{FencingToken, Idem, PostgresStore};
use idem_tests::burst::{assert_burst_runs_once, assert_burst_waits, assert_outage_is_503, client, post, serve};
use idem_tests::postgres_server::PostgresServer;

async fn store(url: &str) -> PostgresStore {
    let options = PostgresStore::pool_options().max_connections(32);
    let store = PostgresStore::connect_with(url, options).await.expect("connecting");
    store.migrate().await.expect("migrating");
    store
}

#[actix_web::test]
async fn a_burst_of_same_key_requests_runs_the_handler_once() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix burst") else { return };
    let (base, server, hits) = serve(Idem::new(store(&url).await));
    assert_burst_runs_once(&base, &hits).await;
    server.stop(true).await;
}

#[actix_web::test]
async fn a_burst_in_wait_mode_gets_one_response_for_all() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_actix wait") else { return };
    let (base, server, hits) = serve(Idem::new(store(&url).await));
    assert_burst_waits(&base, &hits).await;
    server.stop(true).await;
}

#[actix_web::test]
async fn a_postgres_outage_is_503_without_running_the_handler_and_recovers() {
    let Some(postgres) = PostgresServer::start("postgres_actix outage", &[]) else { return };
    let (base, server, hits) = serve(Idem::new(store(&postgres.url("postgres")).await));
    let (url, client) = (format!("{base}/orders"), client());
    let before = FencingToken::generate().to_hex();
    let created = post(&client, &url, &before, "before").await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");

    postgres.stop();
    assert_outage_is_503(&base, &hits).await;
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
    let key = FencingToken::generate().to_hex();
    let after = post(&client, &url, &key, "after the outage").await;
    assert_eq!((after.status, after.replayed), (StatusCode::CREATED, false), "{after:?}");
    let replay = post(&client, &url, &key, "after the outage").await;
    assert!(replay.replayed && replay.body == after.body, "{replay:?}");
    assert_eq!(hits.get(), 2);
    server.stop(true).await;
}
