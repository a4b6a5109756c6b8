//! Expired rows go, through `purge_expired` and through the background
//! sweeper; live rows (in flight and completed) stay; batches are bounded.
//!
//! Each test works in a table of its own on the shared server, so rows of
//! other tests cannot change the counts.

use std::time::{Duration, Instant};

use idem_runtime::PostgresStore;
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, FencingToken, PurgeExpired, StorageKey, Store};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(200);
const PAST_SHORT: Duration = Duration::from_millis(600);

/// A store in a fresh table, dropped by [`Table::drop_table`].
struct Table {
    store: PostgresStore,
    name: String,
}

impl Table {
    async fn new(test: &str) -> Option<Self> {
        let url = idem_tests::backend::url("IDEM_POSTGRES_URL", test)?;
        let name = format!("idem_sweep_{}", FencingToken::generate().to_hex());
        let pool = PostgresStore::pool_options().connect(&url).await.expect("connecting");
        let store = PostgresStore::with_table(pool, &name).expect("valid table name");
        store.migrate().await.expect("migrating");
        Some(Self { store, name })
    }

    async fn rows(&self) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {}", self.name)))
            .fetch_one(self.store.pool())
            .await
            .expect("counting rows")
    }

    async fn drop_table(self) {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {}", self.name)))
            .execute(self.store.pool())
            .await
            .expect("dropping the table");
    }
}

async fn acquire(store: &PostgresStore, key: &StorageKey, lease: Duration) -> FencingToken {
    // The record lives as long as its lease: a lapsed lease expires with it.
    match store.claim(key, &fingerprint("a"), lease, lease).await.expect("claim") {
        Claim::Acquired { token, .. } => token,
        other => panic!("expected acquired, got {other:?}"),
    }
}

/// Two live rows (completed, in flight) and `expired` rows that expire
/// within [`SHORT`]: half in flight with a record TTL as short as their
/// lease, half completed with a short TTL.
async fn populate(store: &PostgresStore, expired: usize) -> (StorageKey, StorageKey) {
    let (completed, in_flight) = (fresh_key(), fresh_key());
    let token = acquire(store, &completed, LONG).await;
    assert_eq!(store.complete(&completed, token, &response(b"live"), LONG).await.unwrap(), Fence::Held);
    acquire(store, &in_flight, LONG).await;
    for i in 0..expired {
        let key = fresh_key();
        let token = acquire(store, &key, SHORT).await;
        if i % 2 == 0 {
            assert_eq!(store.complete(&key, token, &response(b"old"), SHORT).await.unwrap(), Fence::Held);
        }
    }
    (completed, in_flight)
}

async fn assert_live(store: &PostgresStore, (completed, in_flight): &(StorageKey, StorageKey)) {
    assert_eq!(store.claim(completed, &fingerprint("a"), LONG, LONG).await.unwrap(), Claim::Replay(response(b"live")));
    assert!(matches!(store.claim(in_flight, &fingerprint("a"), LONG, LONG).await.unwrap(), Claim::InFlight { .. }));
}

#[tokio::test(flavor = "multi_thread")]
async fn purge_deletes_expired_rows_in_bounded_batches() {
    let Some(table) = Table::new("postgres_sweeper purge").await else {
        return;
    };
    let store = &table.store;
    let live = populate(store, 5).await;
    assert_eq!(store.purge_expired(100).await.unwrap(), 0, "nothing has expired yet");
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(table.rows().await, 7);
    assert_eq!(store.purge_expired(2).await.unwrap(), 2);
    assert_eq!(table.rows().await, 5);
    assert_eq!(store.purge_expired(2).await.unwrap(), 2);
    assert_eq!(store.purge_expired(2).await.unwrap(), 1);
    assert_eq!(store.purge_expired(2).await.unwrap(), 0);
    assert_eq!(table.rows().await, 2, "the live rows stay");
    assert_live(store, &live).await;
    table.drop_table().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn purge_walks_the_expiry_index() {
    let Some(table) = Table::new("postgres_sweeper index").await else {
        return;
    };
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN SELECT key FROM {} WHERE expires_at <= now() ORDER BY expires_at LIMIT 2 FOR UPDATE SKIP LOCKED",
        table.name
    )))
    .fetch_all(table.store.pool())
    .await
    .expect("explaining the purge query");
    let index = format!("{}_expires_at_idx", table.name);
    assert!(plan.iter().any(|line| line.contains("Index Scan") && line.contains(&index)), "{plan:#?}");
    table.drop_table().await;
}

async fn wait_for_rows(table: &Table, expected: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let rows = table.rows().await;
        if rows == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{rows} rows after {within:?}, expected {expected}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn background_sweeper_deletes_expired_rows_until_stopped() {
    let Some(table) = Table::new("postgres_sweeper background").await else {
        return;
    };
    let store = &table.store;
    let live = populate(store, 5).await;
    // Batches of 2: one sweep must go round several times to delete all 5.
    let sweeper = store.spawn_sweeper(Duration::from_millis(100), 2);
    wait_for_rows(&table, 2, Duration::from_secs(5)).await;
    assert_live(store, &live).await;
    assert!(!sweeper.is_finished());
    sweeper.stop().await;

    // Stopped: a row that expires now stays until someone purges it.
    populate(store, 1).await;
    tokio::time::sleep(PAST_SHORT + Duration::from_millis(400)).await;
    assert_eq!(table.rows().await, 5, "a stopped sweeper deletes nothing");

    // Dropping the handle stops the sweeper too.
    let sweeper = store.spawn_sweeper(Duration::from_millis(100), 10);
    wait_for_rows(&table, 4, Duration::from_secs(5)).await;
    drop(sweeper);
    tokio::time::sleep(Duration::from_millis(200)).await;
    populate(store, 1).await;
    tokio::time::sleep(PAST_SHORT + Duration::from_millis(400)).await;
    assert_eq!(table.rows().await, 7, "a dropped sweeper deletes nothing");
    table.drop_table().await;
}
