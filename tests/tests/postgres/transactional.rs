//! The transactional mode (§8): a handler's writes in its `Tx` and the
//! stored response commit together or not at all, against a real
//! PostgreSQL. Each test has a database of its own on the shared server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Attempt, ExecutionContext, Idem, MarkRetryable, PostgresStore, StepError, Tx, idempotent};
use idem_tests::http::fresh_key;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use tokio::sync::Semaphore;

/// Lets a stalled first execution go on.
struct Gate(Semaphore);

/// Inserts one row (the request body, the attempt), then answers as the
/// body says: `ok`, `retryable`, `panic`, `abort-ok` / `abort-409` (after
/// a statement that fails), `stall` (a first execution waits at the gate).
#[idempotent(scope = "route", lock_ttl = "2s", ttl = "1h")]
#[post("/rows")]
async fn write(mut tx: Tx, execution: ExecutionContext, body: String, gate: web::Data<Gate>) -> HttpResponse {
    let attempt = execution.attempt().as_str();
    insert(&mut tx, &body, execution.attempt()).await.expect("inserting the business row");
    match body.as_str() {
        "retryable" => return HttpResponse::ServiceUnavailable().body("nothing happened").retryable(),
        "panic" => panic!("the handler fails half way"),
        "abort-ok" | "abort-409" => {
            // A statement fails, and the handler looks away.
            let failed = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await;
            assert!(failed.is_err());
            if body == "abort-409" {
                return HttpResponse::Conflict().body("the order conflicts");
            }
        }
        "stall" if execution.attempt() == Attempt::First => {
            let _permit = gate.0.acquire().await.expect("the gate");
        }
        _ => {}
    }
    HttpResponse::Created().body(format!("{body} {attempt}"))
}

/// The effects of a durable step, made outside the handler's transaction.
struct Charges(AtomicUsize);

/// Charges (a durable step: its effect outside the transaction), inserts
/// one row in its `Tx`, then, on a first execution, answers as the body
/// says (`retryable`, `panic`); a later one answers 201 with the charge it
/// got and the steps it found recorded.
#[idempotent(scope = "route", lock_ttl = "2s", ttl = "1h")]
#[post("/stepped")]
async fn stepped(
    mut tx: Tx,
    execution: ExecutionContext,
    body: String,
    charges: web::Data<Charges>,
) -> Result<HttpResponse, StepError> {
    let found = execution.steps_recorded();
    let charge: usize = execution.step("charge", async { charges.0.fetch_add(1, Ordering::SeqCst) + 1 }).await?;
    let attempt = execution.attempt().as_str();
    insert(&mut tx, &body, execution.attempt()).await.expect("inserting the business row");
    if execution.attempt() == Attempt::First {
        match body.as_str() {
            "retryable" => return Ok(HttpResponse::ServiceUnavailable().body("try again").retryable()),
            "panic" => panic!("the handler fails after its step"),
            _ => {}
        }
    }
    Ok(HttpResponse::Created().body(format!("charge {charge}, {found} found, {attempt}")))
}

/// The same without a required key: a request without one still gets a
/// transaction, committed when the handler returns.
#[idempotent(scope = "route", required = false)]
#[post("/keyless")]
async fn keyless(mut tx: Tx, body: String) -> HttpResponse {
    sqlx::query("INSERT INTO business_rows (tag, attempt) VALUES ($1, 'none')")
        .bind(&body)
        .execute(&mut *tx)
        .await
        .expect("inserting the business row");
    match body.as_str() {
        "retryable" => HttpResponse::ServiceUnavailable().body("nothing happened").retryable(),
        "retryable-ok" => HttpResponse::Ok().body("a success is never retryable").retryable(),
        "abort-ok" => {
            let _ = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await;
            HttpResponse::Created().body("looks fine")
        }
        _ => HttpResponse::Created().body(body),
    }
}

/// Inserts a business row: `tag`, and the attempt that wrote it.
pub(super) async fn insert(tx: &mut PgConnection, tag: &str, attempt: Attempt) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO business_rows (tag, attempt) VALUES ($1, $2)")
        .bind(tag)
        .bind(attempt.as_str())
        .execute(tx)
        .await
        .map(drop)
}

