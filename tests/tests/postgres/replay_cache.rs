//! The replay cache in front of a real PostgreSQL: replays of a completed
//! record send no claim until `max_age`, and the store still answers 422
//! for another request under the key; a transactional completion fills the
//! cache too, which keeps replaying a record deleted behind the library's
//! back until `max_age`.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use actix_web::{App, HttpResponse, post};
use idem_runtime::{Idem, ReplayCache, Tx, idempotent};
use idem_tests::backend::postgres_store;
use idem_tests::http::fresh_key;

use super::transactional::{database, rows, store};

#[actix_web::test]
async fn replays_from_the_cache_send_no_claim_to_postgres() {
    let Some(url) = idem_tests::backend::url("IDEM_POSTGRES_URL", "replays_from_the_cache_send_no_claim_to_postgres")
    else {
        return;
    };
    idem_tests::replay_cache_checks::assert_replays_skip_the_store(Arc::new(postgres_store(&url, 8).await)).await;
}

/// Inserts one row in its `Tx` and answers with the request's body.
#[idempotent(scope = "route")]
#[post("/rows")]
async fn write(mut tx: Tx, body: String) -> HttpResponse {
    sqlx::query("INSERT INTO business_rows (tag, attempt) VALUES ($1, 'any')")
        .bind(&body)
        .execute(&mut *tx)
        .await
        .expect("inserting the business row");
    HttpResponse::Created().body(body)
}

#[actix_web::test]
async fn a_transactional_completion_fills_the_cache_until_max_age() {
    let test = "a_transactional_completion_fills_the_cache_until_max_age";
    let Some((url, _admin)) = database(test, "idem_tx_replay_cache").await else { return };
    let store = store(&url, 4).await;
    let max_age = Duration::from_secs(2);
    let idem = Idem::new(store.clone()).replay_cache(ReplayCache::new(100).max_age(max_age));
    let app = test::init_service(App::new().app_data(idem).service(write)).await;
    let key = fresh_key();
    let send = || async {
        let request = TestRequest::post().uri("/rows").insert_header(("idempotency-key", key.as_str()));
        let response = test::call_service(&app, request.set_payload("ok").to_request()).await;
        let replayed = response.headers().contains_key("idempotent-replayed");
        (response.status(), replayed, test::read_body(response).await)
    };

    assert_eq!(send().await, (StatusCode::CREATED, false, "ok".into()));
    // The record, deleted behind the library's back: this process still
    // replays the response it stored, until max_age.
    sqlx::query("DELETE FROM idem_records").execute(store.pool()).await.expect("deleting the records");
    assert_eq!(send().await, (StatusCode::CREATED, true, "ok".into()), "replayed from the cache");
    assert_eq!(rows(&store).await.len(), 1);

    tokio::time::sleep(max_age + Duration::from_millis(200)).await;
    assert_eq!(send().await, (StatusCode::CREATED, false, "ok".into()), "past max_age, the store decides");
    assert_eq!(rows(&store).await.len(), 2);
}
