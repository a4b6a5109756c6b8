//! What the store reads of a server's settings at connect: an evicting
//! `maxmemory-policy` is refused (or only logged, when asked), and a server
//! that refuses `CONFIG` is accepted.

use idem_runtime::{OnEviction, RedisConnection, RedisStore, StoreError};
use idem_tests::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread")]
async fn an_evicting_server_is_refused_unless_told_to_warn() {
    let Some(redis) = RedisServer::start("an_evicting_server_is_refused_unless_told_to_warn") else { return };
    let mut admin = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("volatile-lru")
        .query_async(&mut admin)
        .await
        .unwrap();

    let error = RedisStore::connect(&redis.url()).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Misconfigured { message, .. }
            if message.contains("maxmemory-policy volatile-lru") && message.contains("noeviction")),
        "{error}"
    );

    let connection = RedisConnection::open(&redis.url(), &RedisStore::default_config()).await.unwrap();
    let store = RedisStore::from_connection(connection);
    store.check_server(OnEviction::Warn).await.expect("warned, not refused");
    assert!(matches!(store.check_server(OnEviction::Refuse).await, Err(StoreError::Misconfigured { .. })));

    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query_async(&mut admin)
        .await
        .unwrap();
    RedisStore::connect(&redis.url()).await.expect("noeviction is accepted");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_config_is_accepted() {
    let args = ["--rename-command", "CONFIG", ""];
    let Some(redis) = RedisServer::start_with("a_server_without_config_is_accepted", &args) else { return };
    let store = RedisStore::connect(&redis.url()).await.expect("CONFIG disabled is tolerated");
    let key = idem_runtime::store::testing::fresh_key();
    let fingerprint = idem_runtime::store::testing::fingerprint("a");
    let lease = std::time::Duration::from_secs(5);
    use idem_runtime::store::Store;
    assert!(matches!(
        store.claim(&key, &fingerprint, lease, lease * 2).await.unwrap(),
        idem_runtime::store::Claim::Acquired { .. }
    ));
}
