//! A transactional execution held for an operator (`on_lapse = "hold"`)
//! while its lease had lapsed stays held when its transaction then rolls
//! back without its handler saying that nothing happened (a panic, a
//! success whose `COMMIT` the database refused): the key told its retries
//! that it will not run again by itself, and it does not. Against a real
//! PostgreSQL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::dev::Service;
use actix_web::http::StatusCode;
use actix_web::test;
use actix_web::{App, HttpResponse, post, web};
use idem_runtime::{Attempt, ExecutionContext, Idem, PostgresStore, Tx, idempotent};
use idem_tests::http::fresh_key;
use tokio::sync::Semaphore;

use super::transactional::{
    accept_connections, break_at_commit, create_deferred_table, database, insert, refuse_new_connections, rows, store,
};
use super::unfinished_commits::post;

/// Charges made outside the database, and the gate a first execution
/// waits at.
struct Provider {
    charges: AtomicUsize,
    gate: Semaphore,
}

/// Writes a row, charges (no step), waits at the gate on a first
/// execution, then panics (`panic`) or leaves a deferred constraint for the
/// `COMMIT` to refuse and answers 201 (`commit-refused`).
#[idempotent(scope = "route", lock_ttl = "2s", ttl = "1h", on_lapse = "hold")]
#[post("/held")]
async fn charge(mut tx: Tx, execution: ExecutionContext, body: String, provider: web::Data<Provider>) -> HttpResponse {
    insert(&mut tx, &body, execution.attempt()).await.expect("inserting the business row");
    provider.charges.fetch_add(1, Ordering::SeqCst);
    if execution.attempt() == Attempt::First {
        let _permit = provider.gate.acquire().await.expect("the gate");
    }
    match body.as_str() {
        "panic" => panic!("the handler fails after its charge"),
        _ => {
            break_at_commit(&mut tx).await.expect("a deferred constraint waits for the COMMIT");
            HttpResponse::Created().body("charged")
        }
    }
}

#[actix_web::test]
async fn a_held_execution_rolled_back_stays_held() {
    for body in ["panic", "commit-refused"] {
        // A database each: the keeper's own connections are ended below.
        let name = format!("idem_tx_held_{}", body.replace('-', "_"));
        let Some((url, admin)) = database("postgres held rollbacks", &name).await else { return };
        let store: PostgresStore = store(&url, 4).await;
        create_deferred_table(&store).await;
        let provider = web::Data::new(Provider { charges: AtomicUsize::new(0), gate: Semaphore::new(0) });
        let idem = Idem::new(store.clone()).store_timeout(Duration::from_millis(300));
        let app = test::init_service(App::new().app_data(idem).app_data(provider.clone()).service(charge)).await;

        let key = fresh_key();
        // The keeper cannot renew; the store's pool still works.
        let closed = refuse_new_connections(&url, &admin, &store).await;
        let first = app.call(
            test::TestRequest::post()
                .uri("/held")
                .insert_header(("idempotency-key", key.as_str()))
                .set_payload(body)
                .to_request(),
        );
        let rest = async {
            tokio::time::sleep(Duration::from_millis(2_600)).await;
            let graced = post(&app, "/held", &key, body).await;
            assert_eq!(graced.0, StatusCode::CONFLICT, "{body}: {graced:?}");
            tokio::time::sleep(idem_runtime::store::grace(Duration::from_secs(2)) + Duration::from_millis(100)).await;
            let answer = post(&app, "/held", &key, body).await;
            assert!(answer.2.contains("urn:idem:problem:execution-held"), "{body}: {answer:?}");
            accept_connections(&admin, &closed).await;
            provider.gate.add_permits(1);
        };
        let (first, ()) = tokio::join!(first, rest);
        let first = first.expect("the first request");
        assert!(first.status().is_server_error(), "{body}: {}", first.status());
        assert_eq!(rows(&store).await, [], "{body}: rolled back");

        let again = post(&app, "/held", &key, body).await;
        assert_eq!(again.0, StatusCode::CONFLICT, "{body}: {again:?}");
        assert!(again.2.contains("urn:idem:problem:execution-held"), "{body}: still held: {again:?}");
        assert_eq!(provider.charges.load(Ordering::SeqCst), 1, "{body}: not run again");
    }
}
