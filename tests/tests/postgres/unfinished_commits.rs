//! Transactional executions whose commit did not finish, against a real
//! PostgreSQL. A failure the handler answered is kept: the handler may
//! have made an effect outside the database (a provider's charge whose
//! answer it never got, so no durable step recorded it), which its
//! non-retryable failure says. Its rows are rolled back, its answer is
//! stored outside the transaction, and a retry replays it instead of making
//! the effect again. Each way the commit can fail: the connection lost
//! under the transaction, the `COMMIT` refused, the completion blocked past
//! the store timeout by a lock (its outcome unknown), the lease not
//! confirmed in time, the handler keeping its `Tx`. A success whose
//! connection was lost is not called refused: the retry finds out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::dev::Service;
use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Attempt, ExecutionContext, Idem, PostgresStore, Tx, idempotent};
use idem_tests::http::fresh_key;
use sqlx::{Connection, PgConnection, PgPool};

use super::transactional::{
    accept_connections, break_at_commit, create_deferred_table, database, insert, refuse_new_connections, rows, store,
};

/// Effects made outside the database; a pool on the server, to end the
/// handler's own connection with; the test database's URL.
struct Provider {
    charges: AtomicUsize,
    admin: PgPool,
    url: String,
    /// Where a handler keeps its `Tx` past its return.
    kept: std::sync::Mutex<Option<Tx>>,
}

/// Writes a row in its `Tx`, charges (outside the database, no step: the
/// provider's answer is taken as lost), then, as the body says, loses its
/// transaction's connection (`connection-lost`), leaves a deferred
/// constraint for the `COMMIT` to refuse (`commit-refused`), has another
/// session lock its record for a second (`completion-blocked`), outlasts
/// its lease, which nothing can renew (`lease-unconfirmed`), or keeps its
/// `Tx` (`tx-kept`); and answers 502: the charge may stand (201 for
/// `connection-lost-201`).
#[idempotent(scope = "route", lock_ttl = "2s", ttl = "1h")]
#[post("/charges")]
async fn charge(mut tx: Tx, execution: ExecutionContext, body: String, provider: web::Data<Provider>) -> HttpResponse {
    insert(&mut tx, &body, execution.attempt()).await.expect("inserting the business row");
    provider.charges.fetch_add(1, Ordering::SeqCst);
    match body.as_str() {
        "connection-lost" | "connection-lost-201" => {
            let (pid,): (i32,) =
                sqlx::query_as("SELECT pg_backend_pid()").fetch_one(&mut *tx).await.expect("the backend's pid");
            sqlx::query("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .execute(&provider.admin)
                .await
                .expect("ending the transaction's connection");
        }
        "commit-refused" => {
            break_at_commit(&mut tx).await.expect("a deferred constraint waits for the COMMIT");
        }
        "completion-blocked" => {
            let mut locker = PgConnection::connect(&provider.url).await.expect("a connection of another session");
            sqlx::query("BEGIN").execute(&mut locker).await.expect("BEGIN");
            sqlx::query("SELECT 1 FROM idem_records WHERE state = 'in_flight' FOR UPDATE")
                .execute(&mut locker)
                .await
                .expect("locking the record");
            actix_web::rt::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                sqlx::query("COMMIT").execute(&mut locker).await.expect("unlocking the record");
            });
        }
        "lease-unconfirmed" if execution.attempt() == Attempt::First => {
            tokio::time::sleep(Duration::from_millis(2_600)).await;
        }
        "tx-kept" => {
            *provider.kept.lock().unwrap() = Some(tx);
        }
        _ => {}
    }
    if body == "connection-lost-201" {
        return HttpResponse::Created().body("charged");
    }
    HttpResponse::BadGateway().body(format!("the provider's answer was lost ({body})"))
}

