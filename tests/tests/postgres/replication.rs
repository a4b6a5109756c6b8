//! What a failover can lose, checked at connect: a primary with a standby
//! that replicates asynchronously is refused, or warned about, as
//! configured; once its commits wait for the standby, it is accepted.

use std::time::{Duration, Instant};

use idem_runtime::{OnAsyncStandby, PostgresStore, StoreError};
use idem_tests::logs::Logs;
use idem_tests::postgres_server::PostgresServer;

/// Standbys streaming from the store's server.
async fn standbys(store: &PostgresStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_replication").fetch_one(store.pool()).await.unwrap()
}

#[tokio::test]
async fn an_asynchronous_standby_is_refused_or_warned_about_as_configured() {
    let test = "an_asynchronous_standby_is_refused_or_warned_about_as_configured";
    if idem_tests::backend::url("IDEM_POSTGRES_URL", test).is_none() {
        return;
    }
    let Some(primary) = PostgresServer::start(test, &[]) else { return };
    let url = primary.url("postgres");
    let store = PostgresStore::connect(&url).await.expect("connecting to the private primary");
    store.check_server(OnAsyncStandby::Refuse).await.expect("without a standby, a failover loses nothing");

    let _standby = PostgresServer::start_standby(test, &primary);
    let deadline = Instant::now() + Duration::from_secs(20);
    while standbys(&store).await == 0 {
        assert!(Instant::now() < deadline, "the standby never streamed from the primary");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match store.check_server(OnAsyncStandby::Refuse).await {
        Err(StoreError::Misconfigured { message, .. }) => {
            assert!(message.contains("asynchronously") && message.contains("synchronous_standby_names"), "{message}");
            assert!(message.contains(&format!("127.0.0.1:{}", primary.port())), "names the server: {message}");
        }
        other => panic!("an asynchronous standby is refused when asked: {other:?}"),
    }

    // The default: connected, with a warning that says what can be lost.
    let logs = Logs::default();
    let capture = logs.capture(tracing::Level::WARN);
    let warned = PostgresStore::connect(&url).await.expect("connect warns and connects");
    drop(capture);
    let text = logs.text();
    assert!(text.contains("replicating asynchronously") && text.contains("runs its handler a second time"), "{text}");
    drop(warned);

    // Commits that wait for the standby lose nothing at failover.
    sqlx::query("ALTER SYSTEM SET synchronous_standby_names = '*'").execute(store.pool()).await.unwrap();
    sqlx::query("SELECT pg_reload_conf()").execute(store.pool()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(error) = store.check_server(OnAsyncStandby::Refuse).await {
        assert!(Instant::now() < deadline, "a synchronous standby is accepted: {error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.pool().close().await;
}
