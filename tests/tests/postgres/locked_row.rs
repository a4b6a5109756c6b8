//! One record's row held locked by another session for longer than the
//! lease (a transactional completion waiting on a slow `COMMIT`, synchronous
//! replication, an fsync stall): the renewal batches it travels in skip
//! that row instead of waiting for it, so the other executions keep their
//! leases (a retry gets 409, never a second run), and the locked one is
//! renewed once its row is free.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, post, web};
use idem_runtime::store::{IdempotencyKey, Scope, StorageKey};
use idem_runtime::{Idem, idempotent};
use idem_tests::backend::postgres_store;
use idem_tests::http::{fresh_key, post_with};
use idem_tests::server::TestServer;
use sqlx::Connection;

/// Executions of the handler, by idempotency key.
#[derive(Default)]
struct Executions(Mutex<HashMap<String, u32>>);

#[idempotent(scope = "route", lock_ttl = "2s")]
#[post("/locked-row")]
async fn run(request: HttpRequest, executions: web::Data<Executions>) -> HttpResponse {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    *executions.0.lock().unwrap().entry(header("idempotency-key")).or_default() += 1;
    let hold = header("x-hold-ms").parse().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(hold)).await;
    HttpResponse::Created().body(header("idempotency-key"))
}

/// Executions sharing renewal batches.
const EXECUTIONS: usize = 20;
/// How long the side session holds the row: more than twice the lease.
const LOCKED: Duration = Duration::from_secs(5);

/// The route on `url`'s store, and its executions.
async fn serve(url: &str) -> (TestServer, web::Data<Executions>) {
    let store = postgres_store(url, 40).await;
    let executions = web::Data::new(Executions::default());
    let shared = executions.clone();
    let idem = Idem::new(store).store_timeout(Duration::from_millis(500));
    let server = TestServer::start(idem, move |config| {
        config.app_data(shared.clone()).service(run);
    });
    (server, executions)
}

/// A payment of `key` that holds its key past the lock, in the background.
fn pay_past_the_lock(server: &TestServer, key: &str) -> actix_web::rt::task::JoinHandle<idem_tests::http::Reply> {
    let hold = (LOCKED + Duration::from_secs(4)).as_millis().to_string();
    let (url, key) = (server.at("/locked-row"), key.to_owned());
    actix_web::rt::spawn(async move { post_with(&url, &[("idempotency-key", &key), ("x-hold-ms", &hold)], "{}").await })
}

/// Locks the record of `key` in a transaction of `side`, as a slow commit
/// would.
async fn lock_the_row<'c>(side: &'c mut sqlx::PgConnection, key: &str) -> sqlx::Transaction<'c, sqlx::Postgres> {
    let parsed = IdempotencyKey::parse(key.as_bytes()).unwrap();
    let row = StorageKey::new(Scope::Route, None, "POST", "/locked-row", &parsed);
    let mut tx = side.begin().await.unwrap();
    let found: i64 =
        sqlx::query_scalar("SELECT count(*) FROM (SELECT 1 FROM idem_records WHERE key = $1 FOR UPDATE) AS r")
            .bind(row.as_str())
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    assert_eq!(found, 1, "the execution's record is there to lock");
    tx
}

#[actix_web::test]
async fn a_locked_row_delays_only_its_own_renewal() {
    let test = "a_locked_row_delays_only_its_own_renewal";
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", test) else { return };
    let (server, executions) = serve(&url).await;
    let keys: Vec<String> = (0..EXECUTIONS).map(|_| fresh_key()).collect();
    let firsts: Vec<_> = keys.iter().map(|key| pay_past_the_lock(&server, key)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Another session locks the first execution's row and holds it.
    let mut side = sqlx::PgConnection::connect(&url).await.unwrap();
    let tx = lock_the_row(&mut side, &keys[0]).await;
    let until = Instant::now() + LOCKED;
    let mut rounds = 0;
    while Instant::now() < until {
        for key in &keys[1..] {
            let retry = post_with(&server.at("/locked-row"), &[("idempotency-key", key)], "{}").await;
            assert_eq!(retry.status.as_u16(), 409, "execution {key} kept its lease: {retry:?}");
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    tx.rollback().await.unwrap();
    assert!(rounds >= 5, "retried through the lock ({rounds} rounds)");

    for first in firsts {
        let first = first.await.unwrap();
        assert_eq!(first.status.as_u16(), 201, "{first:?}");
    }
    for key in &keys {
        let replay = post_with(&server.at("/locked-row"), &[("idempotency-key", key)], "{}").await;
        assert_eq!(replay.replayed.as_deref(), Some("true"), "{key}: {replay:?}");
    }
    let executions = executions.0.lock().unwrap().clone();
    for key in &keys {
        assert_eq!(executions.get(key), Some(&1), "{key} ran once, the locked one included: {executions:?}");
    }
    server.stop().await;
}

/// The locked row's own key retried all through the lock: the claims wait
/// for the row (the holder's renewals skip it, so its lease lapses in the
/// table meanwhile) and run when the lock goes, the first of them with a
/// start time seconds old. It must give the holder a whole grace from when
/// it got the row, not from when it began: the holder renews within it, and
/// the payment runs once.
#[actix_web::test]
async fn retries_of_a_locked_rows_own_key_give_its_holder_a_grace_not_a_takeover() {
    let test = "retries_of_a_locked_rows_own_key_give_its_holder_a_grace_not_a_takeover";
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", test) else { return };
    let (server, executions) = serve(&url).await;
    let key = fresh_key();
    let first = pay_past_the_lock(&server, &key);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut side = sqlx::PgConnection::connect(&url).await.unwrap();
    let tx = lock_the_row(&mut side, &key).await;
    let until = Instant::now() + LOCKED;
    while Instant::now() < until {
        let retry = post_with(&server.at("/locked-row"), &[("idempotency-key", &key)], "{}").await;
        assert!(matches!(retry.status.as_u16(), 409 | 503), "{retry:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tx.rollback().await.unwrap();
    // Right after the lock, and on until the payment answers.
    let first = loop {
        if first.is_finished() {
            break first.await.unwrap();
        }
        let retry = post_with(&server.at("/locked-row"), &[("idempotency-key", &key)], "{}").await;
        // Its completion may land before its own answer reaches the test:
        // a retry then replays it (the count below says it ran once).
        let replayed = retry.status.as_u16() == 201 && retry.replayed.as_deref() == Some("true");
        assert!(matches!(retry.status.as_u16(), 409 | 503) || replayed, "never run again while it runs: {retry:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(first.status.as_u16(), 201, "{first:?}");
    let replay = post_with(&server.at("/locked-row"), &[("idempotency-key", &key)], "{}").await;
    assert_eq!(replay.replayed.as_deref(), Some("true"), "{replay:?}");
    assert_eq!(executions.0.lock().unwrap().get(&key), Some(&1), "ran once");
    server.stop().await;
}