/// Creates a table whose unique constraint is checked at `COMMIT`.
pub(super) async fn create_deferred_table(store: &PostgresStore) {
    sqlx::query("CREATE TABLE deferred_rows (tag text UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        .execute(store.pool())
        .await
        .expect("creating the deferred table");
}

/// Breaks the deferred constraint in `tx`, for its `COMMIT` to refuse.
pub(super) async fn break_at_commit(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    for _ in 0..2 {
        sqlx::query("INSERT INTO deferred_rows (tag) VALUES ('twice')").execute(&mut *tx).await?;
    }
    Ok(())
}

/// A fresh database `name` on the shared server (dropped first if a run
/// left it), with the business table; its URL, and an admin pool on the
/// server's `postgres` database.
pub(super) async fn database(test: &str, name: &str) -> Option<(String, PgPool)> {
    let url = idem_tests::backend::url("IDEM_POSTGRES_URL", test)?;
    let admin = PgPoolOptions::new().max_connections(1).connect(&url).await.expect("connecting as admin");
    let name = format!("{name}_{}", std::process::id());
    for statement in [
        format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    ] {
        let _ = sqlx::query(AssertSqlSafe(statement)).execute(&admin).await;
    }
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&admin).await.expect("CREATE DATABASE");
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let url = format!("{base}/{name}");
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.expect("connecting to the new database");
    sqlx::query("CREATE TABLE business_rows (id bigserial PRIMARY KEY, tag text NOT NULL, attempt text NOT NULL)")
        .execute(&pool)
        .await
        .expect("creating the business table");
    pool.close().await;
    Some((url, admin))
}

