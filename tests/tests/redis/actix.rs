//! `#[idempotent]` with the Redis store on a real actix-web server (four
//! workers, real sockets): a burst of same-key requests runs the handler
//! once, and a Redis outage is answered 503 without running the handler,
//! then recovers without restarting the app.

use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use idem_runtime::{Idem, RedisStore};
use idem_tests::backend::redis_store;
use idem_tests::burst::{
    CLIENT_TIMEOUT, assert_burst_runs_once, assert_burst_waits, assert_outage_is_503, post, serve,
};
use idem_tests::http::{client, fresh_key};
use idem_tests::redis_server::RedisServer;

#[actix_web::test]
async fn a_burst_of_same_key_requests_runs_the_handler_once() {
    let Some(store) = redis_store("a_burst_of_same_key_requests_runs_the_handler_once").await else { return };
    let (server, hits) = serve(Idem::new(store));
    assert_burst_runs_once(&server.url, &hits).await;
    server.stop().await;
}

#[actix_web::test]
async fn a_burst_in_wait_mode_gets_one_response_for_all() {
    let Some(store) = redis_store("a_burst_in_wait_mode_gets_one_response_for_all").await else { return };
    let (server, hits) = serve(Idem::new(store));
    assert_burst_waits(&server.url, &hits).await;
    server.stop().await;
}

#[actix_web::test]
async fn a_redis_outage_is_503_without_running_the_handler_and_recovers() {
    let Some(mut redis) = RedisServer::start("a_redis_outage_is_503_without_running_the_handler_and_recovers") else {
        return;
    };
    let store = RedisStore::connect(&redis.url()).await.expect("connecting to the private Redis");
    let (server, hits) = serve(Idem::new(store));
    redis.stop();
    assert_outage_is_503(&server.url, &hits).await;

    // Redis comes back (empty): the same app serves again, no restart.
    redis.restart();
    let (url, client, key) = (server.at("/orders"), client(CLIENT_TIMEOUT), fresh_key());
    let started = Instant::now();
    let created = loop {
        let reply = post(&client, &url, &key, "after the outage").await;
        match reply.status {
            StatusCode::CREATED => break reply,
            StatusCode::SERVICE_UNAVAILABLE if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => panic!("the app did not recover: {reply:?}"),
        }
    };
    assert!(!created.replayed);
    let replay = post(&client, &url, &key, "after the outage").await;
    assert!(replay.replayed && replay.body == created.body, "{replay:?}");
    assert_eq!(hits.get(), 1);
    server.stop().await;
}

#[actix_web::test]
async fn a_blocked_worker_keeps_every_lease_on_it() {
    let Some(first) = redis_store("a_blocked_worker_keeps_every_lease_on_it").await else { return };
    let Some(second) = redis_store("a_blocked_worker_keeps_every_lease_on_it").await else { return };
    idem_tests::blocking::a_blocked_worker_keeps_every_lease_on_it(
        std::sync::Arc::new(first),
        std::sync::Arc::new(second),
    )
    .await;
}

#[actix_web::test]
async fn encrypted_records_on_redis() {
    let Some(url) = idem_tests::backend::url("IDEM_REDIS_URL", "encrypted records on redis") else { return };
    let store = std::sync::Arc::new(RedisStore::connect(&url).await.expect("connecting to Redis"));
    let dump = |keys| idem_tests::sealed_checks::redis_dump(&url, keys);
    idem_tests::sealed_checks::assert_sealed_records(store, Some(dump)).await;
}

#[actix_web::test]
async fn encrypted_records_on_a_redis_cluster() {
    let Some(store) = idem_tests::backend::redis_cluster_store("encrypted records on a redis cluster").await else {
        return;
    };
    let no_dump = None::<fn(Vec<idem_runtime::store::StorageKey>) -> std::future::Ready<Vec<u8>>>;
    idem_tests::sealed_checks::assert_sealed_records(std::sync::Arc::new(store), no_dump).await;
}

#[actix_web::test]
async fn natural_keys_and_fingerprint_headers_on_redis() {
    let Some(store) = redis_store("natural_keys_and_fingerprint_headers_on_redis").await else { return };
    idem_tests::natural_keys::assert_natural_keys(Idem::new(store)).await;
}

#[actix_web::test]
async fn the_inbox_on_redis() {
    let Some(store) = redis_store("the_inbox_on_redis").await else { return };
    idem_tests::inbox_checks::assert_inbox(std::sync::Arc::new(store)).await;
}

#[actix_web::test]
async fn operations_run_once_on_redis() {
    let Some(store) = redis_store("operations_run_once_on_redis").await else { return };
    idem_tests::once_checks::assert_once(std::sync::Arc::new(store)).await;
}

#[actix_web::test]
async fn the_inbox_holds_a_stopped_delivery_on_redis() {
    let Some(store) = redis_store("the_inbox_holds_a_stopped_delivery_on_redis").await else { return };
    idem_tests::inbox_checks::assert_a_stopped_delivery_is_held(std::sync::Arc::new(store)).await;
}

/// The inbox on a real Redis whose lease renewals fail (injected in front
/// of it): the lapsed delivery is taken over, one completion in all.
#[actix_web::test]
async fn the_inbox_completes_once_when_a_lease_is_lost_on_redis() {
    let Some(store) = redis_store("the_inbox_completes_once_when_a_lease_is_lost_on_redis").await else { return };
    let faulty = idem_tests::faults::FaultyStore::over(std::sync::Arc::new(store))
        .renewals_fail_between(std::time::Duration::ZERO, std::time::Duration::from_secs(3));
    idem_tests::inbox_checks::assert_lease_loss_completes_once(std::sync::Arc::new(faulty)).await;
}
