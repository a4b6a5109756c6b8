//! READ COMMITTED whatever the database's default: in a database whose
//! default is SERIALIZABLE, 64 concurrent claims of one key all succeed
//! (at SERIALIZABLE, `INSERT ... ON CONFLICT DO UPDATE` racing a concurrent
//! insert fails with "could not serialize access"), and exactly one wins.
//! Both ways of building the store are checked: a pool the store connects
//! itself, and a caller's pool handed to `PostgresStore::new`.
//!
//! And the bounds on a session that went silent in a transaction (a
//! vanished host, a frozen process holding a record's row lock): server-side
//! TCP keepalives and an idle-in-transaction timeout on every connection.

use std::sync::Arc;

use idem_runtime::PostgresStore;
use idem_runtime::store::testing::{fingerprint, fresh_key};
use idem_runtime::store::{Claim, FencingToken, Store};
use idem_tests::backend::postgres_store;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::Barrier;

const CLAIMERS: usize = 64;
const LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(base, query)| (base, Some(query)));
    let host = base.find("://").map_or(0, |at| at + 3);
    let base = base[host..].find('/').map_or(base, |slash| &base[..host + slash]);
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

async fn isolation(pool: &PgPool) -> String {
    sqlx::query_scalar("SHOW transaction_isolation").fetch_one(pool).await.expect("SHOW transaction_isolation")
}

/// `CLAIMERS` tasks claim one fresh key at once; every claim must succeed.
async fn race(store: Arc<PostgresStore>) {
    let key = fresh_key();
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|_| {
            let (store, key, barrier) = (Arc::clone(&store), key.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(&key, &fingerprint("serializable"), LEASE, LEASE).await
            })
        })
        .collect();
    let mut claims = Vec::new();
    for task in tasks {
        claims.push(task.await.expect("claimer task").unwrap_or_else(|e| panic!("a claim failed: {e}")));
    }
    let winners = claims.iter().filter(|c| matches!(c, Claim::Acquired { .. })).count();
    let in_flight = claims.iter().filter(|c| matches!(c, Claim::InFlight { .. })).count();
    assert_eq!((winners, in_flight), (1, CLAIMERS - 1), "{claims:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_run_at_read_committed_in_a_serializable_database() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres_isolation") else {
        return;
    };
    let admin = PgPoolOptions::new().max_connections(1).connect(&url).await.expect("connecting");
    let database = format!("idem_serializable_{}", FencingToken::generate().to_hex());
    for statement in [
        format!("CREATE DATABASE {database}"),
        format!("ALTER DATABASE {database} SET default_transaction_isolation = 'serializable'"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&admin).await.expect("preparing the database");
    }
    let url = with_database(&url, &database);

    // The database's default, as any other client sees it.
    let plain = PgPoolOptions::new().max_connections(1).connect(&url).await.expect("connecting");
    assert_eq!(isolation(&plain).await, "serializable");
    plain.close().await;

    // A store that connects its own pool.
    let store = postgres_store(&url, CLAIMERS as u32 + 6).await;
    assert_eq!(isolation(store.pool()).await, "read committed");
    race(Arc::new(store.clone())).await;
    store.pool().close().await;

    // A caller's pool, not connected yet, handed to the store.
    let options: PgConnectOptions = url.parse().expect("a valid URL");
    let pool = PgPoolOptions::new().max_connections(CLAIMERS as u32 + 6).connect_lazy_with(options);
    let store = PostgresStore::new(pool);
    store.migrate().await.expect("migrating");
    assert_eq!(isolation(store.pool()).await, "read committed");
    race(Arc::new(store.clone())).await;
    store.pool().close().await;

    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {database} WITH (FORCE)")))
        .execute(&admin)
        .await
        .expect("dropping the database");
    admin.close().await;
}

#[tokio::test]
async fn every_connection_bounds_how_long_a_silent_session_holds_its_locks() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "postgres silent sessions") else {
        return;
    };
    let store = postgres_store(&url, 2).await;
    let show = |setting: &'static str| {
        let pool = store.pool().clone();
        async move {
            let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
                .fetch_one(&pool)
                .await
                .expect("SHOW");
            value
        }
    };
    assert_eq!(show("idle_in_transaction_session_timeout").await, "5min");
    assert_eq!(show("tcp_keepalives_idle").await, "15");
    assert_eq!(show("tcp_keepalives_interval").await, "5");
    assert_eq!(show("tcp_keepalives_count").await, "4");
    // A value of the caller's own is kept.
    let separator = if url.contains('?') { '&' } else { '?' };
    let own = format!("{url}{separator}options=-c%20idle_in_transaction_session_timeout%3D30s");
    let theirs = PostgresStore::connect(&own).await.expect("connecting");
    let value: String =
        sqlx::query_scalar("SHOW idle_in_transaction_session_timeout").fetch_one(theirs.pool()).await.unwrap();
    assert_eq!(value, "30s");
}
