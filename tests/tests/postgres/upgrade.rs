//! A table an earlier version made, before `migrate()` has brought it up to
//! date: this version's renewals, completions and releases write a column
//! it lacks, so its claims are refused (503, nothing runs) rather than let
//! a handler run that nothing could keep; once migrated, it works. A
//! table that lacks only this version's claim function is claimed in one
//! statement, with the same answers.

use std::time::Duration;

use idem_runtime::store::testing::{fingerprint, fresh_key};
use idem_runtime::store::{Claim, FencingToken, Store};
use idem_runtime::{PostgresStore, StoreError};

#[tokio::test]
async fn claims_on_a_table_migrate_has_not_brought_up_to_date_are_refused() {
    let test = "claims_on_a_table_migrate_has_not_brought_up_to_date_are_refused";
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", test) else { return };
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("DROP TABLE IF EXISTS idem_upgrade CASCADE").execute(&pool).await.unwrap();
    PostgresStore::with_table(pool.clone(), "idem_upgrade").unwrap().migrate().await.unwrap();
    // What the previous version's table looks like (its index of in-flight
    // rows goes with the column it indexes).
    let previous = "ALTER TABLE idem_upgrade DROP COLUMN held, DROP COLUMN steps, DROP COLUMN route, \
                    DROP COLUMN claimed_at";
    sqlx::query(previous).execute(&pool).await.unwrap();

    let store = PostgresStore::with_table(pool.clone(), "idem_upgrade").unwrap();
    let (key, lease, ttl) = (fresh_key(), Duration::from_secs(30), Duration::from_secs(60));
    match store.claim(&key, &fingerprint("a"), lease, ttl).await {
        Err(StoreError::Misconfigured { message, .. }) => {
            assert!(message.contains("idem_upgrade") && message.contains("migrate()"), "{message}");
        }
        other => panic!("a claim on a table not migrated is refused: {other:?}"),
    }
    // Reading it fails alike, naming the remedy; and nothing was claimed.
    match store.get(&key).await {
        Err(StoreError::Misconfigured { message, .. }) => assert!(message.contains("migrate()"), "{message}"),
        other => panic!("a lookup on a table not migrated is refused: {other:?}"),
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_upgrade").fetch_one(&pool).await.unwrap();
    assert_eq!(rows, 0, "nothing was claimed");
    store.migrate().await.unwrap();
    assert!(matches!(store.claim(&key, &fingerprint("a"), lease, ttl).await.unwrap(), Claim::Acquired { .. }));
    let index: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('idem_upgrade_in_flight_idx')::text").fetch_one(&pool).await.unwrap();
    assert!(index.is_some(), "the index of executions in flight is built");
    sqlx::query("DROP TABLE idem_upgrade CASCADE").execute(&pool).await.unwrap();
    sqlx::query("DROP FUNCTION idem_upgrade_claim_v4").execute(&pool).await.unwrap();
}

/// Before `migrate()` has made this version's claim function (the table
/// has only an earlier version's), claims are one statement of their own,
/// with the same answers: the token of an execution in flight, sent by
/// another request, is a mismatch there too, and still its own claim's.
#[tokio::test]
async fn claims_before_the_claim_function_is_made_answer_alike() {
    let test = "claims_before_the_claim_function_is_made_answer_alike";
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", test) else { return };
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("DROP TABLE IF EXISTS idem_unmade CASCADE").execute(&pool).await.unwrap();
    PostgresStore::with_table(pool.clone(), "idem_unmade").unwrap().migrate().await.unwrap();
    sqlx::query("DROP FUNCTION idem_unmade_claim_v4").execute(&pool).await.unwrap();

    let store = PostgresStore::with_table(pool.clone(), "idem_unmade").unwrap();
    let (key, token) = (fresh_key(), FencingToken::generate());
    let (lease, ttl) = (Duration::from_secs(30), Duration::from_secs(60));
    let first = store.claim_as(&key, &fingerprint("a"), token, lease, ttl).await.unwrap();
    assert!(matches!(first, Claim::Acquired { .. }), "{first:?}");
    assert_eq!(store.claim_as(&key, &fingerprint("b"), token, lease, ttl).await.unwrap(), Claim::Mismatch);
    assert_eq!(store.claim_as(&key, &fingerprint("a"), token, lease, ttl).await.unwrap(), first);
    let functions: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem_unmade_claim%'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(functions, 0, "the claims were the one statement");
    sqlx::query("DROP TABLE idem_unmade CASCADE").execute(&pool).await.unwrap();
}
