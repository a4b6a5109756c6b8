//! Statements per operation, as counted by the server itself.
//!
//! A private PostgreSQL server loads `pg_stat_statements`; the store works
//! in a database of its own, and after a `pg_stat_statements_reset()` the
//! test sums the `calls` of every statement executed in that database
//! (transaction control and utility statements included). Counting runs on
//! a separate connection to another database, so it does not count itself.
//! Expected: a replay is one statement, a first execution (claim, then
//! complete) two, a batch of renewals one; in transactional mode a first
//! execution adds `BEGIN` and `COMMIT` around the handler's own statements.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post};
use idem_runtime::store::testing::{fingerprint, fresh_key, response};
use idem_runtime::store::{Claim, Fence, Renewal, Store};
use idem_runtime::{Idem, PostgresStore, Tx, idempotent};
use idem_tests::postgres_server::PostgresServer;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const DATABASE: &str = "idem_statements";
const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(600);

/// The statements executed in [`DATABASE`] since the last reset, as
/// (query text, calls), and their total.
async fn executed(admin: &PgPool) -> (Vec<(String, i64)>, i64) {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT query, calls FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) ORDER BY query",
    )
    .bind(DATABASE)
    .fetch_all(admin)
    .await
    .expect("reading pg_stat_statements");

    let total = rows.iter().map(|(_, calls)| calls).sum();
    (rows, total)
}

async fn reset(admin: &PgPool) {
    sqlx::query("SELECT pg_stat_statements_reset()").execute(admin).await.expect("resetting pg_stat_statements");
}

/// A private server with `pg_stat_statements`, an admin pool to read it,
/// and a migrated store in [`DATABASE`].
async fn counting_server(test: &str) -> Option<(PostgresServer, PgPool, PostgresStore)> {
    idem_tests::backend::url("IDEM_POSTGRES_URL", test)?;
    let server = PostgresServer::start(
        test,
        &[("shared_preload_libraries", "pg_stat_statements"), ("pg_stat_statements.track", "top")],
    )?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&server.url("postgres"))
        .await
        .expect("connecting to the private server");
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&admin)
        .await
        .expect("creating pg_stat_statements");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
        .execute(&admin)
        .await
        .expect("creating the store's database");
    let store = PostgresStore::connect(&server.url(DATABASE)).await.expect("connecting the store");
    store.migrate().await.expect("migrating");
    // The renewals' connections, opened ahead by the migration, prepare
    // their batch statement with an empty batch each: done before counting.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while executed(&admin).await.0.iter().filter(|(q, _)| q.contains("unnest($1::text[]")).map(|(_, n)| n).sum::<i64>()
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "the renewals' connections were not opened ahead");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Some((server, admin, store))
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_is_one_statement_and_first_execution_two() {
    let Some((_server, admin, store)) = counting_server("postgres_statements").await else { return };

    // Warm up: the pool's connection exists and has its statements prepared.
    let warm = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&warm, &fingerprint("warm"), LEASE, TTL).await.unwrap() else {
        panic!("warm-up claim not acquired");
    };
    assert_eq!(store.complete(&warm, token, &response(b"warm"), LEASE).await.unwrap(), Fence::Held);

    // Sanity: the counter sees statements in this database at all.
    reset(&admin).await;
    assert_eq!(executed(&admin).await.1, 0, "nothing ran yet");

    // First execution: claim, then complete.
    let key = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("first claim not acquired");
    };
    assert_eq!(store.complete(&key, token, &response(b"first"), LEASE).await.unwrap(), Fence::Held);
    let (statements, total) = executed(&admin).await;
    assert_eq!(total, 2, "first execution: {statements:#?}");
    assert!(statements.iter().any(|(q, n)| q.contains("_claim_v4\"(") && *n == 1), "{statements:#?}");
    // (Literals may show as `$n`: pg_stat_statements normalizes constants.)
    assert!(statements.iter().any(|(q, n)| q.contains("UPDATE") && q.contains("header_values =") && *n == 1));

    // Replay: the claim alone, one statement, with the response in it.
    reset(&admin).await;
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"first")));
    let (statements, total) = executed(&admin).await;
    assert_eq!(total, 1, "replay: {statements:#?}");

    // Ten replays: ten statements, nothing extra per request.
    reset(&admin).await;
    for _ in 0..10 {
        assert!(matches!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(_)));
    }
    assert_eq!(executed(&admin).await.1, 10);

    // The other answers of a claim, and the fenced operations: one each.
    let busy = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&busy, &fingerprint("b"), LEASE, TTL).await.unwrap() else {
        panic!("claim not acquired");
    };
    let renewals = [
        Renewal { key: busy.clone(), token, lease: LEASE },
        Renewal { key: key.clone(), token, lease: LEASE },
        Renewal { key: fresh_key(), token, lease: LEASE },
    ];
    let operations = [("in flight", 0), ("mismatch", 1), ("renew", 2), ("get", 3), ("renew many", 4), ("release", 5)];
    for (name, operation) in operations {
        reset(&admin).await;
        match operation {
            0 => assert!(matches!(
                store.claim(&busy, &fingerprint("b"), LEASE, TTL).await.unwrap(),
                Claim::InFlight { .. }
            )),
            1 => assert_eq!(store.claim(&busy, &fingerprint("c"), LEASE, TTL).await.unwrap(), Claim::Mismatch),
            2 => assert_eq!(store.renew(&busy, token, LEASE).await.unwrap(), Fence::Held),
            3 => assert!(store.get(&busy).await.unwrap().is_some()),
            // A whole batch, on the renewals' own pool: one statement.
            4 => assert_eq!(store.renew_many(&renewals).await.unwrap(), [Fence::Held, Fence::Lost, Fence::Lost]),
            _ => assert_eq!(store.release(&busy, token).await.unwrap(), Fence::Held),
        }
        let (statements, total) = executed(&admin).await;
        assert_eq!(total, 1, "{name}: {statements:#?}");
    }
    store.pool().close().await;
    admin.close().await;
}