/// Opens all 4 connections of `store`'s pool, then makes the database of
/// `url` refuse new ones and closes the connections of the renewals' own
/// pool (opened ahead, when the store migrated): the store keeps working,
/// the lease keeper cannot renew. Returns the database's name, for
/// [`accept_connections`].
pub(super) async fn refuse_new_connections(url: &str, admin: &PgPool, store: &PostgresStore) -> String {
    let held: Vec<_> = futures_util::future::join_all((0..4).map(|_| store.pool().acquire())).await;
    assert!(held.iter().all(Result::is_ok), "warming the pool");
    drop(held);
    let name = url.rsplit_once('/').unwrap().1.to_owned();
    // The renewals' connections: the last statement of each is a batch
    // (an empty one, preparing it, as they open).
    let renewals = "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE '%unnest($1::text[]%'";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut open: Vec<(i32,)> = Vec::new();
    while open.len() < 2 && std::time::Instant::now() < deadline {
        open = sqlx::query_as(renewals).bind(&name).fetch_all(admin).await.expect("listing the renewals' connections");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open.len(), 2, "the renewals' connections, opened ahead");
    sqlx::query(AssertSqlSafe(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false")))
        .execute(admin)
        .await
        .expect("closing the database to new connections");
    for (pid,) in open {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(admin)
            .await
            .expect("closing a renewal connection");
    }
    name
}

/// Undoes [`refuse_new_connections`].
pub(super) async fn accept_connections(admin: &PgPool, name: &str) {
    sqlx::query(AssertSqlSafe(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true")))
        .execute(admin)
        .await
        .expect("opening the database again");
}

/// The business rows, as (tag, attempt), in insertion order.
pub(super) async fn rows(store: &PostgresStore) -> Vec<(String, String)> {
    sqlx::query_as("SELECT tag, attempt FROM business_rows ORDER BY id")
        .fetch_all(store.pool())
        .await
        .expect("reading the business rows")
}

pub(super) async fn store(url: &str, connections: u32) -> PostgresStore {
    let options = PostgresStore::pool_options().max_connections(connections).min_connections(connections);
    let store = PostgresStore::connect_with(url, options).await.expect("connecting the store");
    store.migrate().await.expect("migrating");
    store
}

fn idem(store: PostgresStore) -> Idem {
    Idem::new(store).store_timeout(Duration::from_millis(300))
}

fn post_rows(key: &str, body: &'static str) -> actix_http::Request {
    TestRequest::post().uri("/rows").insert_header(("idempotency-key", key)).set_payload(body).to_request()
}

async fn text(response: ServiceResponse) -> (StatusCode, Option<String>, String) {
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned());
    let body = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
    (status, replayed, body)
}

fn problem_type(body: &str) -> String {
    let problem: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not a problem ({e}): {body}"));
    problem["type"].as_str().unwrap_or_default().to_owned()
}

macro_rules! app {
    ($store:expr) => {
        test::init_service(
            App::new()
                .app_data(idem($store.clone()))
                .app_data(web::Data::new(Gate(Semaphore::new(0))))
                .service(write)
                .service(keyless),
        )
        .await
    };
}

#[actix_web::test]
async fn the_rows_and_the_response_commit_together() {
    let Some((url, _admin)) = database("postgres transactional commit", "idem_tx_commit").await else { return };
    let store = store(&url, 4).await;
    let app = app!(store);
    let key = fresh_key();
    let first = text(test::call_service(&app, post_rows(&key, "ok")).await).await;
    assert_eq!(first, (StatusCode::CREATED, None, "ok first".to_owned()));
    assert_eq!(rows(&store).await, [("ok".to_owned(), "first".to_owned())]);
    let replay = text(test::call_service(&app, post_rows(&key, "ok")).await).await;
    assert_eq!(replay, (StatusCode::CREATED, Some("true".to_owned()), "ok first".to_owned()));
    assert_eq!(rows(&store).await.len(), 1, "a replay writes nothing");
}

#[actix_web::test]
async fn a_retryable_answer_or_a_panic_rolls_back_and_releases() {
    let Some((url, _admin)) = database("postgres transactional rollback", "idem_tx_rollback").await else { return };
    let store = store(&url, 4).await;
    let app = app!(store);
    for body in ["retryable", "panic"] {
        let key = fresh_key();
        let (status, _, answer) = text(test::call_service(&app, post_rows(&key, body)).await).await;
        match body {
            "retryable" => assert_eq!((status, answer.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "nothing happened")),
            _ => {
                assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
                assert_eq!(problem_type(&answer), "urn:idem:problem:handler-panicked");
            }
        }
        assert_eq!(rows(&store).await, [], "{body}: the row was rolled back");
        // Released: another request with the key is refused, the same one runs again.
        let other = text(test::call_service(&app, post_rows(&key, "ok")).await).await;
        assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {other:?}");
        let again = text(test::call_service(&app, post_rows(&key, body)).await).await;
        assert_eq!(again.1, None, "{body}: ran again, not replayed: {again:?}");
        assert_eq!(rows(&store).await, [], "{body}: rolled back again");
    }
}

/// A step records an effect that happened outside the transaction: the
/// rollback and release after a retryable answer or a panic keep it, and
/// the next execution of the same request gets it back instead of running
/// it again.
#[actix_web::test]
async fn a_rollback_and_release_keep_the_recorded_steps() {
    let Some((url, _admin)) = database("postgres transactional steps", "idem_tx_steps").await else { return };
    let store = store(&url, 4).await;
    let charges = web::Data::new(Charges(AtomicUsize::new(0)));
    let app =
        test::init_service(App::new().app_data(idem(store.clone())).app_data(charges.clone()).service(stepped)).await;
    let post = |key: &str, body: &'static str| {
        TestRequest::post().uri("/stepped").insert_header(("idempotency-key", key)).set_payload(body).to_request()
    };
    for (charged, body) in [(1, "retryable"), (2, "panic")] {
        let key = fresh_key();
        let (status, _, answer) = text(test::call_service(&app, post(&key, body)).await).await;
        let expected =
            if body == "panic" { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::SERVICE_UNAVAILABLE };
        assert_eq!(status, expected, "{body}: {answer}");
        assert_eq!(rows(&store).await, [], "{body}: the row was rolled back");
        assert_eq!(charges.0.load(Ordering::SeqCst), charged, "{body}: charged once");
        let again = text(test::call_service(&app, post(&key, body)).await).await;
        let said = format!("charge {charged}, 1 found, after_release");
        assert_eq!(again, (StatusCode::CREATED, None, said), "{body}: the step was handed back");
        assert_eq!(charges.0.load(Ordering::SeqCst), charged, "{body}: not charged again");
        assert_eq!(rows(&store).await, [(body.to_owned(), "after_release".to_owned())]);
        sqlx::query("DELETE FROM business_rows").execute(store.pool()).await.unwrap();
    }
}

#[actix_web::test]
async fn a_failed_statement_is_never_answered_as_a_success() {
    let Some((url, _admin)) = database("postgres transactional abort", "idem_tx_abort").await else { return };
    let store = store(&url, 4).await;
    let app = app!(store);
    // A success over an aborted transaction: 500, nothing kept, released.
    let key = fresh_key();
    let (status, replayed, body) = text(test::call_service(&app, post_rows(&key, "abort-ok")).await).await;
    assert_eq!((status, replayed), (StatusCode::INTERNAL_SERVER_ERROR, None), "{body}");
    assert_eq!(problem_type(&body), "urn:idem:problem:transaction-failed");
    assert_eq!(rows(&store).await, []);
    let again = text(test::call_service(&app, post_rows(&key, "abort-ok")).await).await;
    assert_eq!((again.0, again.1), (StatusCode::INTERNAL_SERVER_ERROR, None), "released: it ran again");
    // A failure the handler answered is kept like any failure: its rows are
    // gone, its answer is replayed.
    let key = fresh_key();
    let first = text(test::call_service(&app, post_rows(&key, "abort-409")).await).await;
    assert_eq!(first, (StatusCode::CONFLICT, None, "the order conflicts".to_owned()));
    assert_eq!(rows(&store).await, []);
    let replay = text(test::call_service(&app, post_rows(&key, "abort-409")).await).await;
    assert_eq!(replay, (StatusCode::CONFLICT, Some("true".to_owned()), "the order conflicts".to_owned()));
}

/// The keeper cannot renew: the database refuses new connections (the
/// renewals' own pool has none yet), while the store's pool keeps the ones
/// it opened. The first execution's lease runs out while its handler is
/// stalled in its transaction; a retry takes the key over and commits; when
/// the first handler returns, its commit is refused and its row rolled back.
#[actix_web::test]
async fn a_lease_lost_while_the_handler_runs_rolls_its_writes_back() {
    let Some((url, admin)) = database("postgres transactional lease lost", "idem_tx_lease").await else { return };
    let store = store(&url, 4).await;
    let name = refuse_new_connections(&url, &admin, &store).await;

    let gate = web::Data::new(Gate(Semaphore::new(0)));
    let app = test::init_service(App::new().app_data(idem(store.clone())).app_data(gate.clone()).service(write)).await;
    let key = fresh_key();
    let first = app.call(post_rows(&key, "stall"));
    let rest = async {
        // Past the 2 s lease, which nothing could renew: the first retry to
        // find it lapsed gives it its grace, the next after it takes over.
        tokio::time::sleep(Duration::from_millis(2_600)).await;
        let graced = text(test::call_service(&app, post_rows(&key, "stall")).await).await;
        assert_eq!(graced.0, StatusCode::CONFLICT, "{graced:?}");
        tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(2)) + Duration::from_millis(100)).await;
        let second = text(test::call_service(&app, post_rows(&key, "stall")).await).await;
        gate.0.add_permits(1);
        second
    };
    let (first, second) = tokio::join!(first, rest);
    let first = text(first.expect("the first request")).await;

    assert_eq!(second, (StatusCode::CREATED, None, "stall takeover".to_owned()), "the retry took the key over");
    assert_eq!(first.0, StatusCode::CONFLICT, "{first:?}");
    assert_eq!(problem_type(&first.2), "urn:idem:problem:lease-lost");
    assert_eq!(
        rows(&store).await,
        [("stall".to_owned(), "takeover".to_owned())],
        "the first execution's row was rolled back; the takeover's is the only one"
    );
    let replay = text(test::call_service(&app, post_rows(&key, "stall")).await).await;
    assert_eq!(replay, (StatusCode::CREATED, Some("true".to_owned()), "stall takeover".to_owned()));
    accept_connections(&admin, &name).await;
}