/// The status, `Idempotent-Replayed` and body of a request to `/charges`.
async fn send<S>(app: &S, key: &str, body: &'static str) -> (StatusCode, Option<String>, String)
where
    S: Service<actix_http::Request, Response = actix_web::dev::ServiceResponse, Error = actix_web::Error>,
{
    post(app, "/charges", key, body).await
}

/// [`send`] again while the key answers 409 (in flight), as a client
/// would, for up to 15 s.
async fn past_in_flight<S>(app: &S, key: &str, body: &'static str) -> (StatusCode, Option<String>, String)
where
    S: Service<actix_http::Request, Response = actix_web::dev::ServiceResponse, Error = actix_web::Error>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let answer = send(app, key, body).await;
        if answer.0 != StatusCode::CONFLICT || std::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The status, `Idempotent-Replayed` and body of a POST to `path`.
pub(super) async fn post<S>(app: &S, path: &str, key: &str, body: &'static str) -> (StatusCode, Option<String>, String)
where
    S: Service<actix_http::Request, Response = actix_web::dev::ServiceResponse, Error = actix_web::Error>,
{
    let request = TestRequest::post().uri(path).insert_header(("idempotency-key", key)).set_payload(body).to_request();
    let response = test::call_service(app, request).await;
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned());
    (status, replayed, String::from_utf8(test::read_body(response).await.to_vec()).unwrap())
}

#[actix_web::test]
async fn a_failure_answered_in_a_transaction_that_did_not_commit_is_kept() {
    let Some((url, admin)) = database("postgres kept failures", "idem_tx_kept").await else { return };
    let store: PostgresStore = store(&url, 4).await;
    create_deferred_table(&store).await;
    let provider = web::Data::new(Provider {
        charges: AtomicUsize::new(0),
        admin: admin.clone(),
        url: url.clone(),
        kept: Default::default(),
    });
    let idem = Idem::new(store.clone()).store_timeout(Duration::from_millis(300));
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(charge)).await;

    let modes = ["connection-lost", "commit-refused", "completion-blocked", "lease-unconfirmed", "tx-kept"];
    for (charged, body) in (1..).zip(modes) {
        let key = fresh_key();
        let closed = match body {
            "lease-unconfirmed" => Some(refuse_new_connections(&url, &admin, &store).await),
            _ => None,
        };
        let (status, _, answer) = send(&app, &key, body).await;
        if let Some(name) = closed {
            accept_connections(&admin, &name).await;
        }
        let said = format!("the provider's answer was lost ({body})");
        match body {
            // The lease was not confirmed: 409, and the retry gets the key's outcome.
            "lease-unconfirmed" => assert_eq!(status, StatusCode::CONFLICT, "{body}: {answer}"),
            _ => assert_eq!((status, answer.as_str()), (StatusCode::BAD_GATEWAY, said.as_str()), "{body}"),
        }
        assert_eq!(provider.charges.load(Ordering::SeqCst), charged, "{body}: charged once");
        assert_eq!(rows(&store).await, [], "{body}: the row was rolled back");

        // Retried as a client would while the key is in flight (the
        // blocked completion lands once the lock goes).
        let replay = past_in_flight(&app, &key, body).await;
        assert_eq!(replay, (StatusCode::BAD_GATEWAY, Some("true".to_owned()), said), "{body}: the failure was kept");
        assert_eq!(provider.charges.load(Ordering::SeqCst), charged, "{body}: not charged again");
    }
    drop(provider.kept.lock().unwrap().take());
}

/// A success whose transaction's connection was lost (an administrator
/// ended it, the server restarted) is not answered as a refusal: the
/// `COMMIT`'s outcome is unknown, so the client is told to retry, and the
/// retry finds out (here: rolled back, so it runs again).
#[actix_web::test]
async fn a_success_whose_connection_was_lost_is_answered_retry() {
    let Some((url, admin)) = database("postgres lost connection", "idem_tx_lost").await else { return };
    let store: PostgresStore = store(&url, 4).await;
    let provider = web::Data::new(Provider { charges: AtomicUsize::new(0), admin, url, kept: Default::default() });
    let idem = Idem::new(store.clone()).store_timeout(Duration::from_millis(300));
    let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(charge)).await;
    let key = fresh_key();
    let (status, _, answer) = send(&app, &key, "connection-lost-201").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(answer.contains("urn:idem:problem:store-unavailable"), "{answer}");
    assert_eq!(rows(&store).await, [], "rolled back");
    // Released in the background, while the lease holds: a retry may find
    // the key in flight first.
    let retry = past_in_flight(&app, &key, "connection-lost-201").await;
    assert_eq!(retry.0, StatusCode::SERVICE_UNAVAILABLE, "released: it ran again, and lost its connection again");
    assert_eq!(provider.charges.load(Ordering::SeqCst), 2);
}