/// WAL records written by the statements of [`DATABASE`] since the last reset.
async fn wal_records(admin: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(wal_records), 0)::bigint FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)",
    )
    .bind(DATABASE)
    .fetch_one(admin)
    .await
    .expect("reading pg_stat_statements")
}

/// The row version of `key` (`xmin` and `ctid`): any update changes it.
async fn version(store: &PostgresStore, key: &idem_runtime::store::StorageKey) -> String {
    let sql = format!("SELECT xmin::text || ' ' || ctid::text FROM {} WHERE key = $1", store.table_name());
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(key.as_str()).fetch_one(store.pool()).await.expect("row version")
}

/// A replay, a 409 and a 422 are reads: no WAL, the row untouched (§12 of the contract:
/// a replay never writes to Postgres). Before, each rewrote the row.
#[tokio::test(flavor = "multi_thread")]
async fn replays_and_refusals_never_write() {
    let Some((_server, admin, store)) = counting_server("postgres_statements reads").await else { return };
    let done = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&done, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("claim not acquired");
    };
    assert_eq!(store.complete(&done, token, &response(b"kept"), LEASE).await.unwrap(), Fence::Held);
    let busy = fresh_key();
    assert!(matches!(store.claim(&busy, &fingerprint("b"), LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));
    let (done_before, busy_before) = (version(&store, &done).await, version(&store, &busy).await);

    reset(&admin).await;
    for _ in 0..5 {
        assert_eq!(store.claim(&done, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"kept")));
        assert_eq!(store.claim(&done, &fingerprint("x"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
        assert!(matches!(store.claim(&busy, &fingerprint("b"), LEASE, TTL).await.unwrap(), Claim::InFlight { .. }));
        assert_eq!(store.claim(&busy, &fingerprint("x"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
    }
    let (statements, total) = executed(&admin).await;
    assert_eq!(total, 20, "one statement each: {statements:#?}");
    assert_eq!(wal_records(&admin).await, 0, "no WAL: {statements:#?}");
    assert_eq!(version(&store, &done).await, done_before, "the completed row was not rewritten");
    assert_eq!(version(&store, &busy).await, busy_before, "the in-flight row was not rewritten");

    // A claim that must write still does: a new key.
    reset(&admin).await;
    assert!(matches!(store.claim(&fresh_key(), &fingerprint("n"), LEASE, TTL).await.unwrap(), Claim::Acquired { .. }));
    assert!(wal_records(&admin).await > 0, "a won claim writes");
    store.pool().close().await;
    admin.close().await;
}

/// Inserts one row in its transaction.
#[idempotent(scope = "route")]
#[post("/tx")]
async fn transactional(mut tx: Tx, body: String) -> HttpResponse {
    sqlx::query("INSERT INTO tx_rows (body) VALUES ($1)").bind(&body).execute(&mut *tx).await.expect("insert");
    HttpResponse::Created().body(body)
}

/// A transactional first execution: the claim, `BEGIN`, the handler's own
/// statement, the completion, `COMMIT`; nothing else. A replay is the claim
/// alone: no transaction is opened for it.
#[actix_web::test]
async fn a_transactional_first_execution_adds_only_begin_and_commit() {
    let Some((_server, admin, store)) = counting_server("postgres_statements transactional").await else { return };
    sqlx::query("CREATE TABLE tx_rows (body text NOT NULL)").execute(store.pool()).await.expect("creating tx_rows");
    let app = test::init_service(App::new().app_data(Idem::new(store.clone())).service(transactional)).await;
    let request = |key: &str| {
        TestRequest::post().uri("/tx").insert_header(("idempotency-key", key)).set_payload("row").to_request()
    };
    // Warm up: connections open, statements prepared.
    assert_eq!(test::call_service(&app, request("warm")).await.status(), StatusCode::CREATED);

    reset(&admin).await;
    assert_eq!(test::call_service(&app, request("first")).await.status(), StatusCode::CREATED);
    let (statements, total) = executed(&admin).await;
    let calls =
        |needle: &dyn Fn(&str) -> bool| statements.iter().filter(|(q, _)| needle(q)).map(|(_, n)| n).sum::<i64>();
    assert_eq!(calls(&|q| q.contains("_claim_v4\"(")), 1, "claim: {statements:#?}");
    assert_eq!(calls(&|q| q.starts_with("BEGIN ISOLATION LEVEL READ COMMITTED")), 1, "BEGIN: {statements:#?}");
    assert_eq!(calls(&|q| q.contains("INSERT INTO tx_rows")), 1, "the handler's: {statements:#?}");
    assert_eq!(calls(&|q| q.starts_with("-- Complete, fenced.")), 1, "completion: {statements:#?}");
    assert_eq!(calls(&|q| q.trim().eq_ignore_ascii_case("commit")), 1, "COMMIT: {statements:#?}");
    assert_eq!(total, 5, "claim + BEGIN + the handler's statement + completion + COMMIT: {statements:#?}");

    reset(&admin).await;
    let replay = test::call_service(&app, request("first")).await;
    assert_eq!(replay.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
    let (statements, total) = executed(&admin).await;
    assert_eq!(total, 1, "a replay: {statements:#?}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM tx_rows").fetch_one(store.pool()).await.unwrap();
    assert_eq!(rows, 2, "the warm-up's row and the first execution's");
    store.pool().close().await;
    admin.close().await;
}

/// A table without the claim function (its schema made by hand, or the
/// function dropped) still claims, in one statement of its own: the store
/// falls back to it, with the same answers and no write for a replay.
#[tokio::test(flavor = "multi_thread")]
async fn a_schema_without_the_claim_function_claims_in_one_statement() {
    let Some((_server, admin, store)) = counting_server("postgres_statements fallback").await else { return };
    let drop =
        format!("DROP FUNCTION {}_claim_v4(text, bytea, bytea, interval, interval, boolean, text)", store.table_name());
    sqlx::query(sqlx::AssertSqlSafe(drop)).execute(store.pool()).await.expect("dropping the claim function");

    reset(&admin).await;
    let key = fresh_key();
    let Claim::Acquired { token, .. } = store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap() else {
        panic!("first claim not acquired");
    };
    assert_eq!(store.complete(&key, token, &response(b"first"), LEASE).await.unwrap(), Fence::Held);
    let (statements, _) = executed(&admin).await;
    assert!(statements.iter().any(|(q, n)| q.contains("WITH seen") && *n == 1), "{statements:#?}");

    reset(&admin).await;
    for _ in 0..5 {
        assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"first")));
        assert_eq!(store.claim(&key, &fingerprint("x"), LEASE, TTL).await.unwrap(), Claim::Mismatch);
    }
    let (statements, total) = executed(&admin).await;
    assert_eq!(total, 10, "one statement each: {statements:#?}");
    assert_eq!(wal_records(&admin).await, 0, "no WAL: {statements:#?}");

    // migrate() brings the function back, and this store calls it again
    // (its own migration ends the fallback); both answer alike.
    store.migrate().await.expect("migrating again");
    reset(&admin).await;
    assert_eq!(store.claim(&key, &fingerprint("a"), LEASE, TTL).await.unwrap(), Claim::Replay(response(b"first")));
    let (statements, total) = executed(&admin).await;
    assert_eq!(total, 1, "one statement: {statements:#?}");
    assert!(statements.iter().any(|(q, n)| q.contains("_claim_v4\"(") && *n == 1), "{statements:#?}");
    store.pool().close().await;
    admin.close().await;
}