/// Without a key there is no claim and nothing is stored, but the handler's
/// transaction is committed when it returns, and never when a statement of
/// it failed (a `COMMIT` of an aborted transaction answers success: the
/// runtime checks first) or when it answered a retryable failure.
#[actix_web::test]
async fn a_request_without_a_key_commits_its_transaction_or_nothing() {
    let Some((url, _admin)) = database("postgres transactional keyless", "idem_tx_keyless").await else { return };
    let store = store(&url, 4).await;
    let app = app!(store);
    let send = |body: &'static str| TestRequest::post().uri("/keyless").set_payload(body).to_request();
    let ok = text(test::call_service(&app, send("ok")).await).await;
    assert_eq!(ok, (StatusCode::CREATED, None, "ok".to_owned()));
    assert_eq!(rows(&store).await, [("ok".to_owned(), "none".to_owned())]);
    let (status, _, body) = text(test::call_service(&app, send("abort-ok")).await).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(problem_type(&body), "urn:idem:problem:transaction-failed");
    let retryable = text(test::call_service(&app, send("retryable")).await).await;
    assert_eq!(retryable.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(rows(&store).await.len(), 1, "neither the aborted nor the retryable one committed");
    let success = text(test::call_service(&app, send("retryable-ok")).await).await;
    assert_eq!(success.0, StatusCode::OK);
    assert_eq!(rows(&store).await.len(), 2, "a success marked retryable is committed like any success");
}

/// Lets the handlers of [`crowded`] go on together.
struct AllIn(tokio::sync::Barrier);

/// Runs its durable step only once every handler of the test holds its
/// `Tx` (they meet at the barrier), then writes in its `Tx`.
#[idempotent(scope = "route", lock_ttl = "2s", ttl = "1h")]
#[post("/crowded")]
async fn crowded(
    mut tx: Tx,
    execution: ExecutionContext,
    body: String,
    all_in: web::Data<AllIn>,
) -> Result<HttpResponse, StepError> {
    let ticket: String = execution
        .step("reserve", async {
            all_in.0.wait().await;
            format!("ticket {body}")
        })
        .await?;
    insert(&mut tx, &body, execution.attempt()).await.expect("inserting the business row");
    Ok(HttpResponse::Created().body(ticket))
}

/// As many transactional handlers as the pool has connections, each
/// holding one for its transaction, record a durable step at once: a step
/// is recorded outside the transactions, and never waits for a connection
/// one of them holds (they all waited for each other, and the lease keeper
/// kept their leases alive, until the record's TTL).
#[actix_web::test]
async fn steps_of_as_many_transactions_as_the_pool_has_connections_are_recorded() {
    let Some((url, _admin)) = database("postgres transactional crowded steps", "idem_tx_crowded").await else { return };
    const CONNECTIONS: usize = 2;
    let store = store(&url, CONNECTIONS as u32).await;
    let all_in = web::Data::new(AllIn(tokio::sync::Barrier::new(CONNECTIONS)));
    let app = test::init_service(App::new().app_data(idem(store.clone())).app_data(all_in).service(crowded)).await;
    let bodies: Vec<String> = (0..CONNECTIONS).map(|n| format!("r{n}")).collect();
    let requests = bodies.iter().map(|body| {
        let request = TestRequest::post()
            .uri("/crowded")
            .insert_header(("idempotency-key", fresh_key()))
            .set_payload(body.clone())
            .to_request();
        async { text(app.call(request).await.expect("the request")).await }
    });
    let answers = tokio::time::timeout(Duration::from_secs(10), futures_util::future::join_all(requests))
        .await
        .expect("every request answered: a step waited for a connection a transaction holds");
    for (body, answer) in bodies.iter().zip(answers) {
        assert_eq!(answer, (StatusCode::CREATED, None, format!("ticket {body}")));
    }
    let mut tags: Vec<String> = rows(&store).await.into_iter().map(|(tag, _)| tag).collect();
    tags.sort();
    assert_eq!(tags, bodies, "every transaction committed");
}
